"""Argument grammar only: `autotune tune RUN key=value ... [smoke] [fresh]`, `autotune suggest key=value ...`,
`autotune kb ...`. Each subcommand calls one function."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from .. import __version__
from ..util.errors import AutotuneError, JobError
from ..util.io import RESUME_HINT, DiskError
from ..config.job import JOB_KEYS, Job
from ..config.types import JsonObject
from ..config.knobs import CATALOG
from ..config.presets import DEMO_PRESET
from ..output.tune_result import EXIT_CODES, NO_GAIN_EXIT

if TYPE_CHECKING:  # the loop is imported when a tune starts, not for `--help`
    from ..loop.outcome import Outcome

TUNE_EPILOG = "keys:\n" + "\n".join(f"  {k:<16} {v}" for k, v in JOB_KEYS.items()) + (
    "\n\nstarting config (the baseline; default is the naive one: micro-batch 1, pad to max_len, fp32, eager):\n"
    + "\n".join(f"  {k:<28} {v.help}" for k, v in CATALOG.items())
    + "\n  gradient_accumulation_steps  alternative to per_device_train_batch_size"
    + "\n\nmodes:\n  smoke            CPU dry run on a tiny model of the job's architecture; with nothing else,\n"
    "                   the built-in demo (" + DEMO_PRESET + " preset, synthetic data, max_len=512, effective_batch=16)\n"
    "  resume           continue a stopped or killed run from runs/RUN/ (give no other words)\n"
    "  review           write a run's report, results and best config again, without a device\n"
    "  fresh            measure every trial, even those this knowledge base already holds for this job,\n"
    "                   device and software (by default they are replayed from the record)\n"
    "\nexamples:\n  autotune tune demo smoke\n"
    "  autotune tune qwen model=Qwen/Qwen2.5-0.5B dataset=tatsu-lab/alpaca max_len=2048 effective_batch=16 time=2h\n"
    "  autotune tune qwen2 from=sft.yaml time=2h        (model, dataset, length and batch from a `trl sft` config)\n"
    "  autotune tune again config=runs/qwen/job.yaml    (a job file; words after it override it)\n"
    "\nexit codes:\n" + "\n".join(f"  {code:<16} {what}" for code, what in EXIT_CODES.items()))


class UsageError(JobError):
    """A command line argparse refuses: one line, exit 2, like every other bad input."""


class _Parser(argparse.ArgumentParser):
    """argparse, whose refusals are one `autotune: ...` line (not usage plus error) pointing at --help."""

    def error(self, message: str) -> None:  # type: ignore[override]
        what = self.prog.removeprefix("autotune").strip()
        raise UsageError(f"{what + ': ' if what else ''}{message}; `{self.prog} --help` shows the usage")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="autotune", description="Makes a single-GPU fine-tuning job faster by "
                                     "experiment: measure a baseline, change one setting at a time, keep what is "
                                     "faster beyond noise and trains the same thing.")
    parser.add_argument("--version", action="version", version=f"autotune {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    tune = commands.add_parser("tune", help="run the whole loop on a job",
                               formatter_class=argparse.RawDescriptionHelpFormatter, epilog=TUNE_EPILOG,
                               usage="autotune tune RUN key=value ... [config=job.yaml] [from=sft.yaml] [smoke] [fresh] [--json] "
                               "[--fail-if-no-gain]  |  autotune tune RUN resume|review")
    tune.add_argument("run", metavar="RUN", help="name of the run; outputs go to runs/RUN/")
    tune.add_argument("words", nargs="*", metavar="key=value", help="the job (see keys below)")
    tune.add_argument("--runs-dir", default=os.environ.get("AUTOTUNE_RUNS", "runs"), help="where run folders go")
    tune.add_argument("--json", action="store_true", dest="as_json",
                      help="print one JSON object at the end on stdout (best knobs, speed-up and its interval, "
                           "realized speed-up, files, stop reason; schema autotune/schemas/tune_result.json); "
                           "progress goes to stderr")
    tune.add_argument("--fail-if-no-gain", action="store_true",
                      help=f"exit {NO_GAIN_EXIT} when no change was kept (the baseline is the best config)")
    from . import kb_commands
    from .suggest import add_parser

    add_parser(commands)
    kb_commands.add_parser(commands)
    return parser


def tune(run: str, words: list[str], runs_dir: str, as_json: bool = False, fail_if_no_gain: bool = False) -> int:
    """A tune (or a review); its exit code. With `as_json`, stdout holds only the result object."""
    import contextlib

    stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        job, outcome, config = _tune_or_review(run, words, runs_dir)
    if as_json:
        from ..output.tune_result import result, text

        print(text(result(job, outcome, config)), file=stdout, flush=True)
    if fail_if_no_gain and not any(r.decision == "keep" for r in outcome.records):
        _say(f"no change was kept: the baseline is the best config (--fail-if-no-gain: exit {NO_GAIN_EXIT})")
        return NO_GAIN_EXIT
    return 0


def _tune_or_review(run: str, words: list[str], runs_dir: str) -> tuple[Job, Outcome, JsonObject]:
    """The job from the words (or from the run folder, for resume and review), then the library's tune;
    with the run's best_config.json."""
    from ..api import job_from_words, tune as tune_job

    again = [w for w in words if w in ("resume", "review")]
    if again:
        from ..loop.resume import load_run

        if len(words) != 1:
            raise JobError(f"'{again[0]}' takes no other words: the job is runs/{run}/job.json "
                           f"(autotune tune {run} {again[0]})")
        job, kept = load_run(Path(runs_dir), run)  # `fresh` as the run was started: a resume runs the same way
        modes = [*again, *kept]
    else:
        job, modes = job_from_words(run, words, runs_dir)
    if "review" in modes:
        return (job, *review(run, job, runs_dir))
    with _console_display(job):
        outcome = tune_job(job, None, Path(runs_dir), fresh="fresh" in modes, resume="resume" in modes)
    return job, outcome, outcome.best_config


