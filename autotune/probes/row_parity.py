"""Parity by row identity, for scripts: per-row losses matched by the row's content, not its place.

A script's trial records, for every row it trained, a key (a hash of the row's real tokens) and, for the
two parity steps, each row's loss and the micro-batches it sat in (workloads/script/rows.py). A change
is judged against the baseline's by what it did to the rows and to their losses:
- the same rows over the compared steps (every step the trial ran; the same multiset of keys):
  - the rows' losses at the initial weights (step 1) agree within the precision's tolerance, and after
    one update (step 2, compared where step 1 held the same rows) too: the same computation;
  - step 1 agrees, step 2 does not, and the rows sat in micro-batches that weigh them otherwise (the
    script's per-micro-batch mean under another split): the same rows and objective with another
    weighting, kept with the measured difference, refused under `strict_parity=true`;
  - step 1 disagrees, or step 2 does with the rows weighed alike: another objective, refused;
  - the rows reached the model in another order (length grouping, sorting, bucketing): said as
    "data order changed";
- other rows, where the script draws fresh random windows when the batch shape changes (nanoGPT's
  `get_batch`: every row of one length, as many rows, none repeated): the mean loss at the initial
  weights and after one update against the spread of the baseline's rows (each row an independent draw,
  which is what the baseline's repeated runs would spread by): the check is statistical, and says so;
- other rows where the script's own sampler says so: a library's sampler (transformers' LengthGroupedSampler,
  torch's RandomSampler) that hands out each row of the same data set once an epoch in both runs, and no
  row cut short or joined: an order change, judged on the rows both first steps hold;
- other rows otherwise: dropped, duplicated, truncated, concatenated or new rows, named, refused.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple, Sequence

from .parity import ParityVerdict

# Standard errors of the two means' difference allowed by the statistical check: a same-computation
# change fails it about once in 15,000 steps compared (two-sided normal tail at 4).
Z = 4.0
_SAME_WEIGHT = 1e-9
_SAID = {"dropped": "dropped", "duplicated": "duplicated", "truncated": "truncated",
         "joined": "concatenated with others", "unseen": "not among the baseline's"}


class RowEntry(NamedTuple):
    """One row of the census: how often the compared steps trained it, its length in tokens, and the
    key of its first tokens (the same head at another length: the row truncated or joined)."""

    times: int
    length: int
    head: str


@dataclass(frozen=True)
class RowCensus:
    """A trial's `parity_rows` (workloads/script/rows.py Census.summary): per-row losses of the two
    parity steps by row key, each step's micro-batches of row keys, every row of the `steps` compared
    steps, and what the first loader's sampler hands out ({sampler, rows, permutation}; empty: unknown)."""

    step1: dict[str, float]
    step2: dict[str, float]
    splits: list[list[list[str]]]
    rows: dict[str, RowEntry]
    steps: int | None = None
    order: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RowCensus":
        """The census as the trial's measurement stores it (JSON: a row is a list [count, length, head])."""
        return cls(step1=dict(data["step1"]), step2=dict(data.get("step2") or {}), splits=data["splits"],
                   rows={key: RowEntry(*entry) for key, entry in data["rows"].items()}, steps=data.get("steps"),
                   order=data.get("order") or {})


def compare(baselines: Sequence[Mapping[str, Any]], candidate: Mapping[str, Any], tol: float,
            strict: bool = False) -> ParityVerdict:
    """The verdict on `candidate`'s parity rows (a measurement's `parity_rows`) against the reference's
    (`baselines[0]`; the others: its repeated runs, for the statistical check's spread)."""
    runs = [RowCensus.from_dict(run) for run in baselines]
    base, cand = runs[0], RowCensus.from_dict(candidate)
    if _counts(base) == _counts(cand):
        return _same_rows(base, cand, tol, strict)
    if _random_windows(base.rows, cand.rows):
        return _statistical(runs, cand, tol)
    changes = _row_changes(base.rows, cand.rows)
    if (cand.order.get("permutation") and base.order.get("permutation")
            and cand.order.get("rows") == base.order.get("rows") and not changes["truncated"] and not changes["joined"]):
        return _sampler_order(base, cand, tol)
    parts = [f"{n} {_SAID[what]}" for what, n in changes.items() if n > 0]
    return _result(False, "rows", None, tol,
                   f"the rows differ from the baseline's over the {cand.steps} compared steps (rows "
                   f"{', '.join(parts)}): this change trains on other data, it trains something else")


