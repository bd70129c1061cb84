"""Bounds checked before parsing: digits, words, JSON depth, YAML alias expansion, writable paths."""

from __future__ import annotations

from unittest import mock

import pytest

from autotune.util.errors import JobError, RecordError
from autotune.config.inputs import (MAX_DIGITS, MAX_JSON_DEPTH, MAX_YAML_NODES, check_digits, check_word,
                             check_writable_file, check_writable_folder, parse_json, parse_yaml, read_json)


def test_digits_up_to_the_bound_pass_and_one_more_is_refused_naming_the_key():
    check_digits("max_len", "9" * MAX_DIGITS)
    check_digits("time", "1h30m")
    with pytest.raises(JobError, match=f"seed=.*{MAX_DIGITS + 1} digits"):
        check_digits("seed", "9" * (MAX_DIGITS + 1))
    with pytest.raises(JobError, match=r"\(5000 characters\)") as error:
        check_digits("max_len", "9" * 5000)
    assert len(str(error.value)) < 200  # the value is shortened, never printed whole


def test_a_long_word_is_refused_by_its_key():
    check_word("script_args=" + "x" * 4000)
    with pytest.raises(JobError, match="^dataset= has a value of"):
        check_word("dataset=" + "d" * 5000)


def test_json_depth_is_checked_before_decoding_and_brackets_in_strings_do_not_count():
    assert parse_json('{"a": "' + "[" * 500 + '"}', "f") == {"a": "[" * 500}
    nested = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert parse_json(nested, "f") is not None
    # Refused on the text, before any decoding (a decoder recursing 200k levels is what it prevents).
    with mock.patch("json.loads", side_effect=AssertionError("decoded before the depth was checked")):
        with pytest.raises(RecordError, match="deeper than"):
            parse_json("[" * 200_000 + "]" * 200_000, "f", RecordError)


def test_json_with_a_number_past_python_s_digit_limit_is_one_error(tmp_path):
    (tmp_path / "big.json").write_text('{"n": ' + "9" * 5000 + "}")
    with pytest.raises(JobError, match="big.json: not JSON autotune reads"):
        read_json(tmp_path / "big.json", "file")


def _laughs(levels: int, width: int) -> str:
    lines = ["l0: &l0 [a, b]"]
    lines += [f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels + 1)]
    return "\n".join(lines)


def test_yaml_aliases_are_counted_on_the_graph_so_a_billion_laughs_is_refused_at_once():
    # Refused on the node graph: the document is never built (2 * 10**9 values once expanded).
    with mock.patch("yaml.SafeLoader.construct_document", side_effect=AssertionError("the document was built")):
        with pytest.raises(JobError, match="aliases expand"):
            parse_yaml(_laughs(levels=9, width=10), "laughs.yaml")


def test_yaml_shared_anchors_within_the_bound_load_as_safe_load_does():
    import yaml

    text = "base: &b {lr: 1, batch_size: 4}\ntrain: *b\neval: {<<: *b, batch_size: 8}\n"
    assert parse_yaml(text, "ok.yaml") == yaml.safe_load(text)
    assert parse_yaml("", "empty.yaml") is None
    # the widest document under the bound loads, one alias wider is refused
    width = max(w for w in range(2, 100) if _expanded(3, w) <= MAX_YAML_NODES)
    assert parse_yaml(_laughs(levels=3, width=width), "under.yaml") is not None
    with pytest.raises(JobError, match="aliases expand"):
        parse_yaml(_laughs(levels=3, width=width + 1), "over.yaml")


def _expanded(levels: int, width: int) -> int:
    """Nodes of `_laughs` once expanded: the root mapping, each key, each level's sequence tree."""
    size, total = 3, 1 + 1 + 3  # l0: a sequence of two scalars
    for _ in range(levels):
        size = 1 + width * size
        total += 1 + size
    return total


def test_hostile_yaml_tags_stay_refused():
    with pytest.raises(JobError, match="not valid YAML"):
        parse_yaml("!!python/object/apply:os.system ['true']", "tag.yaml")


def test_writable_checks(tmp_path):
    (tmp_path / "f").write_text("x")
    check_writable_folder(tmp_path / "new" / "deeper", "kb=new/deeper")
    check_writable_file(tmp_path / "new" / "out.json", "kb export")
    with pytest.raises(JobError, match="is a file, not a folder"):
        check_writable_folder(tmp_path / "f", "kb=f")
    with pytest.raises(JobError, match="cannot be made"):
        check_writable_folder(tmp_path / "f" / "kb", "kb=f/kb")
    with pytest.raises(JobError, match="is a folder"):
        check_writable_file(tmp_path, "kb graph")
    assert not (tmp_path / "new").exists()  # checking makes nothing
