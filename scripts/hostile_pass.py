"""A hostile-input pass over the command line: hundreds of cases a new user (or a hostile file) could give
autotune, each checked for the promises of the README's "bad input" section.

Usage: python scripts/hostile_pass.py [--only SUBSTRING] [--timeout SECONDS] [--keep] [--no-kill]

How the cases are chosen: systematically, as a matrix of *where an input goes* x *what class of input*,
not by picking cases that are known to pass.

- Where: every slot of every command that takes a path (tune's dataset=, config=, from=, script=,
  script_configs=, ssh_config=, ssh_key=, model=, kb=, --runs-dir; suggest's model=; kb import/export/graph
  FILE and --kb), every numeric key of `tune` and `suggest`, every free-text word, and every file of a
  run folder that `resume` and `review` read.
- What: special files (FIFO, socket, character device, folder), links (to a file outside, dangling, a
  loop), huge and odd numbers (31 and 5,000 digits, negative, 1e999, nan, hex, Arabic-Indic digits),
  control characters (ESC, CSI, BEL, CR, the bidi override), encodings (Latin-1, UTF-16, a BOM, bytes that
  are not UTF-8 on the command line), malformed YAML / JSON / CSV (torn, tabs, tags, bombs, duplicates,
  nesting, NaN, wrong top-level types), missing and extra keys and words, links and special files planted
  in a run folder or a copied run folder, and runs killed mid-way (SIGKILL, SIGTERM, SIGINT) then resumed
  or reviewed.

Every case runs in its own process (forked from one that imported autotune once, in its own session so
a hang can be killed whole), in a sandbox: the user's folder, an `outside` folder that links point into,
and HOME. Checked for each: no traceback (nor "Exception ignored") on the screen; no raw control
character on the screen; a refusal is one line; no file changed outside the run folders and the
knowledge base (every other path of the sandbox hashed before and after: content, kind, mode, link
target); no hang (a per-case timeout, the process group killed past it). A case that could be accepted
carries `max_trials=0` last, so an accepted input is refused by that word instead of starting a tune.
The summary table gives, per class, the cases, how they ended, and the failures; the failures are
listed after it. Exit status 1 when any case failed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
GUARD = "max_trials=0"  # last word of a case that could be accepted: refused there, no tune starts
HF = ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=4"]
TINY_RUN = ["model=mlp", "mlp_rows=64", "mlp_width=8", "mlp_depth=1", "max_len=8", "effective_batch=4",
            "max_trials=2", "time=40s", "smoke"]
# autotune's own: run folders, the knowledge base, its caches; matplotlib's font cache and config folder (made
# the first time a report draws a plot); the pass's own files
OWNED = ("user/runs", "kb", "home/.autotune", "home/.cache", "home/.config/matplotlib", "io")


@dataclass
class Case:
    id: str
    kind: str                       # the input class (the table's rows)
    argv: list[str]
    setup: Callable[[Path], None] | None = None
    timeout: float = 0.0            # 0: the pass's default
    pipe: bool = False              # a real process, its stdout closed at once
    kill: tuple[int, float] | None = None  # (signal, after seconds): a run killed mid-way, then argv run
    owns: tuple[str, ...] = ()      # paths (from the sandbox) the command was asked to write: kb export FILE
    usage: bool = False             # expected: the usage on stdout, exit 2, nothing on stderr (a bare `autotune`)
    result: dict[str, Any] = field(default_factory=dict)
    pids: list[int] = field(default_factory=list)  # the autotune processes the case ran: their /tmp folders are looked for


# ------------------------------------------------------------------------------------------- sandbox

def make_sandbox(root: Path) -> None:
    user, outside, home = root / "user", root / "outside", root / "home"
    for folder in (user, outside, home / ".ssh", home / ".config", root / "kb", root / "io"):  # a home has .config
        folder.mkdir(parents=True)
    (outside / "precious.txt").write_text("the user's own file, never to change\n")
    (outside / "junk.txt").write_text("not a dataset, not a config\x01\n")
    (outside / "folder").mkdir()
    (outside / "folder" / "keep.txt").write_text("keep\n")
    (home / ".ssh" / "config").write_text("Host box\n  HostName 127.0.0.1\n")
    (user / "plain.py").write_text("print('training')\n")
    (user / "data.jsonl").write_text('{"text": "hello"}\n')
    (user / "precious.txt").write_text("in the user's folder\n")
    (user / "h").mkdir()


def special(path: Path, variant: str) -> None:
    """`path` made as the variant of a file class: fifo, socket, device, folder, link, dangling, loop, empty."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if variant == "fifo":
        os.mkfifo(path)
    elif variant == "socket":
        here = os.getcwd()
        os.chdir(path.parent)  # a socket's path has at most 107 bytes: bound by its short name
        try:
            sock = socket.socket(socket.AF_UNIX)
            sock.bind(path.name)
            sock.close()  # the file stays, nothing listens
        finally:
            os.chdir(here)
    elif variant == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a null device of the sandbox's own
    elif variant == "folder":
        path.mkdir()
    elif variant == "link":
        path.symlink_to(SANDBOX / "outside" / "junk.txt")
    elif variant == "dangling":
        path.symlink_to(SANDBOX / "outside" / "made-by-autotune")
    elif variant == "loop":
        path.symlink_to(path.name)
    elif variant == "empty":
        path.write_text("")


