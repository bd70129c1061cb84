"""The last step of a Hugging Face text tune: `python -m autotune.workloads.hf.realize SPEC RESULT`.

Writes what the hand-over files name (a preset's model with an offline tokenizer, the run's rows as a
dataset), builds each candidate's `trl sft` config by the names the installed SFTConfig takes, and runs
the baseline's and the best's through `trl sft` (the command's own entry point, `trl.cli.main`, in
processes forked from this one once it has imported TRL), interleaved on the same rows.

Timing without touching TRL: each file runs for N and for 2N optimizer steps, and its speed is N steps'
rows over the difference of the two runs' `train_runtime` (what the trainer itself reports), so process
start, dataset preparation, the first steps' compilation and the final save cancel out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any

from ...config.job import Job
from ...engine import common
from .handover_spec import Candidate, HandoverReply, HandoverSpec, Realized, Refused, RunRecord, TimedRun

RUNTIME = re.compile(r"'train_runtime': '?([0-9.]+)'?")
ERROR_TAIL = 1500


class RealizeFault(Exception):
    def __init__(self, state: str, reason: str) -> None:
        super().__init__(reason)
        self.state, self.reason = state, reason


def trl_executable() -> str:
    """The `trl` console script of this Python's install (a venv need not be on PATH)."""
    here = Path(sys.executable).parent / "trl"
    found = str(here) if here.exists() else shutil.which("trl")
    if not found:
        raise RealizeFault("crash", "the `trl` console script is not installed: pip install -e . (trl >= 1.16)")
    return found