@contextlib.contextmanager
def _console_display(job: Any) -> Iterator[None]:
    """The tune's events (the "autotune" logger) drawn on the console while it runs: the live line, one
    line per trial, the final table. Only here: a library caller's logging is its own."""
    from ..output.display import ConsoleHandler, Progress
    from ..output.events import LOGGER

    handler = ConsoleHandler(Progress(max_trials=job.max_trials, time_budget_s=job.time_budget_s))
    saved = LOGGER.level, LOGGER.propagate
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.DEBUG)   # the live line's events are DEBUG: the display wants them all
    LOGGER.propagate = False         # drawn once, not again by a root handler
    try:
        yield
    finally:
        handler.progress.close()
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(saved[0])
        LOGGER.propagate = saved[1]


def review(run: str, job: Job, runs_dir: str) -> tuple[Outcome, JsonObject]:
    """The report, results and best config of a run written again from its folder; no device is used."""
    from ..loop.resume import review as rewrite

    script = None
    if job.script is not None:
        import shlex

        from ..workloads.script import ScriptAdapter

        script = ScriptAdapter.for_script(Path(job.script.path), job.script.configs, shlex.split(job.script.args), None,
                                          job.max_len, job.effective_batch, job.script.knobs,
                                          job.script.parsed, tuple(shlex.split(job.script.launcher)))
    outcome, config, _ = rewrite(Path(runs_dir), run, script)
    print(f"{run}: {len(outcome.records) - 1} trials; baseline {outcome.baseline['samples_per_s']:.3f} samples/s, "
          f"best x{outcome.speedup:.2f} (trial {outcome.best.trial}); report: {outcome.folder / 'report.md'}")
    if config.get("realized"):
        print(config["realized"].replace("**", ""))
    print(f"ready to run: {config['command']}")
    return outcome, config


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


DEBUG_ENV = "AUTOTUNE_DEBUG"
MESSAGE_CHARS = 1000  # an exception's text can be a library's page of context; the line keeps its start


def _debugging() -> bool:
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def _say(text: str) -> None:
    """One line on stderr (a message holding newlines, such as a child's stderr, is joined), after the
    traceback of the exception being handled when AUTOTUNE_DEBUG=1."""
    try:
        if _debugging() and sys.exc_info()[0] is not None:
            import traceback

            traceback.print_exc()
        line = " / ".join(part.strip() for part in text.splitlines() if part.strip())
        # Printable only: an escape byte in a name the user gave (or a file held) is shown, never sent.
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
        print("autotune: " + line, file=sys.stderr)
    except OSError:  # SIGHUP: the terminal is gone
        pass


def _what(args: argparse.Namespace) -> str:
    """The command that failed, in the words the user typed."""
    if args.command == "tune":
        return " ".join(["tune", args.run, *(w for w in args.words if w in ("resume", "review"))])
    return f"kb {args.kb_command}" if args.command == "kb" else str(args.command)