def _counts(census: RowCensus) -> dict[str, int]:
    return {key: entry.times for key, entry in census.rows.items()}


def _result(ok: bool, kind: str, worst: float | None, tol: float, reason: str) -> ParityVerdict:
    return {"ok": ok, "checked": True, "kind": kind, "worst": worst, "tolerance": tol, "reason": reason}


def _worst(base: dict[str, float], cand: dict[str, float]) -> tuple[float, int]:
    """The worst relative difference over the rows both read, and how many there were (NaN: the worst)."""
    worst, matched = 0.0, 0
    for key in base.keys() & cand.keys():
        difference = abs(cand[key] - base[key]) / max(abs(base[key]), 1e-8)
        worst = max(worst, math.inf if math.isnan(difference) else difference)
        matched += 1
    return worst, matched


def _flat(split: list[list[str]]) -> list[str]:
    return [key for micro in split for key in micro]


def _weights(rows: dict[str, RowEntry], split: list[list[str]]) -> tuple[dict[str, float], dict[str, float]]:
    """Each row's share of the step's loss under a per-micro-batch mean of its tokens, and of its rows."""
    by_token: dict[str, float] = {}
    by_row: dict[str, float] = {}
    calls = len(split) or 1
    for micro in split:
        tokens = sum(rows[key].length for key in micro) or 1
        for key in micro:
            by_token[key] = by_token.get(key, 0.0) + rows[key].length / tokens / calls
            by_row[key] = by_row.get(key, 0.0) + 1 / len(micro) / calls
    return by_token, by_row


def _weighed_otherwise(base: RowCensus, cand: RowCensus) -> bool:
    for ours, theirs in zip(_weights(base.rows, base.splits[0]), _weights(cand.rows, cand.splits[0])):
        if any(abs(ours.get(key, 0.0) - theirs.get(key, 0.0)) > _SAME_WEIGHT for key in ours.keys() | theirs.keys()):
            return True
    return False


def _same_rows(base: RowCensus, cand: RowCensus, tol: float, strict: bool) -> ParityVerdict:
    total, steps = sum(_counts(cand).values()), cand.steps
    order = _flat(base.splits[0]) + _flat(base.splits[1]) != _flat(cand.splits[0]) + _flat(cand.splits[1])
    moved = (f"; data order changed: the same {total} rows over the {steps} compared steps, in another order"
             if order else "")
    first, matched = _worst(base.step1, cand.step1)
    if first > tol:
        return _result(False, "objective", first, tol,
                       f"per-row losses differ by {first:.2e} > tolerance {tol:.0e} at the initial weights on the same "
                       f"rows: this change computes another objective, it trains something else{moved}")
    if Counter(_flat(base.splits[0])) != Counter(_flat(cand.splits[0])):
        # The first step trained other rows: the second starts from another update, not comparable.
        seen = (f"{matched} rows of the first step matched at the initial weights, within {first:.2e} "
                f"(tolerance {tol:.0e})" if matched else
                "no row of the first step was in the baseline's first step, so the rows were compared, not their losses")
        return _result(True, "order", first if matched else None, tol,
                       f"{seen}{moved}; the second step follows another first update, so it is not compared")
    second, _ = _worst(base.step2, cand.step2)
    worst = max(first, second)
    if second <= tol:
        return _result(True, "same", worst, tol, f"per-row losses match within {worst:.2e} (tolerance {tol:.0e}){moved}")
    if not _weighed_otherwise(base, cand):
        return _result(False, "objective", worst, tol,
                       f"per-row losses differ by {second:.2e} > tolerance {tol:.0e} after one update on the same rows, "
                       f"weighed alike: this change trains something else{moved}")
    said = (f"the same rows and objective with another weighting: per-row losses match within {first:.2e} at the "
            f"initial weights and differ by {second:.2e} after one update (tolerance {tol:.0e}), as the script's "
            f"per-micro-batch mean weighs each row by the micro-batch it sits in{moved}")
    if strict:
        return _result(False, "weighting", worst, tol, f"{said}; refused under strict_parity=true")
    return _result(True, "weighting", worst, tol, f"{said}; kept (strict_parity=true refuses it)")


def _random_windows(base: dict[str, RowEntry], cand: dict[str, RowEntry]) -> bool:
    """Fresh windows of one length, as many as the baseline's, none repeated more than there."""
    lengths = {entry.length for entry in base.values()} | {entry.length for entry in cand.values()}
    return (len(lengths) == 1 and sum(e.times for e in base.values()) == sum(e.times for e in cand.values())
            and max(e.times for e in cand.values()) <= max(e.times for e in base.values()))