def offline_tokenizer(vocab_size: int, pad_id: int) -> Any:
    """A tokenizer for a preset's rows (token ids already): its special ids are the ByteTokenizer's,
    every id of the model's vocabulary has a token, and it loads without a download."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from ...engine.data import ByteTokenizer

    specials = {"<pad>": ByteTokenizer.pad_token_id, "<s>": ByteTokenizer.bos_token_id,
                "</s>": ByteTokenizer.eos_token_id}
    vocab = dict(specials)
    vocab.update({f"<0x{b:02X}>": b + ByteTokenizer.offset for b in range(256)})
    vocab.update({f"<t{i}>": i for i in range(ByteTokenizer.vocab_size, vocab_size)})
    pad = next((token for token, i in vocab.items() if i == pad_id), "<pad>")
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<pad>")),
                                   pad_token=pad, bos_token="<s>", eos_token="</s>", unk_token="<pad>")


def save_model(job: Job, config: Any, folder: Path, pad_id: int) -> None:
    """The trials' initial weights (seeded construction from the run's config) and a tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    from ...engine.data import ByteTokenizer

    torch.manual_seed(job.seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if _byte_tokenized(job):
        tokenizer = offline_tokenizer(config.vocab_size, pad_id)
        # The config names the tokenizer's specials, so TRL has nothing to realign.
        model.config.pad_token_id, model.config.bos_token_id, model.config.eos_token_id = (
            pad_id, ByteTokenizer.bos_token_id, ByteTokenizer.eos_token_id)
        if model.generation_config is not None:
            model.generation_config.pad_token_id = pad_id
            model.generation_config.bos_token_id = ByteTokenizer.bos_token_id
            model.generation_config.eos_token_id = ByteTokenizer.eos_token_id
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(job.model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _byte_tokenized(job: Job) -> bool:
    """The run's rows are ByteTokenizer ids (presets and smoke runs), not the model's own tokenizer's."""
    from ...config.presets import PRESETS

    return job.model in PRESETS or job.smoke


def save_rows(rows: list[list[int]], folder: Path) -> None:
    from .export import DATA_FILE

    from ...util.io import write_text_atomic

    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / DATA_FILE, "".join(json.dumps({"input_ids": row}) + "\n" for row in rows))


def lora_targets(config: Any) -> list[str]:
    """The names peft's "all-linear" resolves to on this model (every linear layer but the output
    head), so a file names exactly the layers the trials' adapter was on."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    head = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                   if isinstance(module, torch.nn.Linear) and module is not head})


def warm_trl(env: dict[str, str]) -> None:
    """Import what `trl sft` imports, once, in this process: each timed run is then a fork of it that
    calls the command's own entry point (`trl.cli.main`, what the `trl` console script runs) and pays no
    import (about 7 s each on a 2-core CPU). The environment is set first: the hub's offline switch
    and the thread count are read at import."""
    os.environ.update(env)
    import trl.cli  # noqa: F401
    import trl.scripts.sft  # noqa: F401 - what `trl sft` imports on its first call


def _trl_main(words: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    """In the forked child: TRL's `trl sft` with these words, its output into `log`; never returns.
    `env`: the config's own environment (its allocator settings), set before anything touches CUDA."""
    code = 1
    try:
        os.environ.update(env or {})
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        # Python's own streams onto those numbers too: the forking process's may be bound elsewhere (a
        # test's capture, a display), and TRL's error then never reaches the log the refusal is read from.
        sys.stdout = open(1, "w", closefd=False, buffering=1, encoding="utf-8", errors="replace")
        sys.stderr = open(2, "w", closefd=False, buffering=1, encoding="utf-8", errors="replace")
        os.setsid()  # its loader workers end with it on a timeout
        _as_a_fresh_start()
        _launch_here()
        from trl.cli import main

        sys.argv = ["trl", *words]
        try:
            result = main()
            code = result if isinstance(result, int) else 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child reports through its exit code and its log
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _as_a_fresh_start() -> None:
    """What a new `trl` process would take from the environment at import, which this forked one
    imported before it was set (this runner's process comes from the fork server)."""
    import torch

    threads = os.environ.get("OMP_NUM_THREADS")
    if threads and threads.isdigit():
        torch.set_num_threads(int(threads))
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        import huggingface_hub.constants

        huggingface_hub.constants.HF_HUB_OFFLINE = True


def _launch_here() -> None:
    """`trl sft` runs its training script through `accelerate launch`, whose simple launcher (one
    process) starts `python SCRIPT ARGS` in a fresh interpreter: about 6 s of imports a run on a 2-core
    CPU, four runs a smoke hand-over, which `warm_trl` has already paid in this forked child. The script
    runs here instead, with the arguments and the environment the launcher gives it. Anything else the
    launcher starts (`-m`, mpirun, torchrun for several processes) is started as accelerate starts it."""
    import runpy

    from accelerate.commands import launch

    spawn = getattr(launch, "_run_subprocess", None)
    if spawn is None:  # another accelerate: its own launcher, in a fresh interpreter as before
        return

    def run_here(cmd: list[str], env: dict[str, str], quiet: bool) -> None:
        if len(cmd) < 2 or cmd[0] != sys.executable or cmd[1].startswith("-"):
            spawn(cmd, env, quiet)
            return
        os.environ.clear()
        os.environ.update(env)
        sys.argv = list(cmd[1:])
        runpy.run_path(cmd[1], run_name="__main__")

    launch._run_subprocess = run_here


def _forked(words: list[str], log: Path, timeout_s: float, env: dict[str, str] | None = None) -> int | None:
    """Exit code of `trl sft WORDS` in a forked child, or None when it ran past `timeout_s` (killed)."""
    import signal

    pid = os.fork()
    if pid == 0:
        _trl_main(words, log, env)
    deadline = time.monotonic() + timeout_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)
            return None
        time.sleep(0.05)


