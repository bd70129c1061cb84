"""The manual's reference pages are the job-key and knob tables, regenerated."""

from pathlib import Path

from autotune.output import reference
from autotune.config.job_keys import JOB_KEYS
from autotune.config.knobs import CATALOG

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference"


def test_the_committed_reference_pages_are_the_tables_as_they_are_now():
    for name, render in reference.PAGES.items():
        committed = (DOCS / name).read_text()
        assert committed == render(), f"docs/reference/{name} is stale: run python -m autotune.output.reference docs/reference"


def test_every_job_key_and_knob_is_listed():
    keys, knobs = reference.job_keys_page(), reference.knobs_page()
    assert all(f"| `{key}` |" in keys for key in JOB_KEYS)
    assert all(f"| `{name}` |" in knobs for name in CATALOG)


def test_writing_the_pages_makes_files_that_match(tmp_path):
    written = reference.write(tmp_path / "ref")
    assert sorted(p.name for p in written) == sorted(reference.PAGES)
    assert (tmp_path / "ref" / "knobs.md").read_text() == reference.knobs_page()
