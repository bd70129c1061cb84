"""A model of the whole measured space, for what to try once the single changes are spent.

Every trial so far measured log(candidate / incumbent) with an interval: a linear model over the
knobs explains them all at once. Its terms are one per knob value (its effect against the user's
config) and one per value pair of two knobs, so a change that lost on one incumbent can still be
predicted to win on another that differs in a knob it interacts with, and two changes that each lost
can be predicted to win together. Pairs of knobs that interact (links.INTERACTIONS and the beliefs'
links) get the wider prior; how wide every pair's is, the trials say (the spread under which they
are most likely: narrow while they add up, wide once they do not). Bayesian
linear regression: the prior of each knob value is what the beliefs say of it (rank.score: P(helps)
and its ratio), each measurement weighs by its own interval; the posterior gives every config one
step or two from the incumbent an expected gain and an uncertainty.

The proposal is the config of highest expected improvement, E[max(0, log gain)]: an untested region
has some, a measured loss little. The loop stops when the best proposal's expected improvement is
below the noise floor: nothing left is likely to be seen as a gain.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Iterable, Sequence

import numpy as np

from ..config.types import Device
from ..kb.features import FeatureView
from ..kb.claims import Claim
from ..config.knobs import CATALOG, CATALOG_ORDER, Knobs, divisors
from .combine import repaired
from .links import incumbents, linked
from ..config.records import RecordLike, Source, typed
from .rank import Hypothesis, key, score

MAIN_SD = 0.3           # prior spread of a knob value's log effect (x0.74 .. x1.35 at one sd)
PAIR_SD = 0.15          # prior spread of an interaction term of linked knobs (at least)
# Prior spreads tried for every interaction term, linked knobs or not; the trials choose one (the
# evidence of each, `Model.fit`). Log gains add only roughly: a change shrinks the share of the step
# another speeds up, kernels differ in what they fuse (on cpu-long-tail sdpa and fused AdamW each lost
# on micro-batch 2 with padding_free, x0.87 and x0.95, and together won x1.14). Where the trials so far
# depart from an additive view, pairs of knobs nothing links are given room to win together; where
# they agree with it, the narrowest spread keeps the model to the singles' sum, as before.
PAIR_SDS = (0.03, 0.1, 0.2, 0.3)
MIN_SD = 0.01           # no measurement is trusted beyond 1% (the interval of a few steps)


def space(incumbent: Knobs, effective_batch: int, features: FeatureView) -> dict[str, list[Any]]:
    """The values each knob may take: the catalog's, every micro-batch that divides the batch."""
    values: dict[str, list[Any]] = {}
    for knob, listed in CATALOG_ORDER:
        if CATALOG[knob].vision and not features.get("vlm"):
            continue
        options = divisors(effective_batch) if CATALOG[knob].climb == "divisors" else list(listed)
        values[knob] = list(dict.fromkeys([getattr(incumbent, knob), *options]))
    return values