def vlm_lora_targets(config: Any) -> list[str]:
    """An image-text model's adapter as the trials put it: the language model's linear layers only
    (peft's "all-linear" would also adapt the vision tower and projector)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from .models import language_linears

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return language_linears(model)


def run_file(path: Path, steps: int, out: Path, log: Path, timeout_s: float,
             env: dict[str, str] | None = None) -> TimedRun:
    """One `trl sft --config FILE` run for `steps` optimizer steps: exit code, train_runtime, wall.
    `env`: what the file's header says to set in the environment (trl_args.environment)."""
    words = ["sft", "--config", str(path), "--max_steps", str(steps), "--output_dir", str(out),
             "--save_strategy", "no", "--report_to", "none", "--logging_steps", str(steps)]
    started = time.monotonic()
    code = _forked(words, log, timeout_s, env)
    text = log.read_text(errors="replace")
    shutil.rmtree(out, ignore_errors=True)  # the saved weights: only the runtime is wanted
    found = RUNTIME.findall(text)
    run: TimedRun = {"steps": steps, "exit_code": code, "wall_s": round(time.monotonic() - started, 3),
                     "train_runtime_s": float(found[-1]) if code == 0 and found else None}
    if run["train_runtime_s"] is None:
        run["error"] = _error_line(text, code)
    return run


def _error_line(text: str, code: int | None) -> str:
    if code is None:
        return "timed out"
    lines = [line for line in text.splitlines() if line.strip() and "Traceback" not in line]
    errors = [line for line in lines if re.match(r"^\w*(Error|Exception)\b", line.strip())]
    return (errors[-1] if errors else (lines[-1] if lines else f"exit code {code}")).strip()[:ERROR_TAIL]


def body(spec: HandoverSpec) -> HandoverReply:
    import yaml

    from .export import DATA_DIR, MODEL_DIR, model_is_saved, python_kwargs, trl_config
    from .trl_args import sft_fields
    from ...engine.data import read_rows
    from .models import load_config, uses_random_weights
    from ..vlm.vision import is_vlm

    job, run_path, work = spec.job, spec.run_path, spec.work_dir
    work.mkdir(parents=True, exist_ok=True)
    stored = read_rows(spec.rows_path)
    config = load_config(spec.model_config_path)
    fields = sft_fields()
    vision = is_vlm(config)
    model_dir = run_path / MODEL_DIR
    if not vision:  # an image-text run's rows hold processed image blocks, which `trl sft` does not take
        save_rows(stored["rows"], run_path / DATA_DIR)
        # Weights built from a config (presets, smoke, weights=random) exist only here: saved once.
        if uses_random_weights(job) and not (model_dir / "config.json").exists():
            save_model(job, config, model_dir, stored["pad_id"])
    targets = (vlm_lora_targets(config) if vision else lora_targets(config)) if job.method == "lora" else None
    files = {str(c.trial): trl_config(job, c.knobs, fields=fields, cpu=spec.cpu, run_path=run_path,
                                      lora_targets=targets) for c in spec.candidates}
    kwargs = {t: python_kwargs(f) for t, f in files.items()}
    if not spec.realize:
        return {"files": files, "kwargs": kwargs, "lora_target_modules": targets,
                "realized": {"state": "skipped", "reason": spec.skip_reason}}
    # The run copies read the run's rows (and its saved weights where trials built them from a config):
    # the same rows as every trial; for a preset on synthetic data they are the handed-over files as they are.
    run_files = {}
    for trial, content in files.items():
        copy = dict(content)
        for key in ("dataset_name", "dataset_config", "datasets"):
            copy.pop(key, None)
        copy["dataset_name"] = str(run_path / DATA_DIR)
        if uses_random_weights(job) and not model_is_saved(job):
            copy["model_name_or_path"] = str(model_dir)
        run_files[trial] = work / f"trial-{trial}.yaml"
        run_files[trial].write_text(yaml.safe_dump(copy, sort_keys=False))
    return {"files": files, "kwargs": kwargs, "lora_target_modules": targets,
            "realized": interleave(spec, run_files, work)}


def _env(spec: HandoverSpec) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(common.OWNER_ENV, None)
    env.update(TOKENIZERS_PARALLELISM="false", HF_HUB_DISABLE_TELEMETRY="1")
    if spec.cpu:
        # As trials run on a CPU: one core left for everything else (step times swing otherwise).
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 2) - 1))
    if spec.offline:
        env["HF_HUB_OFFLINE"] = "1"  # everything is on disk: no hub retries inside the timed runs
    return env


