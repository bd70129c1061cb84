"""`python tests/e2e/clocked.py tune RUN ...`: the command line in a process of its own, on the real
executor behind the fake clock of tests/fake_clock.py (for tests that kill the tuner: each config runs
for real once, the loop's decisions come from the clock's table, not the machine's load).

AUTOTUNE_TEST_GAINS='[["padding", "padding_free", 2.0]]' sets the changes that pay; every other one
is 10% slower. AUTOTUNE_TEST_HOLD='3' holds the tuner in trial 3's first run (the file
`holding-3` written in the working folder, then no answer): a test kills it there, mid-trial, whatever
the machine's speed."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fake_clock import FakeClock  # noqa: E402

GAINS_ENV = "AUTOTUNE_TEST_GAINS"
HOLD_ENV = "AUTOTUNE_TEST_HOLD"


def main(argv: list[str]) -> int:
    import autotune.executors as executors
    from autotune.cli.main import main as cli
    from autotune.executors import LocalExecutor

    gains = {(name, value): factor for name, value, factor in json.loads(os.environ.get(GAINS_ENV, "[]"))}
    clock = FakeClock(LocalExecutor(extra_env={"CUDA_VISIBLE_DEVICES": ""}), gains, default=0.9)
    hold = os.environ.get(HOLD_ENV)
    if hold:
        run = clock.run

        def held(spec, trial_dir, timeout_s):
            if spec["kind"] == "trial" and trial_dir.name.startswith(f"{int(hold):03d}-"):
                Path(f"holding-{hold}").write_text(str(os.getpid()))
                time.sleep(600)      # killed here by the test
            return run(spec, trial_dir, timeout_s)

        clock.run = held
    executors.get_executor = lambda *args, **keys: clock
    return cli(argv)


if __name__ == "__main__":   # the executor's fork server imports this module again: run only here
    sys.exit(main(sys.argv[1:]))
