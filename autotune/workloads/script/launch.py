"""`script_launcher=`: the script run the way the user runs it, `accelerate launch [flags]` or `torchrun
[flags]`, one process on one device per trial.

A trial's runner starts the launcher with the runner itself as the launched module (`-m`, which both
launchers take) and the same spec, so the script runs in the process the launcher set up (its
environment: ACCELERATE_MIXED_PRECISION, LOCAL_RANK, WORLD_SIZE, ...), under the same hooks. The
launcher is the installed module (`python -m accelerate.commands.launch`, `python -m
torch.distributed.run`), in this interpreter: the command `accelerate` / `torchrun` runs.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from typing import TYPE_CHECKING

from ...util.errors import JobError

if TYPE_CHECKING:
    from ...config.messages import TrialSpec
    from ...engine.common import Reply

# The launcher's first words -> the module that is that command.
LAUNCHERS = {("accelerate", "launch"): "accelerate.commands.launch", ("torchrun",): "torch.distributed.run"}
# Flags that would start more than one process: a trial measures one device.
_COUNTS = ("--num_processes", "--num-processes", "--nproc_per_node", "--nproc-per-node", "--nnodes",
           "--num_machines", "--num-machines")
_FORM = "script_launcher=\"accelerate launch [its flags]\" or script_launcher=\"torchrun --nproc_per_node=1\""
LAUNCHED_ENV = "AUTOTUNE_SCRIPT_LAUNCHED"


def _head(words: list[str]) -> tuple[str, ...] | None:
    return next((head for head in LAUNCHERS if tuple(words[:len(head)]) == head), None)


def parse(text: str) -> tuple[str, ...]:
    """The launcher's words, checked: a known launcher, one process, no script of its own."""
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise JobError(f"script_launcher: {error}; expected {_FORM}") from None
    if not words:
        return ()
    head = _head(words)
    if head is None:
        raise JobError(f"script_launcher={text!r}: not a launcher autotune runs; expected {_FORM}")
    for index, word in enumerate(words):
        name, eq, value = word.partition("=")
        value = value if eq else (words[index + 1] if index + 1 < len(words) else "")
        if name in _COUNTS and value.strip() not in ("1", ""):
            raise JobError(f"script_launcher: {name} {value} starts more than one process; a trial measures one "
                           f"device, so use {name}=1 (or drop it)")
        if name in ("--multi_gpu", "--multi-gpu"):
            raise JobError("script_launcher: --multi_gpu starts a process per GPU; a trial measures one device, "
                           "so drop it")
        if word.endswith(".py") or name in ("-m", "--module"):
            raise JobError(f"script_launcher: {word!r} names what to run; give the launcher's words alone and the "
                           "script with script=")
    return tuple(words)


def command(words: tuple[str, ...] | list[str], module: str, args: list[str]) -> list[str]:
    """The launcher running `module` with `args`, in this interpreter."""
    head = _head(list(words))
    assert head is not None, "a launcher checked by parse()"
    return [sys.executable, "-m", LAUNCHERS[head], *words[len(head):], "-m", module, *args]


def shown(words: tuple[str, ...] | list[str], script: str, args: list[str]) -> list[str]:
    """The command as the user types it: the launcher's words, the script, its arguments."""
    return [*words, script, *args] if words else ["python", script, *args]


def _one_process(words: list[str]) -> list[str]:
    """Accelerate without a process count starts one per GPU: a trial is one process on one device."""
    if any(w.partition("=")[0] in _COUNTS for w in words):
        return words
    return [*words, "--num_processes=1"] if words[:2] == ["accelerate", "launch"] else words


def relay(spec: TrialSpec) -> Reply:
    """Run this trial again inside the launcher (the runner as the launched module, the spec as given);
    the launched runner's result is this one's."""
    from ...engine.train import TrialFault

    folder = spec.work_folder
    folder.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = folder / "launched_spec.json", folder / "launched_result.json"
    spec_path.write_text(json.dumps(spec.to_dict()))
    result_path.unlink(missing_ok=True)
    script = spec.script or {}
    words = _one_process(list(script["launcher"]))
    env = {**os.environ, LAUNCHED_ENV: "1", **script.get("env", {})}
    code = subprocess.call(command(words, "autotune.workloads.script.runner", [str(spec_path), str(result_path)]),
                           env=env)
    if not result_path.exists():
        raise TrialFault("crash", f"`{shlex.join(words)}` exited with code {code} before the script ran")
    result = json.loads(result_path.read_text())
    return {key: value for key, value in result.items() if key not in ("schema_version", "wall_s")}


def launched() -> bool:
    """Whether this runner is the one a launcher started."""
    return os.environ.get(LAUNCHED_ENV) == "1"