def interleave(spec: HandoverSpec, files: dict[str, Path], work: Path) -> Realized:
    """Baseline and best, N then 2N steps, in turn; a best that TRL refuses gives way to the next
    candidate (the kept configs before it, back to the baseline)."""
    from .trl_args import environment, outside_trl

    env, timeout = _env(spec), spec.run_timeout_s
    warm_trl(env)
    runs: list[RunRecord] = []

    def go(candidate: Candidate, steps: int, label: str) -> TimedRun:
        n = len(runs)
        # Run as the user is told to run it: the header's environment lines set (the allocator's).
        run = run_file(files[str(candidate.trial)], steps, work / f"out-{n}", work / f"run-{n:02d}-{label}.log",
                       timeout, environment(candidate.knobs))
        runs.append({"config": label, "trial": candidate.trial, **run})
        return run

    *tried, baseline = spec.candidates
    first = go(baseline, baseline.steps, "baseline")
    if first["train_runtime_s"] is None:
        return {"state": "failed", "reason": f"`trl sft` refused the baseline's file: {first['error']}", "runs": runs,
                "refused": [{"trial": 0, "error": first["error"]}], "best_trial": 0}
    refused: list[Refused] = []
    best, best_first = baseline, first
    for candidate in tried:
        run = go(candidate, candidate.steps, "best")
        if run["train_runtime_s"] is not None:
            best, best_first = candidate, run
            break
        refused.append({"trial": candidate.trial, "error": run["error"]})
    if best is baseline:
        reason = ("no kept config ran in `trl sft`; the baseline is handed over" if tried else
                  "nothing was kept: the baseline's file ran in `trl sft` and is the best")
        return {"state": "complete", "reason": reason, "runs": runs, "refused": refused, "best_trial": 0,
                "speedup": 1.0}
    rounds: list[dict[str, float]] = []
    for number in range(spec.rounds):
        short = {"baseline": first, "best": best_first} if number == 0 else {
            "baseline": go(baseline, baseline.steps, "baseline"), "best": go(best, best.steps, "best")}
        long = {"baseline": go(baseline, 2 * baseline.steps, "baseline"), "best": go(best, 2 * best.steps, "best")}
        speeds: dict[str, float] = {}
        for label, candidate in (("baseline", baseline), ("best", best)):
            a, b = short[label]["train_runtime_s"], long[label]["train_runtime_s"]
            if a is None or b is None or b <= a:
                speeds = {}
                break
            speeds[label] = candidate.steps * spec.job.effective_batch / (b - a)
        if speeds:
            rounds.append(speeds)
    base: Realized = {"state": "complete", "runs": runs, "refused": refused, "best_trial": best.trial}
    if not rounds:
        failed = next((r for r in runs if r["train_runtime_s"] is None), None)
        return {**base, "state": "failed", "reason": (f"a timed run failed: {failed['error']}" if failed else
                "the longer runs were not slower than the shorter ones: the window was noise")}
    # What `trl sft` cannot be told (fp8 conversion) is not in the timed runs: said, not hidden.
    untimed = [line for line in outside_trl(best.knobs) if not line.startswith("run it with")]
    return {**base, "reason": ("timed without what no trl sft field does: " + "; ".join(untimed)) if untimed else "",
            "rounds": len(rounds),
            "baseline_samples_per_s": median(r["baseline"] for r in rounds),
            "best_samples_per_s": median(r["best"] for r in rounds),
            "speedup": median(r["best"] / r["baseline"] for r in rounds)}


def entry(spec_path: Path, result_path: Path) -> int:
    return common.execute(body, lambda error: False, RealizeFault, spec_path, result_path, HandoverSpec.from_dict)


if __name__ == "__main__":
    sys.exit(entry(Path(sys.argv[1]), Path(sys.argv[2])))
