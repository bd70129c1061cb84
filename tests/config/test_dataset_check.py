"""The parent's dataset check accepts every layout the runners read, and what it accepts `datasets` reads."""

from __future__ import annotations

import json

import pytest

from autotune.config.dataset_check import check_rows
from autotune.util.errors import JobError
from autotune.engine.data import load_examples, row_text

ROWS = [{"instruction": "say hi", "output": "hi"}, {"instruction": "count", "output": "1 2 3"}]


def write_layouts(tmp_path):
    """One dataset per layout a user gives: {name: path}."""
    paths = {}
    paths["jsonl"] = tmp_path / "rows.jsonl"
    paths["jsonl"].write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    paths["json-list"] = tmp_path / "list.json"
    paths["json-list"].write_text(json.dumps(ROWS))
    paths["json-lines-in-.json"] = tmp_path / "lines.json"
    paths["json-lines-in-.json"].write_text("\n".join(json.dumps(r) for r in ROWS))
    paths["messages"] = tmp_path / "chat.jsonl"
    paths["messages"].write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    paths["csv"] = tmp_path / "rows.csv"
    paths["csv"].write_text("instruction,output\nsay hi,hi\ncount,1 2 3\n")
    paths["txt"] = tmp_path / "rows.txt"
    paths["txt"].write_text("first line of text\n\nsecond line\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    paths["folder"] = folder
    return paths


def test_every_layout_the_runners_read_is_accepted_and_datasets_reads_it(tmp_path):
    for name, path in write_layouts(tmp_path).items():
        check_rows(str(path))  # raises on a refusal
        examples = list(load_examples(str(path), seed=0, limit=10))
        assert examples and any(row_text(e, None).strip() for e in examples), name


def test_parquet_with_rows_is_accepted_and_an_empty_one_refused(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    import pyarrow.parquet as parquet

    parquet.write_table(pyarrow.Table.from_pylist(ROWS), tmp_path / "rows.parquet")
    check_rows(str(tmp_path / "rows.parquet"))
    parquet.write_table(pyarrow.Table.from_pylist(ROWS).slice(0, 0), tmp_path / "none.parquet")
    with pytest.raises(JobError, match="none.parquet holds no rows"):
        check_rows(str(tmp_path / "none.parquet"))


def test_a_folder_of_images_or_saved_by_datasets_is_left_to_its_reader(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "cat.png").write_bytes(b"\x89PNG")
    check_rows(str(tmp_path / "images"))
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "dataset_info.json").write_text("{}")
    check_rows(str(tmp_path / "saved"))


def test_a_torn_line_after_good_ones_is_found(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in ROWS * 50) + '\n{"instruction": \n')
    with pytest.raises(JobError, match=r"line 101 of .*rows.jsonl is not JSON"):
        check_rows(str(path))


def test_a_folder_names_its_files_when_none_has_text(tmp_path):
    folder = tmp_path / "data"  # tmp_path itself holds the test's knowledge base (and its peaks .json)
    folder.mkdir()
    for name in ("a.jsonl", "b.jsonl"):
        (folder / name).write_text('{"n": 1}\n')
    with pytest.raises(JobError, match="none of the 2 rows of the 2 data files"):
        check_rows(str(folder))


def test_a_csv_field_longer_than_the_csv_modules_default_limit_is_read(tmp_path):
    """A 200k-character document in one field: the frame's reader takes it, so the check does too."""
    path = tmp_path / "long.csv"
    path.write_text("text,label\n" + "a" * 200_000 + ",1\n")
    check_rows(str(path))



def test_a_file_that_passed_is_not_scanned_again_until_it_changes(tmp_path, monkeypatch):
    import os

    from autotune.config import dataset_check

    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"text": "hello"}) + "\n")
    scans = []
    real = dataset_check._rows
    monkeypatch.setattr(dataset_check, "_rows", lambda file, label: scans.append(file) or real(file, label))
    dataset_check.check_rows(str(data))
    dataset_check.check_rows(str(data))      # the words' check, then autotune.tune's: one scan
    assert len(scans) == 1
    data.write_text(json.dumps({"nothing": 1}) + "\n")
    os.utime(data, ns=(1, 1))                 # another file now: scanned again, and refused
    with pytest.raises(JobError):
        dataset_check.check_rows(str(data))
    assert len(scans) == 2
