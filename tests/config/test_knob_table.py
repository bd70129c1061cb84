"""One knob table: a knob added as one entry of autotune/config/knobs/table.py, and nothing else, shows
in `--help`, the docs reference, the ranking and the exported `trl sft` config."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from autotune.config.knobs import CATALOG, CATALOG_ORDER, INTERACTIONS, NUMERICS, TABLE, knobs_schema

ROOT = Path(__file__).resolve().parents[2]

# The entry a developer would add: a real SFTConfig field, tried on after the knobs already there.
FAKE_ENTRY = '''
    Knob("dataloader_drop_last", "bool", naive=False, help="drop the last incomplete batch of each epoch",
         tries=(True, False), sft=field("dataloader_drop_last", bool)),
'''

PROBE = textwrap.dedent('''
    import json, autotune
    from pathlib import Path
    from autotune.config.job import Job
    from autotune.config.knobs import Knobs
    from autotune.output.reference import knobs_page
    from autotune.reasoner import rank
    from autotune.workloads.hf.export import trl_config, yaml_text
    from autotune.workloads.hf.trl_args import sft_fields

    cpu = {"kind": "cpu", "cpu_count": 2, "bf16": False, "compile": True, "fused_adamw": True}
    ranked, _ = rank(Knobs(), cpu, 16, set())
    job = Job(run="t", model="Qwen/Qwen2.5-0.5B", dataset="tatsu-lab/alpaca", max_len=512, effective_batch=16)
    config = trl_config(job, Knobs(dataloader_drop_last=True), fields=sft_fields(), cpu=True,
                        run_path=Path("/tmp/run"))
    print(json.dumps({"where": autotune.__file__, "page": knobs_page(), "ranked": [h.change for h in ranked],
                      "export": yaml_text(config, "best")}))
''')


def _with_fake_knob(tmp_path: Path) -> Path:
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "autotune", copy / "autotune", ignore=shutil.ignore_patterns("__pycache__"))
    table = copy / "autotune" / "config" / "knobs" / "table.py"
    text = table.read_text()
    end = text.rindex("\n)\n")
    table.write_text(text[:end] + "\n" + FAKE_ENTRY.strip("\n") + text[end:])
    return copy


def test_a_knob_added_only_to_the_table_shows_in_help_docs_ranking_and_export(tmp_path):
    copy = _with_fake_knob(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    shown = subprocess.run([sys.executable, "-m", "autotune.cli.main", "tune", "--help"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
    assert shown.returncode == 0, shown.stderr
    assert "dataloader_drop_last" in shown.stdout
    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=600)
    assert probe.returncode == 0, probe.stderr
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["where"].startswith(str(copy))
    assert "| `dataloader_drop_last` | `true`, `false` | `false` |" in found["page"]
    assert "dataloader_drop_last=True" in found["ranked"]
    assert "dataloader_drop_last: true" in found["export"]


def test_the_table_is_where_ranking_interactions_numerics_and_the_schema_come_from():
    assert [name for name, _ in CATALOG_ORDER] == [k.name for k in sorted(TABLE, key=lambda k: k.rank)]
    assert all(pair <= set(CATALOG) for pair in INTERACTIONS)
    assert all(CATALOG[name].numerics_class == "changes" for name, _ in NUMERICS)
    committed = json.loads((ROOT / "autotune" / "schemas" / "knobs.json").read_text())
    assert committed == knobs_schema(), "autotune/schemas/knobs.json is stale: python -m autotune.output.reference"


def test_every_value_a_knob_tries_is_one_it_takes():
    for knob in TABLE:
        for value in knob.tries:
            if knob.kind == "choice":
                assert value in knob.choices, (knob.name, value)
            else:
                assert isinstance(value, bool if knob.kind == "bool" else int), (knob.name, value)
