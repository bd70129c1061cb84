"""bench.scripts' table and cases, without running a tune (the gains are the benchmark's to print)."""

from __future__ import annotations

from bench.scripts import BYO, CASES, table


def test_each_case_holds_autotune_to_its_grid_and_names_files_that_exist():
    for case in CASES:
        assert case.only() == "only=" + ",".join(case.grid)
        for word in case.words:
            for part in word.partition("=")[2].split():
                if part.startswith("byo/"):
                    assert (BYO.parent / part).is_file(), part


def test_the_table_gives_both_gains_and_their_ratio():
    row = {"autotune_gain": 2.02, "hand_gain": 2.11, "gain_ratio": 0.957, "tune_speedup": 2.06, "tune_trials": 5}
    text = table({"plain_yaml": row, "broken": {"error": "tune exit 1"}})
    assert "| plain_yaml | x2.02 | x2.11 | 0.96 | x2.06 | 5 |" in text and "failed: tune exit 1" in text