SANDBOX = Path()


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path of the sandbox outside OWNED: kind, mode, size, content hash, link target."""
    out: dict[str, tuple] = {}
    for base, folders, names in os.walk(root):
        rel = os.path.relpath(base, root)
        folders[:] = [f for f in folders if os.path.normpath(os.path.join(rel, f)) not in OWNED]
        for name in folders + names:
            path = os.path.join(base, name)
            info = os.lstat(path)
            digest = ""
            if stat.S_ISREG(info.st_mode):
                with open(path, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
            target = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
            out[os.path.relpath(path, root)] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode),
                                                info.st_size if digest else 0, digest, target)
    return out


# --------------------------------------------------------------------------------------------- cases

READ_SLOTS: dict[str, tuple[str, Callable[[str], list[str]]]] = {
    # slot: (name suffix, argv for a path there)
    "tune dataset=": (".jsonl", lambda p: ["tune", "r", *HF[:1], f"dataset={p}", *HF[2:], GUARD]),
    "tune config=": (".yaml", lambda p: ["tune", "r", f"config={p}", GUARD]),
    "tune from=": (".yaml", lambda p: ["tune", "r", f"from={p}", GUARD]),
    "tune script=": (".py", lambda p: ["tune", "r", f"script={p}", "effective_batch=4", GUARD]),
    "tune script_configs=": (".yaml", lambda p: ["tune", "r", "script=plain.py", f"script_configs={p}",
                                                 "effective_batch=4", GUARD]),
    "tune ssh_config=": ("", lambda p: ["tune", "r", *HF, "host=box", f"ssh_config={p}", GUARD]),
    "tune ssh_key=": ("", lambda p: ["tune", "r", *HF, "host=me@127.0.0.1", f"ssh_key={p}", GUARD]),
    "tune model=": ("", lambda p: ["tune", "r", f"model=./{p}", *HF[1:], GUARD]),
    "suggest model=": ("", lambda p: ["suggest", f"model=./{p}", "max_len=512"]),
    "kb import FILE": (".json", lambda p: ["kb", "import", p]),
    "kb list --kb": ("", lambda p: ["kb", "list", "--kb", p]),
    "tune kb=": ("", lambda p: ["tune", "r", *HF, f"kb={p}", GUARD]),
    "tune --runs-dir": ("", lambda p: ["tune", "r", *HF, "--runs-dir", p, GUARD]),
    "kb export FILE": (".json", lambda p: ["kb", "export", p]),
    "kb graph FILE": (".png", lambda p: ["kb", "graph", p]),
}
FILE_VARIANTS = ("fifo", "socket", "device", "folder", "link", "dangling", "loop", "empty")


def file_cases() -> list[Case]:
    cases = []
    for slot, (suffix, argv) in READ_SLOTS.items():
        for variant in FILE_VARIANTS:
            name = f"h/{slot.split()[0]}-{abs(hash(slot)) % 10**6}-{variant}{suffix}"
            kind = "links" if variant in ("link", "dangling", "loop") else "special files"
            # kb export and kb graph write the file they are given (through a link: the file it names)
            owns = (f"user/{name}", "outside/junk.txt", "outside/made-by-autotune") if slot.endswith("FILE") \
                and not slot.startswith("kb import") else ()
            if slot in ("kb list --kb", "tune kb=") and variant == "folder":
                owns = (f"user/{name}", f"user/{name}/.store.lock")  # the knowledge base named: its lock
            cases.append(Case(f"{slot} {variant}", kind, argv(name),
                              lambda root, name=name, variant=variant: special(root / "user" / name, variant),
                              owns=owns))
    return cases


HUGE = ("1" + "0" * 30, "9" * 5000, "-1", "1e999", "nan", "0x10", "\u0669" * 21)
TUNE_NUMBERS = {"max_len": "", "effective_batch": "", "max_trials": "", "seed": "", "time": "s", "mem_limit": "GB",
                "mem_margin": "", "per_device_train_batch_size": "", "dataloader_num_workers": "",
                "dataloader_prefetch_factor": "", "gradient_accumulation_steps": "", "min_gain": "",
                "max_image_pixels": "", "llm_timeout": "s", "mlp_rows": ""}
SUGGEST_NUMBERS = ("max_len", "effective_batch", "gpu_mem", "padding_share", "length_spread", "data_wait_share")


def number_cases() -> list[Case]:
    cases = []
    for key, unit in TUNE_NUMBERS.items():
        for n, value in enumerate(HUGE):
            base = ["model=mlp"] if key == "mlp_rows" else [w for w in HF if not w.startswith(f"{key}=")]
            extra = ["llm=some-model"] if key == "llm_timeout" else []
            cases.append(Case(f"tune {key}={value[:12]} #{n}", "huge numbers",
                              ["tune", "r", *base, *extra, f"{key}={value}{unit}", GUARD]))
    for key in SUGGEST_NUMBERS:
        for n, value in enumerate(HUGE):
            words = {"model": "7B", "max_len": "512", key: value}
            cases.append(Case(f"suggest {key}={value[:12]} #{n}", "huge numbers",
                              ["suggest", *(f"{k}={v}" for k, v in words.items())], timeout=20))
    return cases


CONTROL = {"ESC": "\x1b[2J\x1b[31m", "CSI": "\x9b31m", "BEL": "\x07", "CR": "over\rwrite", "bidi": "\u202egnp.exe"}


def control_cases() -> list[Case]:
    cases = []
    for name, text in CONTROL.items():
        for key in ("gpu", "dataset", "only", "script_args", "llm", "mlflow_experiment"):
            cases.append(Case(f"tune {key}= {name}", "control characters",
                              ["tune", "r", *[w for w in HF if not w.startswith(f"{key}=")], f"{key}={text}", GUARD]))
        cases.append(Case(f"tune RUN {name}", "control characters", ["tune", f"r{text}", *HF, GUARD]))
        cases.append(Case(f"kb show {name}", "control characters", ["kb", "show", f"P{text}"]))
        cases.append(Case(f"kb list --knob {name}", "control characters", ["kb", "list", "--knob", text]))
    # a crashing script's escape codes: the trial's reason reaches the progress line and the table
    cases.append(Case("script crash escape codes", "control characters",
                      ["tune", "esc", "script=crash.py", "effective_batch=4", "max_trials=1", "time=30s"],
                      lambda root: (root / "user" / "crash.py").write_text(
                          "import sys\nsys.stderr.write('\\x1b[2J\\x1b]0;owned\\x07 boom\\n')\nsys.exit(3)\n"),
                      timeout=240))
    return cases


def _write(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda root: (root / "user" / "h" / name).write_bytes(data)


ENCODED = {
    "latin1": "caf\u00e9".encode("latin-1"), "utf16": '{"text": "hi"}\n'.encode("utf-16"),
    "bom": b"\xef\xbb\xbf" + b'{"text": "hi"}\n', "nul": b'{"text": "a\x00b"}\n',
}


def encoding_cases() -> list[Case]:
    cases = []
    for name, data in ENCODED.items():
        cases.append(Case(f"dataset {name}", "encodings", ["tune", "r", HF[0], f"dataset=h/enc-{name}.jsonl",
                                                           *HF[2:], GUARD], _write(f"enc-{name}.jsonl", data)))
        cases.append(Case(f"config {name}", "encodings", ["tune", "r", f"config=h/enc-{name}.yaml", GUARD],
                          _write(f"enc-{name}.yaml", b"model: mlp\n" + data)))
        cases.append(Case(f"kb import {name}", "encodings", ["kb", "import", f"h/enc-{name}.json"],
                          _write(f"enc-{name}.json", data)))
        cases.append(Case(f"script {name}", "encodings", ["tune", "r", f"script=h/enc-{name}.py", "effective_batch=4",
                                                          GUARD], _write(f"enc-{name}.py", b"x = '" + data + b"'\n")))
    for name, argv in (("dataset", ["tune", "r", HF[0], "dataset=d\udcff.jsonl", *HF[2:], GUARD]),
                       ("run name", ["tune", "r\udcff", *HF, GUARD]), ("kb show", ["kb", "show", "P\udcff"]),
                       ("suggest model", ["suggest", "model=m\udcff", "max_len=64"]),
                       ("kb export", ["kb", "export", "h/out\udcff.json"])):
        # kb export writes the file it is given, whatever bytes name it
        owns = ("user/h/out\udcff.json",) if name == "kb export" else ()
        cases.append(Case(f"argv not UTF-8: {name}", "encodings", argv, owns=owns))
    return cases


YAML = {"tabs": "model: mlp\n\tmax_len: 64\n", "python tag": "model: !!python/object:os.system {}\n",
        "unclosed": "model: [mlp\n", "scalar": "just words\n", "nested 10000": "a: " + "[" * 10000 + "]" * 10000 + "\n",
        "bomb": "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh")),
        "duplicate nested": "model: mlp\nstart: {padding: longest, padding: max_length}\n",
        "list key": "? [a, b]\n: 1\nmodel: mlp\n", "big int": "model: mlp\nseed: " + "7" * 4400 + "\n",
        "alias loop": "a: &a [*a]\n", "null key": "~: 1\nmodel: mlp\n", "float key": "1.5: x\nmodel: mlp\n"}
JSON = {"trailing garbage": '{"schema_version": 1} junk', "NaN": '{"schema_version": NaN}', "list": "[1, 2]",
        "duplicate keys": '{"schema_version": 1, "schema_version": 2}', "big number": '{"a": ' + "9" * 5000 + "}",
        "nested 100000": "[" * 100000 + "]" * 100000, "claims not list": '{"schema_version": 1, "claims": {}}',
        "claim without id": '{"schema_version": 1, "claims": [{"schema_version": 1}]}',
        "children not list": '{"schema_version": 1, "claim_history": [{"claim": "P01", "op": "split", "children": 5}]}',
        "run id number": '{"schema_version": 1, "runs": [{"schema_version": 1, "run_id": 5}]}'}
CSV = {"unbalanced quote": 'text,label\n"open,1\n', "header only": "text,label\n", "nul": "text\na\x00b\n",
       "200k field": "text\n" + "a" * 200_000 + "\n", "one column per row": "a,b,c\n1\n2,3,4,5,6\n"}


def malformed_cases() -> list[Case]:
    cases = []
    for name, text in YAML.items():
        for slot in ("config", "from"):
            cases.append(Case(f"{slot}= YAML {name}", "malformed YAML/JSON/CSV",
                              ["tune", "r", f"{slot}=h/y-{slot}-{abs(hash(name)) % 10**6}.yaml", GUARD],
                              _write(f"y-{slot}-{abs(hash(name)) % 10**6}.yaml", text.encode())))
        cases.append(Case(f"script_configs= YAML {name}", "malformed YAML/JSON/CSV",
                          ["tune", "r", "script=plain.py", f"script_configs=h/ys-{abs(hash(name)) % 10**6}.yaml",
                           "effective_batch=4", GUARD], _write(f"ys-{abs(hash(name)) % 10**6}.yaml", text.encode())))
    for name, text in JSON.items():
        cases.append(Case(f"kb import JSON {name}", "malformed YAML/JSON/CSV",
                          ["kb", "import", f"h/j-{abs(hash(name)) % 10**6}.json"],
                          _write(f"j-{abs(hash(name)) % 10**6}.json", text.encode())))
        cases.append(Case(f"dataset JSON {name}", "malformed YAML/JSON/CSV",
                          ["tune", "r", HF[0], f"dataset=h/jd-{abs(hash(name)) % 10**6}.json", *HF[2:], GUARD],
                          _write(f"jd-{abs(hash(name)) % 10**6}.json", text.encode())))
    for name, text in CSV.items():
        cases.append(Case(f"dataset CSV {name}", "malformed YAML/JSON/CSV",
                          ["tune", "r", HF[0], f"dataset=h/c-{abs(hash(name)) % 10**6}.csv", *HF[2:], GUARD],
                          _write(f"c-{abs(hash(name)) % 10**6}.csv", text.encode())))
    return cases


def key_cases() -> list[Case]:
    words = {
        "no words": ["tune", "r"], "missing model": ["tune", "r", *HF[1:], GUARD], "unknown key": ["tune", "r", *HF, "colour=red"],
        "key twice": ["tune", "r", *HF, "max_len=32"], "empty value": ["tune", "r", *HF, "gpu="],
        "bare word": ["tune", "r", *HF, "fast"], "no key": ["tune", "r", *HF, "=64"], "mode twice": ["tune", "r", *HF, "fresh", "fresh", GUARD],
        "resume with words": ["tune", "r", "resume", "max_len=8"], "review nothing": ["tune", "nothing", "review"],
        "resume nothing": ["tune", "nothing", "resume"], "kb show nothing": ["kb", "show", "NOPE"],
        "kb import missing": ["kb", "import", "h/missing.json"], "suggest no max_len": ["suggest", "model=7B"],
        "suggest unknown key": ["suggest", "model=7B", "max_len=64", "colour=red"], "no command": [],
        "unknown command": ["frobnicate"], "unknown option": ["tune", "r", "--frob", *HF],
        "option value missing": ["tune", "r", "--runs-dir"], "kb no subcommand": ["kb"],
        "run dot-dot": ["tune", "..", *HF, GUARD], "run slash": ["tune", "a/b", *HF, GUARD],
        "run 300 chars": ["tune", "r" * 300, *HF, GUARD], "word 5000 chars": ["tune", "r", *HF, "gpu=" + "g" * 5000],
        "config unknown key": ["tune", "r", "config=h/unknown.yaml", GUARD],
        "only unknown knob": ["tune", "r", *HF, "only=warp_drive", GUARD],
        "script with model": ["tune", "r", "script=plain.py", "model=mlp", "effective_batch=4", GUARD],
        "host ray with ssh_key": ["tune", "r", *HF, "host=ray", "ssh_key=plain.py", GUARD],
    }
    setup = _write("unknown.yaml", b"model: mlp\ncolour: red\n")
    return [Case(f"keys: {name}", "missing/extra keys", argv, setup if "config" in name else None,
                 usage=name == "no command") for name, argv in words.items()]


# The script job's own words, added since the first rounds: a launcher, a name map, parity's strictness and
# the script's arguments, each given what a careless or hostile user might.
SCRIPT = ["script=plain.py", "effective_batch=4"]
SCRIPT_WORDS = {
    "script_launcher": ("rm -rf /", "accelerate launch --num_processes=8", "torchrun --nproc_per_node=4",
                        "torchrun --nnodes=2", "python -c 'import os'", "accelerate", "\x1b[31mred", "'unclosed",
                        "deepspeed", "accelerate launch --config_file /etc/passwd"),
    "script_knobs": ("a:b:c", ":", "micro:warp_drive", "micro:", ":per_device_train_batch_size",
                     "x:per_device_train_batch_size,x:gradient_accumulation_steps", "m" * 5000 + ":precision",
                     "micro\x1b:precision"),
    "strict_parity": ("maybe", "2", "", "truee"),
    "script_args": ("'unclosed", "--config \x1b[2J", "--config " + "c" * 5000, "--config h/missing.yaml",
                    "--config /dev/zero"),
}


def script_cases() -> list[Case]:
    cases = []
    for key, values in SCRIPT_WORDS.items():
        for n, value in enumerate(values):
            cases.append(Case(f"script {key}={value[:16]!r} #{n}", "script words",
                              ["tune", "r", *SCRIPT, f"{key}={value}", GUARD], timeout=60))
    return cases


PLANTS: dict[str, Callable[[Path], None]] = {
    ".lock link": lambda f: _relink(f / ".lock", SANDBOX / "outside" / "precious.txt"),
    "job.json link": lambda f: _relink(f / "job.json", SANDBOX / "outside" / "precious.txt"),
    "experiments dangling": lambda f: _relink(f / "experiments.jsonl", SANDBOX / "outside" / "made.jsonl"),
    "state.json fifo": lambda f: (f.joinpath("state.json").unlink(), os.mkfifo(f / "state.json")),
    "job.json fifo": lambda f: (f.joinpath("job.json").unlink(), os.mkfifo(f / "job.json")),
    "frame.json folder": lambda f: (f.joinpath("frame.json").unlink(), f.joinpath("frame.json").mkdir()),
    "trials link": lambda f: (shutil.rmtree(f / "trials"), (f / "trials").symlink_to(SANDBOX / "outside" / "folder")),
    "trial spec link": lambda f: _relink(next((f / "trials").iterdir()) / "spec.json",
                                         SANDBOX / "outside" / "precious.txt"),
    "report.md link": lambda f: _relink(f / "report.md", SANDBOX / "outside" / "precious.txt"),
    "state.json torn": lambda f: f.joinpath("state.json").write_text('{"schema_version": 2, "run'),
    "state.json deep": lambda f: f.joinpath("state.json").write_text("[" * 100000 + "]" * 100000),
    "job.json 5000 digits": lambda f: f.joinpath("job.json").write_text('{"run": ' + "9" * 5000 + "}"),
    "experiments torn tail": lambda f: f.joinpath("experiments.jsonl").open("a").write('{"trial": 9, "sta'),
    "experiments escape": lambda f: _edit_first(f, reason="\x1b[2J\x1b]0;owned\x07"),
    "experiments not a baseline": lambda f: _edit_first(f, decision="keep"),
    "state not stopped": lambda f: _edit_state(f, stop_reason=None),
}


def _relink(path: Path, target: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(target)


def _edit_first(folder: Path, **changes: Any) -> None:
    lines = (folder / "experiments.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), **changes})
    (folder / "experiments.jsonl").write_text("\n".join(lines) + "\n")


def _edit_state(folder: Path, **changes: Any) -> None:
    data = json.loads((folder / "state.json").read_text())
    (folder / "state.json").write_text(json.dumps({**data, **changes}))


def run_folder_cases() -> list[Case]:
    cases = []
    for name, plant in PLANTS.items():
        for mode in ("resume", "review"):
            run = f"p{abs(hash(name)) % 10**6}{mode[:3]}"
            cases.append(Case(f"{mode}: {name}", "run folder plants", ["tune", run, mode],
                              lambda root, run=run, plant=plant: (_copy_base(root, run), plant(root / "user" / "runs" / run)),
                              timeout=120))
    for mode in ("resume", "review"):  # a copied folder: job.json names the original
        cases.append(Case(f"{mode}: copied folder", "run folder plants", ["tune", f"copy-{mode}", mode],
                          lambda root, mode=mode: shutil.copytree(root / "user" / "runs" / "base",
                                                                  root / "user" / "runs" / f"copy-{mode}", symlinks=True)))
        cases.append(Case(f"{mode}: run folder a link", "run folder plants", ["tune", f"link-{mode}", mode],
                          lambda root, mode=mode: (root / "user" / "runs" / f"link-{mode}").symlink_to(
                              root / "outside" / "folder")))
    return cases


def _copy_base(root: Path, run: str) -> None:
    """The base run under another name, its job.json saying that name (an honest folder, then damaged)."""
    target = root / "user" / "runs" / run
    shutil.copytree(root / "user" / "runs" / "base", target, symlinks=True)
    job = json.loads((target / "job.json").read_text())
    (target / "job.json").write_text(json.dumps({**job, "run": run}))


def kill_cases() -> list[Case]:
    cases = []
    # "early" lands while the first trial waits for the fork server's imports; "mid" inside a trial.
    for name, signum, after in (("SIGKILL early", signal.SIGKILL, 4), ("SIGKILL mid", signal.SIGKILL, 14),
                                ("SIGTERM early", signal.SIGTERM, 4), ("SIGINT early", signal.SIGINT, 4),
                                ("SIGTERM mid", signal.SIGTERM, 10), ("SIGINT mid", signal.SIGINT, 10)):
        run = f"k{signum}-{after}"
        for mode in ("review", "resume"):
            cases.append(Case(f"killed {name}, then {mode}", "killed mid-run", ["tune", f"{run}{mode[:3]}", mode],
                              kill=(signum, after), timeout=240))
    cases.append(Case("kb list | closed pipe", "closed stdout", ["kb", "list", "--all", "--json"], pipe=True))
    cases.append(Case("kb runs | closed pipe", "closed stdout", ["kb", "runs"], pipe=True))
    cases.append(Case("suggest | closed pipe", "closed stdout", ["suggest", "model=7B", "max_len=512"], pipe=True))
    return cases


def all_cases() -> list[Case]:
    return (file_cases() + number_cases() + control_cases() + encoding_cases() + malformed_cases() + key_cases()
            + run_folder_cases() + script_cases() + kill_cases())


# ---------------------------------------------------------------------------------------------- running

def env_for(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTOTUNE_", "MLFLOW_", "OPENAI_"))}
    env.update(HOME=str(root / "home"), AUTOTUNE_KB=str(root / "kb"), PYTHONPATH=str(REPO), TERM="dumb")
    return env


def run_forked(argv: list[str], root: Path, timeout: float,
               pids: list[int] | None = None) -> tuple[int | None, str, str, float]:
    """`autotune ARGV` in a forked child (its own session, stdin /dev/null, stdout and stderr to files)."""
    out_path, err_path = root / "io" / "out.txt", root / "io" / "err.txt"
    started = time.monotonic()
    pid = os.fork()
    if pid and pids is not None:
        pids.append(pid)
    if pid == 0:  # the child
        code = 99
        try:
            os.setsid()
            os.chdir(root / "user")
            os.environ.clear()
            os.environ.update(env_for(root))
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                opened = os.open(path, flags, 0o600)
                os.dup2(opened, fd)
                os.close(opened)
            from autotune.cli.main import main

            code = main(argv)
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - what escapes main is what the pass looks for
            import traceback

            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 98)
    code = None
    while time.monotonic() - started < timeout:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        time.sleep(0.05)
    if code is None:
        _kill_group(pid)
        os.waitpid(pid, 0)
    wall = time.monotonic() - started
    return code, out_path.read_text(errors="replace"), err_path.read_text(errors="replace"), wall


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_process(argv: list[str], root: Path, timeout: float, close_stdout: bool = False,
                kill: tuple[int, float] | None = None,
                pids: list[int] | None = None) -> tuple[int | None, str, str, float]:
    """`python -m autotune.cli.main ARGV` as a real process (pipes, signals), killed whole past `timeout`."""
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-m", "autotune.cli.main", *argv], cwd=root / "user", env=env_for(root),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
    if pids is not None:
        pids.append(child.pid)
    if close_stdout:
        child.stdout.close()
    if kill is not None:
        time.sleep(kill[1])
        os.killpg(child.pid, kill[0]) if kill[0] == signal.SIGKILL else child.send_signal(kill[0])
    try:
        out, err = child.communicate(timeout=timeout) if not close_stdout else (b"", child.stderr.read())
        code = child.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(child.pid)
        out, err = b"", b""
        code = None
        child.wait()
    if kill is not None:
        _kill_group(child.pid)  # what the killed tuner left behind (a killed parent's trial ends itself)
    return code, (out or b"").decode(errors="replace"), (err or b"").decode(errors="replace"), time.monotonic() - started


def left_in_tmp(pids: list[int]) -> list[str]:
    """The short temporary folders (tmpdirs.short_base) that trials of these processes left behind: a
    trial's tag starts with its tuner's pid. A SIGKILLed tuner cannot take them back; any other end must."""
    import glob

    return sorted(name for pid in pids for name in glob.glob(f"/tmp/autotune-{os.getuid()}-{pid}.*"))


def judge(case: Case, code: int | None, out: str, err: str, changed: list[str]) -> list[str]:
    """The promises this case broke (empty: none)."""
    broken = []
    if code is None:
        broken.append("hang")
    screen = out + err
    if "Traceback" in screen or "Exception ignored" in screen:
        broken.append("traceback")
    if any(c in screen for c in ("\x1b", "\x9b", "\x07", "\r")):
        broken.append("raw control character")
    lines = [line for line in err.splitlines() if line.strip()]
    if case.usage:  # the usage is the answer: on stdout, exit 2, stderr empty
        if code != 2 or not out.startswith("usage: autotune") or lines:
            broken.append(f"not the usage (exit {code}, {len(lines)} lines on stderr)")
    elif code in (1, 2) and (len(lines) != 1 or not lines[0].startswith("autotune: ")):
        broken.append(f"refusal of {len(lines)} lines")
    if code not in (None, 0, 1, 2, 130, 141, 3, -signal.SIGPIPE):
        broken.append(f"exit {code}")
    if changed:
        broken.append("changed outside: " + ", ".join(changed[:3]))
    if case.kill is None or case.kill[0] != signal.SIGKILL:
        left = left_in_tmp(case.pids)
        if left:
            broken.append("left in /tmp: " + ", ".join(left[:3]))
    elif left_in_tmp(case.pids[1:]):  # the SIGKILLed tune could not; its resume or review must
        broken.append("left in /tmp: " + ", ".join(left_in_tmp(case.pids[1:])[:3]))
    return broken


def run_case(case: Case, root: Path, default_timeout: float) -> None:
    if case.setup is not None:
        case.setup(root)
    timeout = case.timeout or default_timeout
    if case.kill is not None:
        run = case.argv[1]
        run_process(["tune", run, *TINY_RUN], root, 120, kill=case.kill, pids=case.pids)
    before = snapshot(root)
    if case.pipe or case.kill is not None:
        code, out, err, wall = run_process(case.argv, root, timeout, close_stdout=case.pipe, pids=case.pids)
    else:
        code, out, err, wall = run_forked(case.argv, root, timeout, pids=case.pids)
    after = snapshot(root)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p) and p not in case.owns)
    case.result = {"code": code, "wall": wall, "broken": judge(case, code, out, err, changed),
                   "line": (err.strip().splitlines() or [""])[-1][:160]}


def outcome(code: int | None) -> str:
    return {None: "hang", 0: "accepted", 2: "refused (2)", 1: "failed (1)"}.get(code, f"exit {code}")


def summary(cases: list[Case]) -> str:
    kinds: dict[str, Counter] = defaultdict(Counter)
    for case in cases:
        kinds[case.kind]["cases"] += 1
        kinds[case.kind][outcome(case.result["code"])] += 1
        kinds[case.kind]["broken"] += bool(case.result["broken"])
    columns = ["cases", "refused (2)", "accepted", "failed (1)", "hang", "broken"]
    width = max(len(k) for k in kinds) + 2
    lines = ["class".ljust(width) + "".join(c.rjust(13) for c in columns)]
    for kind, counts in kinds.items():
        lines.append(kind.ljust(width) + "".join(str(counts[c]).rjust(13) for c in columns))
    total = Counter()
    for counts in kinds.values():
        total.update(counts)
    lines.append("total".ljust(width) + "".join(str(total[c]).rjust(13) for c in columns))
    return "\n".join(lines)


def make_base(root: Path) -> None:
    """One finished tiny run (runs/base) that the run-folder cases copy and damage."""
    code, _, err, _ = run_process(["tune", "base", *TINY_RUN], root, 300)
    if code != 0:
        sys.exit(f"the base run did not finish (exit {code}): {err[-500:]}")


def main() -> int:
    global SANDBOX
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only the cases whose id or class holds this text")
    parser.add_argument("--timeout", type=float, default=45.0, help="seconds a case may take (default 45)")
    parser.add_argument("--keep", action="store_true", help="keep the sandbox and print where it is")
    parser.add_argument("--no-kill", action="store_true", help="skip the killed-mid-run cases (each runs a tune)")
    args = parser.parse_args()
    SANDBOX = Path(tempfile.mkdtemp(prefix="autotune-hostile-"))
    make_sandbox(SANDBOX)
    cases = [c for c in all_cases() if args.only in c.id or args.only in c.kind]
    if args.no_kill:
        cases = [c for c in cases if c.kill is None]
    print(f"{len(cases)} cases in {SANDBOX}", flush=True)
    import autotune.cli.main  # noqa: F401 - imported once; each forked case starts from it

    if any(c.kind == "run folder plants" for c in cases):
        make_base(SANDBOX)
    started = time.monotonic()
    try:
        for n, case in enumerate(cases, 1):
            run_case(case, SANDBOX, args.timeout)
            mark = "BROKEN " + "; ".join(case.result["broken"]) if case.result["broken"] else "ok"
            print(f"[{n:3}/{len(cases)}] {case.result['wall']:5.1f}s {outcome(case.result['code']):<12} "
                  f"{ascii(case.id)[:70]:<72} {mark}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(SANDBOX, ignore_errors=True)
    print(f"\n{len(cases)} cases in {time.monotonic() - started:.0f}s\n")
    print(summary(cases))
    broken = [c for c in cases if c.result["broken"]]
    for case in broken:
        print(f"BROKEN {ascii(case.id)}: {'; '.join(case.result['broken'])} :: {ascii(case.result['line'])}")
    if args.keep:
        print(f"sandbox kept: {SANDBOX}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
