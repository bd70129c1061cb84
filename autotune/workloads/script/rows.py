"""Which rows a script's trial trained, by content: the census parity by row identity reads.

Every training call of the script's model is keyed row by row (a hash of the row's real tokens,
row_keys), so a row is the same row whatever its position, padding or micro-batch. Over all
the steps a trial runs (parity, warm-up, measured: the same count in every trial of a tune) the census
counts each row and keeps its length and the hash of its first tokens, which is what names a row that
was cut short or joined to another (probes/row_parity.py). For the two parity steps it also keeps each
micro-batch's rows in order: the split that the script's per-micro-batch mean weighs rows by.

The first DataLoader the script iterates before its first optimizer step is read too: where its sampler
is a library's (torch, transformers, accelerate, TRL: iterating one changes nothing but the random
state, which is put back), its indices for one epoch say whether it hands out every row of the data set
once. That is "the script's own sampler says so" of an order change whose first steps hold other rows
(transformers' LengthGroupedSampler under `train_sampling_strategy: group_by_length`).
"""

from __future__ import annotations

import hashlib
from typing import Any, TypedDict

from ...config.messages import PARITY_STEPS

_LIBRARIES = ("torch.", "transformers.", "accelerate.", "trl.")
_MOST_ROWS = 5_000_000   # a larger data set's sampler is not walked (its epoch would cost seconds)
KEY_CHARS = 16    # hex digits of a row's key: 64 bits, no collision in any run's rows
_HEAD_TOKENS = 8  # a row's first tokens: the same head and another length is the row truncated or joined


class SamplerOrder(TypedDict, total=False):
    """What the first loader's library sampler hands out in one epoch (parity_rows' `order`); empty
    where the loader was read and its sampler makes no claim (probes/row_parity.py reads it)."""

    sampler: str         # the innermost sampler's class
    rows: int            # the data set's rows
    permutation: bool    # each row once (all but a dropped last batch)


class ParityRows(TypedDict):
    """A script trial's `parity_rows` (schemas/measurement.json), read by probes/row_parity.py."""

    step1: dict[str, float]              # row key -> its loss in the first parity step
    step2: dict[str, float]
    splits: list[list[list[str]]]        # each parity step's micro-batches, as row keys in order
    rows: dict[str, list[Any]]           # row key -> [times trained, tokens, key of its first tokens]
    steps: int
    order: SamplerOrder | None


# A model call's rows: (row key, its span of positions, its row in the batch), as row_keys keys them.
Keyed = list[tuple[str, slice, int]]


def row_key(tokens: list[int]) -> str:
    return hashlib.sha1(repr(tokens).encode()).hexdigest()[:KEY_CHARS]


def row_keys(ids: Any, mask: Any, positions: Any) -> Keyed:
    """(key, token slice, batch index) per row: packed rows split where position_ids restart."""
    rows = []
    if positions is not None and ids.shape[0] == 1:
        starts = (positions[0] == 0).nonzero().flatten().tolist() + [ids.shape[1]]
        for a, b in zip(starts, starts[1:]):
            rows.append((slice(a, b), 0))
    else:
        for index in range(ids.shape[0]):
            length = int(mask[index].sum()) if mask is not None else ids.shape[1]
            first = int(mask[index].nonzero()[0]) if mask is not None and length else 0
            rows.append((slice(first, first + length), index))
    return [(row_key(ids[index, span].tolist()), span, index) for span, index in rows]


class Census:
    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {}              # key -> [count, tokens, head]
        self.splits: list[list[list[str]]] = [[] for _ in range(PARITY_STEPS)]
        self.order: SamplerOrder | None = None            # what the first loader's sampler hands out

    def add(self, step: int, keyed: Keyed, ids: Any) -> None:
        """One model call in optimizer step `step` (1-based): its rows, keyed as row_keys keys them."""
        for key, span, index in keyed:
            entry = self.rows.get(key)
            if entry is None:
                head = ids[index, span.start:min(span.stop, span.start + _HEAD_TOKENS)].tolist()
                self.rows[key] = [1, span.stop - span.start, row_key(head)]
            else:
                entry[0] += 1
        if step <= PARITY_STEPS:
            self.splits[step - 1].append([key for key, _, _ in keyed])

    def summary(self, losses: dict[str, dict[str, float]], steps: int) -> ParityRows | None:
        """The trial's `parity_rows`: per-row losses of the parity steps by key, their micro-batches, and
        the rows of all `steps` steps; None where no per-row loss was read."""
        if not losses.get("step1"):
            return None
        return {"step1": dict(losses["step1"]), "step2": dict(losses.get("step2") or {}),
                "splits": self.splits, "rows": self.rows, "steps": steps, "order": self.order}

    def loader(self, loader: Any) -> None:
        """A DataLoader's iteration starting: the first one's sampler read (see the module's words)."""
        if self.order is None:
            self.order = sampler_order(loader) or SamplerOrder()


def _samplers(loader: Any) -> list[Any]:
    """The loader's batch sampler and the samplers inside it, outermost first."""
    chain: list[Any] = []
    node = getattr(loader, "batch_sampler", None) or getattr(loader, "sampler", None)
    while node is not None and len(chain) < 6:
        chain.append(node)
        node = getattr(node, "batch_sampler", None) or getattr(node, "sampler", None)
    return chain


def sampler_order(loader: Any) -> SamplerOrder | None:
    """{"sampler", "rows", "permutation"}: whether one epoch of the loader's indices holds each row of its
    data set once (all but a dropped last batch); None where that is not known without side effects."""
    import random

    import torch

    chain = _samplers(loader)
    try:
        rows = len(loader.dataset)
    except TypeError:   # an iterable data set: no indices to read
        return None
    if not chain or rows > _MOST_ROWS or not all(type(s).__module__.startswith(_LIBRARIES) for s in chain):
        return None
    generators = [g for g in (getattr(s, "generator", None) for s in chain) if isinstance(g, torch.Generator)]
    saved = (torch.get_rng_state(), random.getstate(), [g.get_state() for g in generators])
    try:
        indices = [i for batch in chain[0] for i in (batch if isinstance(batch, (list, tuple)) else [batch])]
    except Exception:  # noqa: BLE001 - a sampler that cannot be walked here makes no claim
        return None
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        for generator, state in zip(generators, saved[2], strict=True):
            generator.set_state(state)
    batch = getattr(chain[0], "batch_size", None) or 1
    once = len(set(indices)) == len(indices) and all(isinstance(i, int) and 0 <= i < rows for i in indices)
    return {"sampler": type(chain[-1]).__name__, "rows": rows, "permutation": once and len(indices) > rows - batch}


def watch_loaders(census: Census) -> Any:
    """DataLoader.__iter__ telling `census` each iteration; the handle's remove() puts it back."""
    import types

    from torch.utils.data import DataLoader

    original = DataLoader.__iter__

    def __iter__(loader: Any) -> Any:
        census.loader(loader)
        return original(loader)

    DataLoader.__iter__ = __iter__

    def remove() -> None:
        DataLoader.__iter__ = original

    return types.SimpleNamespace(remove=remove)