def _spread(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1)


def _statistical(baselines: list[RowCensus], cand: RowCensus, tol: float) -> ParityVerdict:
    first, matched = _worst(baselines[0].step1, cand.step1)
    if matched and first > tol:
        return _result(False, "objective", first, tol,
                       f"per-row losses differ by {first:.2e} > tolerance {tol:.0e} at the initial weights on the "
                       f"{matched} rows both drew: this change trains something else")
    parts, worst, ok = [], 0.0, True
    for step, label in ((1, "at the initial weights"), (2, "after one update")):
        pooled: dict[str, float] = {}
        run_means = []
        for run in baselines:
            losses = run.step1 if step == 1 else run.step2
            if losses:
                pooled.update(losses)
                run_means.append(sum(losses.values()) / len(losses))
        ours, theirs = list(pooled.values()), list((cand.step1 if step == 1 else cand.step2).values())
        if len(ours) < 2 or len(theirs) < 2:
            return _result(False, "rows", None, tol, f"the rows differ from the baseline's and too few losses were "
                           f"read {label} to compare their means: this change may train something else")
        (mean_b, var_b), (mean_c, var_c) = _spread(ours), _spread(theirs)
        error = math.sqrt(var_b / len(ours) + var_c / len(theirs))
        if len(run_means) > 1:   # runs that drew other rows each time spread by themselves too
            error = max(error, math.sqrt(_spread(run_means)[1]))
        allowed = Z * error + tol * abs(mean_b)
        gap = abs(mean_c - mean_b)
        worst = max(worst, gap / max(abs(mean_b), 1e-8))
        ok = ok and gap <= allowed
        parts.append(f"{label} {mean_c:.4f} against the baseline's {mean_b:.4f} (gap {gap:.1e}, allowed {allowed:.1e})")
    verdict = "within" if ok else "beyond"
    return _result(ok, "statistical", worst, tol,
                   f"the check was statistical: the script drew other rows (as many, all {_length(cand)} tokens: fresh "
                   f"random windows), so mean losses were compared {verdict} {Z:g} standard errors of the rows' spread: "
                   + "; ".join(parts) + ("" if ok else ": this change trains something else"))


def _length(census: RowCensus) -> int:
    return next(iter(census.rows.values())).length


def _row_changes(base: dict[str, RowEntry], cand: dict[str, RowEntry]) -> dict[str, int]:
    """How many rows were dropped, duplicated, truncated, joined (concatenated) or unseen by the baseline."""
    ours = Counter({key: entry.times for key, entry in base.items()})
    theirs = Counter({key: entry.times for key, entry in cand.items()})
    missing, extra = ours - theirs, theirs - ours
    gone = {base[key].head: base[key].length for key in missing if key not in theirs}
    new = [cand[key] for key in extra if key not in ours]
    truncated = sum(1 for entry in new if entry.head in gone and entry.length < gone[entry.head])
    joined = sum(1 for entry in new if entry.head in gone and entry.length > gone[entry.head])
    return {"dropped": sum(missing.values()) - truncated - joined,
            "duplicated": sum(n for key, n in extra.items() if key in ours),
            "truncated": truncated, "joined": joined, "unseen": len(new) - truncated - joined}


def _sampler_order(base: RowCensus, cand: RowCensus, tol: float) -> ParityVerdict:
    """Other rows in the compared steps, from a library sampler that hands out each row of the data set
    once an epoch in both runs: an order change, judged on the first step's rows both runs hold."""
    first, matched = _worst(base.step1, cand.step1)
    said = (f"data order changed: the script's own sampler ({cand.order.get('sampler')}) hands out each of the "
            f"{cand.order.get('rows')} rows once an epoch, in another order")
    if first > tol:
        return _result(False, "objective", first, tol,
                       f"per-row losses differ by {first:.2e} > tolerance {tol:.0e} at the initial weights on the "
                       f"{matched} rows both first steps hold: this change trains something else; {said}")
    seen = (f"{matched} rows of the first step matched at the initial weights, within {first:.2e} (tolerance {tol:.0e})"
            if matched else "no row of the first step was in the baseline's first step, so no loss was compared")
    return _result(True, "order", first if matched else None, tol,
                   f"{said}; {seen}; the second step follows another first update, so it is not compared")