def main(argv: list[str] | None = None) -> int:
    """The `autotune` command (`argv` None: this process is the command, and ends after it) or a caller's
    words in Python (a list: the caller's process goes on, its helpers with it)."""
    from ..util import procs

    if argv is not None:
        return _main(argv)
    _open_standard_streams()
    # The command's own process: orphans of a trial that died reparent here to be ended, and the fork
    # server and resource tracker stop before it exits, so `autotune tune ... | tee log` ends. The
    # reaper's status is given back for a caller that runs `main()` in its own process and goes on.
    procs.become_subreaper()
    try:
        return _main(None)
    finally:
        procs.stop_helpers()
        procs.give_back_subreaper()


def _main(argv: list[str] | None) -> int:
    # SIGTERM and SIGHUP end a run the way Ctrl-C does: the running trial is killed, records stay.
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _interrupt)
    parser = _parser()
    try:
        args = _parse(parser, argv)
    except UsageError as error:
        _say(str(error))
        return 2
    if args.command is None:
        parser.print_help()
        return 2
    # Private by default (a shared machine): run folders, trials, reports, plots, the knowledge base, and
    # the files of the trials' child processes, which inherit it. Restored for in-process callers.
    previous_umask = os.umask(0o077)
    try:
        code = (args.handler(args) if args.command != "tune"
                else tune(args.run, args.words, args.runs_dir, args.as_json, args.fail_if_no_gain))
        if sys.stdout is not None:  # here, where a reader that has gone is a quiet exit, not at the interpreter's exit
            sys.stdout.flush()
        return code
    except JobError as error:
        _say(str(error))
        return 2
    except DiskError as error:
        _say(_recover(str(error), args))
        return 1
    except AutotuneError as error:
        _say(str(error))
        return 1
    except BrokenPipeError:
        return _closed_stdout()
    except RuntimeError as error:  # pathlib's `~user` of a user this machine does not know
        if "home directory" not in str(error):
            return _unforeseen(args, error)
        _say(f"{_what(args)}: a path starting ~ names a home folder this machine does not know; write the "
             "path out")
        return 2
    except KeyboardInterrupt:
        _say("interrupted; the trials recorded so far are in the run folder")
        return 130
    except Exception as error:  # noqa: BLE001 - the last resort: one line, never a traceback unless asked
        return _unforeseen(args, error)
    finally:
        os.umask(previous_umask)


def _unforeseen(args: argparse.Namespace, error: BaseException) -> int:
    message = " ".join(str(error).split())[:MESSAGE_CHARS]
    _say(f"{_what(args)}: {type(error).__name__}{': ' + message if message else ''}"
         + ("" if _debugging() else f"; run again with {DEBUG_ENV}=1 for the traceback"))
    return 1


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The arguments; a tune's key=value words may also follow its options (`tune r --json max_len=64`):
    argparse leaves those over, and they are the job's words as much as the ones before."""
    args, extra = parser.parse_known_args(argv)
    if extra and getattr(args, "command", None) == "tune" and not any(w.startswith("-") for w in extra):
        args.words = [*args.words, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if getattr(args, "command", None) == "tune" and not args.runs_dir:
        raise UsageError("--runs-dir is empty (or AUTOTUNE_RUNS is set to nothing); give the folder that holds "
                         "run folders, for example --runs-dir runs")
    return args


def _recover(message: str, args: argparse.Namespace) -> str:
    """A full disk in a tune: `resume` is what continues it, not running the same words again (the run
    folder is taken)."""
    if args.command == "tune" and "review" not in args.words:
        return message.replace(RESUME_HINT, f"free space, then `autotune tune {args.run} resume` continues the "
                                             "run (the trials recorded so far are kept)")
    return message


def _open_standard_streams() -> None:
    """`autotune ... >&-`: a standard stream started closed is /dev/null, written quietly. Left closed, the
    first file autotune opens would take its number, and a trial's child, whose stdout is inherited, would
    print into that file (a run's records, say); and Python's stream would be None, which print skips but
    a flush does not."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        opened = os.open(os.devnull, os.O_RDWR)
        if opened != fd:  # the lowest free number: the closed one, unless a lower one is closed too (done first)
            os.dup2(opened, fd)
            os.close(opened)
        if getattr(sys, name) is None:
            setattr(sys, name, open(fd, mode, closefd=False, encoding="utf-8", errors="backslashreplace"))


def _closed_stdout() -> int:
    """`autotune kb runs | head -1`: the reader has gone; a quiet exit, as `cat` makes. stdout is pointed
    at /dev/null so the interpreter's last flush raises nothing either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 141  # 128 + SIGPIPE, what a shell reports for a writer whose reader left


if __name__ == "__main__":
    sys.exit(main())