class Model:
    """Terms: (knob, value) for values other than the user's, and ((k1, v1), (k2, v2)) for pairs of
    knobs both moved off the user's values (linked pairs with the wider prior)."""

    def __init__(self, start: Knobs, values: dict[str, list[Any]], claims: list[Claim], features: FeatureView) -> None:
        self.start = start
        self.mains = [(k, v) for k, vs in values.items() for v in vs if v != getattr(start, k)]
        self.pairs_of = {frozenset((a, b)) for a in values for b in linked(a, claims) if b in values and b != a}
        self.pairs = [((k1, v1), (k2, v2)) for (k1, v1), (k2, v2) in itertools.combinations(self.mains, 2)
                      if k1 != k2]
        self.index = {term: i for i, term in enumerate([*self.mains, *self.pairs])}
        prior = []
        for knob, value in self.mains:
            h = score(knob, value, start, claims, features)
            prior.append((2 * h.p_helps - 1) * math.log(max(h.expected_ratio, 1e-3)))
        self.mean0 = np.array(prior + [0.0] * len(self.pairs))
        self.linked_pair = np.array([frozenset((k1, k2)) in self.pairs_of for (k1, _), (k2, _) in self.pairs], bool)
        self.pair_sd = PAIR_SDS[0]
        self.var0 = self.prior_var(self.pair_sd)
        self.mean = self.mean0
        # The posterior in the space of the measurements (a few dozen), not of the terms (hundreds):
        # cov = diag(var0) - shared.T @ inner @ shared, read only on the terms a config moves.
        self.shared, self.inner = np.zeros((0, len(self.var0))), np.zeros((0, 0))

    def prior_var(self, pair_sd: float) -> np.ndarray:
        """Prior variances of the terms when interaction terms spread `pair_sd` (linked ones at least PAIR_SD)."""
        pairs = np.where(self.linked_pair, max(PAIR_SD, pair_sd), pair_sd) ** 2
        return np.concatenate([np.full(len(self.mains), MAIN_SD ** 2), pairs])

    def x(self, knobs: Knobs) -> np.ndarray:
        out = np.zeros(len(self.index))
        moved = [(k, getattr(knobs, k)) for k, _ in self.mains if getattr(knobs, k) != getattr(self.start, k)]
        for term in moved:
            if term in self.index:
                out[self.index[term]] = 1.0
        for a, b in itertools.combinations(moved, 2):
            i = self.index.get((a, b), self.index.get((b, a)))
            if i is not None:
                out[i] = 1.0
        return out

    def fit(self, records: Sequence[RecordLike]) -> int:
        """Condition on every complete trial's interleaved ratio; returns how many it used."""
        rows, ys, weights = [], [], []
        for incumbent, record in incumbents(records):
            if record.outcome != "complete" or not record.ratio or record.interval is None:
                continue
            low, high = record.interval
            sd = max(MIN_SD, (math.log(max(high, 1e-9)) - math.log(max(low, 1e-9))) / 3.92)
            rows.append(self.x(Knobs.from_dict(record.knobs)) - self.x(incumbent))
            ys.append(math.log(record.ratio))
            weights.append(sd ** -2)
        if rows:
            x, y, w = np.array(rows), np.array(ys), np.array(weights)
            self.pair_sd = max(PAIR_SDS, key=lambda sd: self.evidence(x, y, w, self.prior_var(sd)))
            self.var0 = self.prior_var(self.pair_sd)
            self.shared = x * self.var0                                   # x @ diag(var0)
            self.inner = np.linalg.inv(self.shared @ x.T + np.diag(1 / w))  # covariance of the measurements
            self.mean = self.mean0 + self.shared.T @ (self.inner @ (y - x @ self.mean0))
        return len(rows)

    def evidence(self, x: np.ndarray, y: np.ndarray, w: np.ndarray, var0: np.ndarray) -> float:
        """Log marginal likelihood of the measured log ratios under the prior `var0` (up to a constant)."""
        cov = (x * var0) @ x.T + np.diag(1 / w)
        residual = y - x @ self.mean0
        sign, logdet = np.linalg.slogdet(cov)
        return float(-0.5 * (residual @ np.linalg.solve(cov, residual) + logdet))

    def covariance(self, terms: np.ndarray) -> np.ndarray:
        """The posterior covariance of these terms."""
        shared = self.shared[:, terms]
        return np.diag(self.var0[terms]) - shared.T @ self.inner @ shared

    def gain(self, incumbent: Knobs, knobs: Knobs) -> tuple[float, float, float]:
        """Expected log gain of `knobs` over `incumbent`, its sd, and the expected improvement."""
        d = self.x(knobs) - self.x(incumbent)
        terms = np.flatnonzero(d)  # a few terms of hundreds: the quadratic form on those alone
        d = d[terms]
        mu = float(d @ self.mean[terms])
        sd = math.sqrt(max(float(d @ self.covariance(terms) @ d), 1e-12))
        z = mu / sd
        improvement = sd * math.exp(-z * z / 2) / math.sqrt(2 * math.pi) + mu * 0.5 * math.erfc(-z / math.sqrt(2))
        return mu, sd, improvement


def proposals(incumbent: Knobs, records: Sequence[RecordLike], device: Device, effective_batch: int,
              measured: set[tuple[Any, ...]], claims: Iterable[Claim] = (), features: FeatureView | None = None,
              reach: int = 2) -> list[Hypothesis]:
    """Every config one or two changes from the incumbent that applies here and was not measured,
    best expected improvement first (its `score`; `expected_ratio` the expected gain)."""
    claims, features = [c for c in claims if c.active], features or {}
    records = typed(records)
    start = Knobs.from_dict(records[0].knobs) if records else incumbent
    values = space(incumbent, effective_batch, features)
    model = Model(start, {k: list(dict.fromkeys([getattr(start, k), *vs])) for k, vs in values.items()},
                  claims, features)
    used = model.fit(records)
    singles = [(k, v) for k, vs in values.items() for v in vs if v != getattr(incumbent, k)]
    found: dict[tuple[Any, ...], Hypothesis] = {}
    for size in range(1, reach + 1):
        for combo in itertools.combinations(singles, size):
            if len({k for k, _ in combo}) < size:
                continue
            changes = repaired(incumbent, combo, device, effective_batch)
            if changes is None:  # a change this device or the config it lands in does not allow
                continue
            knobs = incumbent
            for knob, value in changes:
                knobs = knobs.with_change(knob, value)
            if key(knobs) in measured or key(knobs) in found:
                continue
            mu, sd, improvement = model.gain(incumbent, knobs)
            (knob, value), *rest = changes
            found[key(knobs)] = Hypothesis(
                knob, value, f"model of all {used} trials so far: expected x{math.exp(mu):.3f} (sd {sd:.3f} in log), "
                f"expected improvement x{math.exp(improvement):.4f}", p_helps=0.5 * math.erfc(-mu / sd / math.sqrt(2)),
                expected_ratio=math.exp(mu), score=improvement, also=tuple(rest), source=Source.MODEL)
    return sorted(found.values(), key=lambda h: -h.score)

