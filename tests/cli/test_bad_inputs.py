"""Every bad input is one line on stderr, the right exit code, no traceback, and nothing changed outside
what the command owns (a refused job creates no run folder and touches no file at all).

In-process through `autotune.cli.main.main`, so the whole table runs in seconds. The inputs the ordinary
job validation already covers (tests/cli/test_cli_validation.py: unknown key, bad choice, indivisible
batch, ...) are not repeated here; these are the sizes, files and folders of issue 16.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from unittest import mock

import pytest

from autotune.cli.main import main
from autotune.workloads.jobs import job_from_words

VALID = ["model=tiny-qwen2", "dataset=synthetic", "max_len=64", "effective_batch=4"]
BIG = "9" * 5000
# A public host key (ed25519), only to make a well-formed `@cert-authority` line.
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAXZI8INPX87gQVhgwfbWj+HbIzSr17d0IOXIDBcPhjS"


def _bomb(levels: int = 9, width: int = 9) -> str:
    """Nested dict aliases: `width ** levels` values once expanded, from a dozen lines."""
    lines = ["l0: &l0 {a: 1, b: 2}"]
    for level in range(1, levels + 1):
        items = ", ".join(f"k{i}: *l{level - 1}" for i in range(width))
        lines.append(f"l{level}: &l{level} {{{items}}}")
    return "\n".join(lines + ["max_len: 64", "per_device_train_batch_size: 1"]) + "\n"


ARGPARSE = ("import argparse\nparser = argparse.ArgumentParser()\n"
            "parser.add_argument('--max_len', type=int, default={max_len})\n"
            "parser.add_argument('--per_device_train_batch_size', type=int, default={batch})\n")


def make_world(root: Path) -> None:
    """The files every case reads: small, written before the snapshot."""
    (root / "home" / ".ssh").mkdir(parents=True)
    (root / "home" / ".ssh" / "known_hosts").write_text(
        f"# comment\n@cert-authority *.example.com {PUBLIC_KEY}\n@revoked old.example.com {PUBLIC_KEY}\n")
    (root / "home" / ".ssh" / "config").write_text(  # aliases that resolve to nothing usable
        "Host proxied\n  ProxyCommand nc %h %p\nHost keyless\n  IdentityFile ~/.ssh/no_such_key\n"
        "Host looped\n  ProxyJump looped\n")
    (root / "a_file").write_text("not a folder\n")
    (root / "a_folder").mkdir()
    (root / "deep.json").write_text("[" * 200_000 + "]" * 200_000)
    (root / "not_json.json").write_text("{torn")
    (root / "big_number.json").write_text('{"schema_version": ' + BIG + "}")
    (root / "export.json").write_text(json.dumps({"schema_version": 1, "claims": [], "claim_history": [],
                                                  "runs": [], "trials": []}))
    data = root / "data"
    data.mkdir()
    (data / "empty.jsonl").write_text("")
    (data / "blank.jsonl").write_text("\n  \n\n")
    (data / "torn.jsonl").write_text('{"text": "fine"}\n{"text": "torn\n{"text": "fine"}\n')
    (data / "arrays.jsonl").write_text("[1, 2]\n[3, 4]\n")
    (data / "numbers.jsonl").write_text('{"a": 1, "b": 2.5}\n{"a": 3, "b": null}\n')
    (data / "latin1.jsonl").write_bytes(b'{"text": "caf\xe9"}\n')
    (data / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (data / "header_only.csv").write_text("text,label\n")
    (data / "blank.txt").write_text("\n\n   \n")
    (data / "fake.parquet").write_bytes(b"this is not parquet")
    (data / "empty_list.json").write_text("[]")
    (data / "no_data_files").mkdir()
    (data / "no_data_files" / "README.md").write_text("nothing here\n")
    models = root / "models"
    for name, text in (("garbage", "garbage{"), ("a_list", "[1, 2]"), ("text_size", '{"num_hidden_layers": 2, '
                       '"hidden_size": "abc"}'), ("huge_size", '{"num_hidden_layers": 2, "hidden_size": '
                       + "9" * 400 + "}")):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(text)
    scripts = root / "scripts"
    scripts.mkdir()
    (scripts / "latin1.py").write_bytes(b"# caf\xe9\n" + ARGPARSE.format(max_len=64, batch=1).encode())
    (scripts / "nul.py").write_bytes(b"x = 1\x00\n")
    (scripts / "non_literal.py").write_text(ARGPARSE.format(max_len="int('64')", batch="{[1]: 2}"))
    (scripts / "plain.py").write_text("print('training')\n")
    (scripts / "bomb.yaml").write_text(_bomb())
    (scripts / "loop.yaml").write_text("a: &a [*a]\nmax_len: 64\n")
    (scripts / "torn.yaml").write_text("max_len: [64\n")
    (scripts / "deep.json").write_text("[" * 200 + "]" * 200)
    jobs = root / "jobs"
    jobs.mkdir()
    for name, text in (("list.yaml", "- max_len\n- 64\n"), ("unknown.yaml", "model: mlp\ncolour: red\n"),
                       ("bomb.yaml", _bomb()), ("nested.yaml", "model: mlp\nmax_len: {a: 1}\n"),
                       ("bad_value.yaml", "model: mlp\nmax_len: 3\n"), ("empty.yaml", "")):
        (jobs / name).write_text(text)
    # issue 27: special files where a file is expected, numbers YAML cannot hold, repeated keys, a NUL,
    # SSH configs that would run a local command, exports with a list for an id or a cycle of parents
    os.mkfifo(root / "fifo")
    os.mkfifo(root / "fifo.py")
    os.mkfifo(root / "fifo.yaml")
    (data / "with_fifo").mkdir()
    os.mkfifo(data / "with_fifo" / "rows.jsonl")
    for name, text in (("big_int.yaml", "model: mlp\nmax_len: " + "9" * 5000 + "\n"),
                       ("dup.yaml", "model: mlp\nmax_len: 64\nmax_len: 128\n"),
                       ("dup_nested.yaml", "model: mlp\nonly: [padding]\nseed: 1\nseed: 2\n")):
        (jobs / name).write_text(text)
    (jobs / "nul.yaml").write_bytes(b"model: mlp\x00\nmax_len: 64\n")
    for name in ("loop.json", "loop.png"):  # a link that names itself
        (root / name).symlink_to(root / name)
    ssh = root / "ssh"
    ssh.mkdir()
    marker = root / "ran"  # no case may make it: a command of an SSH config ran
    for name, text in (("match_exec", f'Match exec "touch {marker}"\n  User x\nHost box\n  HostName 127.0.0.1\n'),
                       ("local_command", f"Host box\n  HostName 127.0.0.1\n  LocalCommand touch {marker}\n"),
                       ("known_hosts_command", f"Host box\n  HostName 127.0.0.1\n  KnownHostsCommand touch {marker}\n"),
                       ("include_fifo", f"Include {root / 'fifo'}\nHost box\n  HostName 127.0.0.1\n")):
        (ssh / name).write_text(text)
    claim = {"schema_version": 1, "id": "X1", "knob": "padding", "value": "padding_free", "from": None,
             "direction": "helps", "ratio": 1.3, "condition": "", "alpha": 2.0, "beta": 2.0, "source": "test",
             "statement": "", "relations": [], "parent": "X2", "origin": "learned", "status": "active",
             "status_reason": ""}
    for name, content in (("cycle", {"claims": [claim, {**claim, "id": "X2", "parent": "X1"}]}),
                          ("self_parent", {"claims": [{**claim, "id": "X3", "parent": "X3"}]}),
                          ("list_id", {"claims": [{**claim, "id": ["X1"], "parent": None}]}),
                          ("list_event_claim", {"claim_history": [{"claim": ["P01"], "op": "evidence"}]}),
                          ("number_children", {"claim_history": [{"claim": "P01", "op": "split", "children": 5}]}),
                          ("number_evidence", {"claim_history": [{"claim": "P01", "op": "evidence", "evidence": 5}]}),
                          ("list_trial_number", {"trials": [{"schema_version": 1, "run_id": "r", "trial": [1]}]})):
        (root / f"{name}.json").write_text(json.dumps({"schema_version": 1, "claims": [], "claim_history": [],
                                                       "runs": [], "trials": [], **content}))
    runs = root / "runs"
    for run, files in (("bad-job", {"job.json": "garbage"}), ("list-job", {"job.json": "[1, 2]"}),
                       ("odd-job", {"job.json": json.dumps({"run": "odd-job", "colour": "red"})}),
                       ("bad-state", {"job.json": json.dumps(job_from_words("bad-state", VALID)[0].to_dict()),
                                      "state.json": "{torn"})):
        (runs / run).mkdir(parents=True)
        for name, text in files.items():
            (runs / run / name).write_text(text)


def tune(run: str, *words: str) -> list[str]:
    return ["tune", run, *words]


def job(**override: str) -> list[str]:
    values = dict(word.split("=", 1) for word in VALID)
    values.update(override)
    return [f"{k}={v}" for k, v in values.items()]


S = "scripts/"
# (id, argv, exit code, text the one line holds, paths the command owns: only they may change)
CASES = [
    # numbers of thousands of digits, and past the bound in fewer
    ("max_len-5000-digits", tune("r", *job(max_len=BIG)), 2, "max_len= has a value of", ()),
    ("time-5000-digits", tune("r", *job(time=BIG + "s")), 2, "time=", ()),
    ("micro-batch-5000-digits", tune("r", *job(per_device_train_batch_size=BIG)), 2,
     "per_device_train_batch_size=", ()),
    ("mem_limit-400-digits", tune("r", *job(mem_limit="9" * 400 + "GB")), 2, "a number of 400 digits", ()),
    ("max_len-19-digits", tune("r", *job(max_len="1" * 19)), 2, "max_len=", ()),
    ("seed-30-digits", tune("r", *job(seed="7" * 30)), 2, "seed=", ()),
    ("accumulation-25-digits", tune("r", *job(gradient_accumulation_steps="3" * 25)), 2,
     "gradient_accumulation_steps=", ()),
    ("max_trials-40-digits", tune("r", *job(max_trials="5" * 40)), 2, "max_trials=", ()),
    ("llm_timeout-30-digits", tune("r", *job(llm="m", llm_timeout="9" * 30 + "s")), 2, "llm_timeout", ()),
    ("dataset-path-5000-chars", tune("r", *job(dataset="d" * 5000 + ".jsonl")), 2, "dataset= has a value of", ()),
    ("suggest-max_len-5000-digits", ["suggest", "model=7B", f"max_len={BIG}"], 2, "max_len=", ()),
    ("suggest-gpu_mem-400-digits", ["suggest", "model=7B", "max_len=512", f"gpu_mem={'9' * 400}GB"], 2,
     "gpu_mem=", ()),
    ("suggest-gpu_mem-zero", ["suggest", "model=7B", "max_len=512", "gpu_mem=0"], 2, "gpu_mem=", ()),
    ("suggest-padding_share-huge", ["suggest", "model=7B", "max_len=512", "padding_share=1e999"], 2,
     "padding_share", ()),
    # ordinary bad numbers not in test_cli_validation
    ("max_len-17-digits", tune("r", *job(max_len="1" + "0" * 16)), 2, "at most 1,048,576", ()),
    ("effective_batch-huge", tune("r", *job(effective_batch="1" + "0" * 12)), 2, "at most 65,536", ()),
    ("mlp_rows-huge", tune("r", "model=mlp", "mlp_rows=" + "1" + "0" * 15), 2, "mlp_rows=", ()),
    ("max_len-negative", tune("r", *job(max_len="-64")), 2, "max_len", ()),
    ("effective_batch-negative", tune("r", *job(effective_batch="-4")), 2, "effective_batch", ()),
    ("seed-negative", tune("r", *job(seed="-1")), 2, "seed", ()),
    ("mem_margin-nan", tune("r", *job(mem_margin="nan")), 2, "mem_margin", ()),
    ("mem_margin-above-0.9", tune("r", *job(mem_margin="2")), 2, "mem_margin", ()),
    ("host-port-too-big", tune("r", *job(host="me@box:99999")), 2, "host", ()),
    ("suggest-unknown-key", ["suggest", "model=7B", "max_len=512", "colour=red"], 2, "colour", ()),
    ("escape-bytes-shown-not-sent", tune("r", *job(only="\x1b[2J")), 2, "\\x1b[2J': holds the control character", ()),
    ("dataset-name-too-long", tune("r", *job(dataset="n" * 300 + ".jsonl")), 2, "a file or folder name of 306", ()),
    ("ssh_key-name-too-long", tune("r", *job(host="me@box", ssh_key="k" * 300)), 2, "ssh_key=", ()),
    ("ssh_config-missing", tune("r", *job(host="gpu-box", ssh_config="nowhere")), 2, "ssh_config='nowhere'", ()),
    ("ssh-alias-proxycommand", tune("r", *job(host="proxied")), 2, "host proxied: ProxyCommand", ()),
    ("ssh-alias-key-missing", tune("r", *job(host="keyless")), 2, "no_such_key (IdentityFile in", ()),
    ("ssh-alias-jumps-through-itself", tune("r", *job(host="looped")), 2, "ProxyJump goes through more", ()),
    ("suggest-model-name-too-long", ["suggest", "model=./" + "m" * 300, "max_len=512"], 2, "model=", ()),
    # kb= and the files kb commands write
    ("kb-is-a-file", tune("r", *job(kb="a_file")), 2, "a_file is a file", ()),
    ("kb-under-a-file", tune("r", *job(kb="a_file/kb")), 2, "cannot be made", ()),
    ("runs-dir-a-file", tune("r", *job(), "--runs-dir", "a_file"), 2, "a_file is a file", ()),
    ("runs-dir-under-a-file", tune("r", *job(), "--runs-dir", "a_file/runs"), 2, "cannot be made", ()),
    ("kb-list-on-a-file", ["kb", "list", "--kb", "a_file"], 2, "is a file", ()),
    ("suggest-kb-a-file", ["suggest", "model=7B", "max_len=512", "kb=a_file"], 2, "is a file", ()),
    ("kb-import-into-a-file", ["kb", "import", "export.json", "--kb", "a_file"], 2, "a_file is a file", ()),
    ("kb-export-to-a-folder", ["kb", "export", "a_folder"], 2, "is a folder", ()),
    ("kb-export-under-a-file", ["kb", "export", "a_file/out.json"], 2, "a_file is a file", ()),
    ("kb-graph-to-a-folder", ["kb", "graph", "a_folder"], 2, "is a folder", ()),
    ("kb-graph-under-a-file", ["kb", "graph", "a_file/graph.png"], 2, "a_file is a file", ()),
    ("kb-import-200000-deep", ["kb", "import", "deep.json"], 2, "deep.json: nests deeper than 64", ()),
    ("kb-import-5000-digit-number", ["kb", "import", "big_number.json"], 2, "not JSON autotune reads", ()),
    ("kb-import-not-json", ["kb", "import", "not_json.json"], 2, "not JSON", ()),
    ("kb-show-unknown-claim", ["kb", "show", "no-such-claim"], 2, "no-such-claim", ("kb",)),
    # a damaged run folder on resume / review: exit 2 (bad input to resume), the folder named, nothing of it rewritten
    ("resume-garbage-job.json", tune("bad-job", "resume"), 2, "job.json: not JSON", ("runs/bad-job",)),
    ("review-garbage-job.json", tune("bad-job", "review"), 2, "job.json: not JSON", ("runs/bad-job",)),
    ("resume-job.json-a-list", tune("list-job", "resume"), 2, "holds no JSON object", ("runs/list-job",)),
    ("resume-job.json-odd-keys", tune("odd-job", "resume"), 2, "not a job autotune wrote", ("runs/odd-job",)),
    ("resume-garbage-state.json", tune("bad-state", "resume"), 2, "state.json: not JSON",
     ("runs/bad-state", "kb")),
    # scripts and their configs
    ("script-latin1-bytes", tune("r", f"script={S}latin1.py", "effective_batch=4"), 2, "not UTF-8", ()),
    ("script-nul-byte", tune("r", f"script={S}nul.py", "effective_batch=4"), 2, "null bytes", ()),
    ("script-non-literal-defaults", tune("r", f"script={S}non_literal.py", "effective_batch=4"), 2,
     "must be a whole number", ()),
    ("yaml-nested-dict-aliases", tune("r", f"script={S}plain.py", f"script_configs={S}bomb.yaml",
                                      "effective_batch=4"), 2, "aliases expand", ()),
    ("yaml-self-referencing-anchor", tune("r", f"script={S}plain.py", f"script_configs={S}loop.yaml",
                                          "effective_batch=4"), 2, "aliases expand", ()),
    ("yaml-torn", tune("r", f"script={S}plain.py", f"script_configs={S}torn.yaml", "effective_batch=4"), 2,
     "not valid YAML", ()),
    ("json-config-200-deep", tune("r", f"script={S}plain.py", f"script_configs={S}deep.json",
                                  "effective_batch=4"), 2, "nests deeper", ()),
    # job files: config= (the job's keys) and from= (a `trl sft` config)
    ("config-missing", tune("r", "config=jobs/missing.yaml"), 2, "config='jobs/missing.yaml': no such file", ()),
    ("config-a-folder", tune("r", "config=jobs"), 2, "no such file", ()),
    ("config-a-list", tune("r", "config=jobs/list.yaml"), 2, "holds no mapping", ()),
    ("config-empty", tune("r", "config=jobs/empty.yaml"), 2, "holds no mapping", ()),
    ("config-unknown-key", tune("r", "config=jobs/unknown.yaml"), 2, "config=jobs/unknown.yaml: unknown key 'colour'",
     ()),
    ("config-nested-value", tune("r", "config=jobs/nested.yaml"), 2, "max_len: \"{'a': 1}\" is not one value", ()),
    ("config-bad-value", tune("r", "config=jobs/bad_value.yaml"), 2, "max_len=", ()),
    ("config-yaml-bomb", tune("r", "config=jobs/bomb.yaml"), 2, "aliases expand", ()),
    ("config-yaml-torn", tune("r", f"config={S}torn.yaml"), 2, "not valid YAML", ()),
    ("config-twice", tune("r", "config=jobs/unknown.yaml", "config=jobs/list.yaml"), 2, "given twice", ()),
    ("from-missing", tune("r", "from=jobs/missing.yaml"), 2, "from='jobs/missing.yaml': no such file", ()),
    ("from-a-list", tune("r", "from=jobs/list.yaml"), 2, "holds no mapping", ()),
    ("from-yaml-bomb", tune("r", "from=jobs/bomb.yaml"), 2, "aliases expand", ()),
    # a model folder whose config.json is not one
    ("suggest-config-garbage", ["suggest", "model=models/garbage", "max_len=512"], 2, "not JSON", ()),
    ("suggest-config-a-list", ["suggest", "model=models/a_list", "max_len=512"], 2, "no object", ()),
    ("suggest-config-text-size", ["suggest", "model=models/text_size", "max_len=512"], 2, "hidden size", ()),
    ("suggest-config-400-digit-size", ["suggest", "model=models/huge_size", "max_len=512"], 2, "hidden size", ()),
    ("tune-config-garbage", tune("r", *job(model="./models/garbage")), 2, "not JSON", ()),
    # datasets: refused before the frame, naming the file
    ("dataset-empty-jsonl", tune("r", *job(dataset="data/empty.jsonl")), 2, "holds no rows", ()),
    ("dataset-blank-jsonl", tune("r", *job(dataset="data/blank.jsonl")), 2, "holds no rows", ()),
    ("dataset-torn-line", tune("r", *job(dataset="data/torn.jsonl")), 2, "line 2 of data/torn.jsonl", ()),
    ("dataset-json-arrays", tune("r", *job(dataset="data/arrays.jsonl")), 2, "line 1", ()),
    ("dataset-no-text-column", tune("r", *job(dataset="data/numbers.jsonl")), 2, "text column", ()),
    ("dataset-latin1", tune("r", *job(dataset="data/latin1.jsonl")), 2, "not UTF-8", ()),
    ("dataset-200000-deep-line", tune("r", *job(dataset="data/deep.jsonl")), 2, "nests too deeply", ()),
    ("dataset-csv-header-only", tune("r", *job(dataset="data/header_only.csv")), 2, "holds no rows", ()),
    ("dataset-txt-blank", tune("r", *job(dataset="data/blank.txt")), 2, "holds no rows", ()),
    ("dataset-fake-parquet", tune("r", *job(dataset="data/fake.parquet")), 2, "not a parquet file", ()),
    ("dataset-empty-json-list", tune("r", *job(dataset="data/empty_list.json")), 2, "holds no rows", ()),
    ("dataset-folder-without-data", tune("r", *job(dataset="data/no_data_files")), 2, "no data file", ()),
    # issue 27: special files where a file is expected: one line, never read (a FIFO would wait forever)
    ("dataset-fifo", tune("r", *job(dataset="fifo")), 2, "fifo is a FIFO", ()),
    ("dataset-fifo-in-a-folder", tune("r", *job(dataset="data/with_fifo")), 2, "is a FIFO", ()),
    ("dataset-character-device", tune("r", *job(dataset="/dev/zero")), 2, "is a character device", ()),
    ("config-fifo", tune("r", "config=fifo.yaml"), 2, "is a FIFO", ()),
    ("from-fifo", tune("r", "from=fifo.yaml"), 2, "is a FIFO", ()),
    ("script-fifo", tune("r", "script=fifo.py", "effective_batch=4"), 2, "is a FIFO", ()),
    ("script_configs-fifo", tune("r", f"script={S}plain.py", "script_configs=fifo.yaml", "effective_batch=4"), 2,
     "is a FIFO", ()),
    ("ssh_config-fifo", tune("r", *job(host="box", ssh_config="fifo")), 2, "is a FIFO", ()),
    ("ssh_key-fifo", tune("r", *job(host="me@box", ssh_key="fifo")), 2, "is a FIFO", ()),
    ("ssh-include-of-a-fifo", tune("r", *job(host="box", ssh_config="ssh/include_fifo")), 2, "is a FIFO", ()),
    ("kb-import-fifo", ["kb", "import", "fifo"], 2, "is a FIFO", ()),
    # issue 27: no local command from an SSH config
    ("ssh-match-exec", tune("r", *job(host="box", ssh_config="ssh/match_exec")), 2, "runs a local command", ()),
    ("ssh-local-command", tune("r", *job(host="box", ssh_config="ssh/local_command")), 2, "LocalCommand", ()),
    ("ssh-known-hosts-command", tune("r", *job(host="box", ssh_config="ssh/known_hosts_command")), 2,
     "KnownHostsCommand", ()),
    # issue 27: job files YAML takes but a job cannot hold
    ("config-yaml-int-5000-digits", tune("r", "config=jobs/big_int.yaml"), 2, "fewer digits", ()),
    ("config-nul-byte", tune("r", "config=jobs/nul.yaml"), 2, "not valid YAML", ()),
    ("config-duplicate-key", tune("r", "config=jobs/dup.yaml"), 2, "'max_len' is given twice (lines 2 and 3)", ()),
    ("config-duplicate-key-later", tune("r", "config=jobs/dup_nested.yaml"), 2, "'seed' is given twice", ()),
    ("from-duplicate-key", tune("r", "from=jobs/dup.yaml"), 2, "is given twice", ()),
    ("script_configs-duplicate-key", tune("r", f"script={S}plain.py", "script_configs=jobs/dup.yaml",
                                          "effective_batch=4"), 2, "is given twice", ()),
    # issue 27: ~user of no user, control characters, ranges
    ("dataset-unknown-user", tune("r", *job(dataset="~no_such_user_27/d.jsonl")), 2, "no user 'no_such_user_27'", ()),
    ("config-unknown-user", tune("r", "config=~no_such_user_27/job.yaml"), 2, "no user", ()),
    ("kb-unknown-user", tune("r", *job(kb="~no_such_user_27/kb")), 2, "no user", ()),
    ("suggest-model-unknown-user", ["suggest", "model=~no_such_user_27/m", "max_len=512"], 2, "no user", ()),
    ("kb-list-unknown-user", ["kb", "list", "--kb", "~no_such_user_27/kb"], 2, "home folder", ()),
    ("gpu-escape-code", tune("r", *job(gpu="\x1b[31mred")), 2, "holds the control character", ()),
    ("dataloader_num_workers-17-digits", tune("r", *job(dataloader_num_workers="9" * 17)), 2, "from 0 to 256", ()),
    ("dataloader_prefetch_factor-huge", tune("r", *job(dataloader_prefetch_factor="100000")), 2, "0 to 1,024", ()),
    ("seed-past-32-bits", tune("r", *job(seed=str(2**32))), 2, "0 to 4,294,967,295", ()),
    ("max_trials-past-range", tune("r", *job(max_trials="10001")), 2, "1 to 10,000 trials", ()),
    ("time-past-a-year", tune("r", *job(time="9000h")), 2, "1 to 31,622,400 seconds", ()),
    ("mem_limit-past-a-pebibyte", tune("r", *job(mem_limit="2000TB")), 2, "at most 1PiB", ()),
    ("suggest-effective_batch-18-digits", ["suggest", "model=7B", "max_len=512", "effective_batch=" + "9" * 18], 2,
     "1 to 65,536 rows", ()),
    ("suggest-micro-batch-huge", ["suggest", "model=7B", "max_len=512", "per_device_train_batch_size=99999999"], 2,
     "1 to 65,536", ()),
    # issue 27: kb import of a list where an id belongs, and of parents in a cycle
    ("kb-import-list-for-an-id", ["kb", "import", "list_id.json"], 2, "claim id ['X1'] is not plain", ()),
    ("kb-import-list-for-a-claim", ["kb", "import", "list_event_claim.json"], 2, "history event claim", ()),
    ("kb-import-list-for-a-trial-number", ["kb", "import", "list_trial_number.json"], 2, "not a whole number", ()),
    ("kb-import-children-a-number", ["kb", "import", "number_children.json"], 2, "children are not a list", ()),
    ("kb-import-evidence-a-number", ["kb", "import", "number_evidence.json"], 2, "evidence is not an object", ()),
    ("kb-export-to-a-looping-link", ["kb", "export", "loop.json"], 2, "a symbolic link that loops", ()),
    ("kb-graph-to-a-looping-link", ["kb", "graph", "loop.png"], 2, "a symbolic link that loops", ()),
    ("kb-import-parent-cycle", ["kb", "import", "cycle.json"], 2, "form a cycle", ("kb",)),  # read: its lock
    ("kb-import-own-parent", ["kb", "import", "self_parent.json"], 2, "form a cycle", ("kb",)),
    # issue 27: usage errors are one line too
    ("usage-unknown-option", tune("r", "--bogus"), 2, "unrecognized arguments: --bogus", ()),
    ("usage-no-run", ["tune"], 2, "tune: the following arguments are required: RUN", ()),
    ("usage-unknown-command", ["bogus"], 2, "invalid choice: 'bogus'", ()),
    ("usage-kb-without-command", ["kb"], 2, "kb: the following arguments are required", ()),
    ("usage-kb-show-without-claim", ["kb", "show"], 2, "CLAIM", ()),
    ("runs-dir-empty", tune("r", *job(), "--runs-dir", ""), 2, "--runs-dir is empty", ()),
    # known_hosts with a marker line paramiko cannot read: the tune reaches the connection, one line
    ("known_hosts-cert-authority", tune("r", *job(host="me@127.0.0.1:1")), 1, "cannot connect", ("runs/r", "kb")),
]


def snapshot(root: Path) -> dict[str, tuple[bool, int, int]]:
    """Every path under root with (is folder, mtime, size): a file written, made or removed shows. A link
    is read as itself (the world plants links that loop)."""
    return {str(p.relative_to(root)): (p.is_dir(), p.lstat().st_mtime_ns, p.lstat().st_size)
            for p in root.rglob("*")}


@pytest.fixture
def world(tmp_path, monkeypatch):
    make_world(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("AUTOTUNE_DEBUG", "AUTOTUNE_RUNS", "AUTOTUNE_TEST_INJECT"):
        monkeypatch.delenv(name, raising=False)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    yield tmp_path
    for signum, handler in handlers.items():  # main() installs its own; pytest's come back
        signal.signal(signum, handler)


def changed(before: dict, after: dict, owned: tuple[str, ...]) -> list[str]:
    paths = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}

    def mine(path: str) -> bool:
        return any(path == o or path.startswith(o + os.sep) for o in owned) or any(
            o.startswith(path + os.sep) for o in owned)  # the folders holding what it owns (mtime)

    return sorted(p for p in paths if not mine(p))


@pytest.mark.parametrize("argv, code, needle, owned", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_nothing_it_does_not_own(world, capsys, argv, code, needle, owned):
    before = snapshot(world)
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "\x1b" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("autotune: ") and needle in lines[0], lines[0]
    assert len(lines[0]) < 700, f"one readable line, not a dump: {len(lines[0])} characters"
    assert changed(before, snapshot(world), owned) == []
    assert not (world / "ran").exists(), "a command of an SSH config ran"
    if code == 2:
        assert not (world / "runs" / "r").exists(), "a refused job must not create its run folder"


def test_the_table_covers_at_least_forty_inputs():
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)


def test_yaml_bomb_is_refused_in_well_under_a_second_of_work(world, capsys):
    """A billion values once expanded (9 ** 9 dicts of 9): refused on the node graph, never built."""
    (world / "scripts" / "billion.yaml").write_text(_bomb(levels=9, width=10))
    # Never built (it took 49 s, then a MemoryError): tests/config/test_inputs.py shows it is refused on the graph.
    with mock.patch("yaml.SafeLoader.construct_document", side_effect=AssertionError("the document was built")):
        assert main(tune("r", f"script={S}plain.py", f"script_configs={S}billion.yaml", "effective_batch=4")) == 2
    assert "aliases expand" in capsys.readouterr().err


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_kb_folder_is_refused_before_anything_is_written(world, capsys):
    folder = world / "locked"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        before = snapshot(world)
        assert main(tune("r", *job(kb="locked/kb"))) == 2
        assert main(["kb", "import", "export.json", "--kb", "locked"]) == 2
        assert main(["kb", "export", "locked/out.json"]) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 3 and all("not writable" in line for line in lines), lines
        assert changed(before, snapshot(world), ()) == []
    finally:
        folder.chmod(0o700)


def _boom(*_args, **_kwargs):
    raise RuntimeError("an unforeseen failure\nwith a second line")


def test_an_unforeseen_exception_is_one_line_exit_1(world, capsys, monkeypatch):
    monkeypatch.setattr("autotune.loop.advice.advise", _boom)
    assert main(["suggest", "model=7B", "max_len=512"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == ["autotune: suggest: RuntimeError: an unforeseen failure with a second line; "
                                "run again with AUTOTUNE_DEBUG=1 for the traceback"]


def test_autotune_debug_shows_the_traceback(world, capsys, monkeypatch):
    monkeypatch.setattr("autotune.loop.advice.advise", _boom)
    monkeypatch.setenv("AUTOTUNE_DEBUG", "1")
    assert main(["suggest", "model=7B", "max_len=512"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "_boom" in err
    assert err.splitlines()[-1] == "autotune: suggest: RuntimeError: an unforeseen failure with a second line"
    assert main(["kb", "export", "a_folder"]) == 2  # input errors too: the traceback, then the same line
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("autotune: kb export: a_folder is a folder")


def test_an_os_error_names_the_file(world, capsys, monkeypatch):
    def full(*_args, **_kwargs):
        raise OSError(28, "No space left on device", "somewhere/kb_graph.png")

    monkeypatch.setattr("autotune.cli.kb_commands.draw", full)
    assert main(["kb", "graph"]) == 1
    line = capsys.readouterr().err.strip()
    assert line.startswith("autotune: kb graph: OSError:") and "somewhere/kb_graph.png" in line and "\n" not in line


def test_a_script_that_declares_latin1_is_read_as_python_reads_it(tmp_path):
    from autotune.workloads.script.styles import discover

    script = tmp_path / "train.py"
    script.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + ARGPARSE.format(max_len=64, batch=2).encode())
    found = discover(script, [])
    assert found.get("max_len").value == 64 and found.get("micro_batch").value == 2
