"""Which rows a script's trial trained, by content: the census parity by row identity reads.

Every training call of the script's model is keyed row by row (a hash of the row's real tokens,
runner._row_keys), so a row is the same row whatever its position, padding or micro-batch. Over all
the steps a trial runs (parity, warm-up, measured: the same count in every trial of a tune) the census
counts each row and keeps its length and the hash of its first tokens, which is what names a row that
was cut short or joined to another (probes/row_parity.py). For the two parity steps it also keeps each
micro-batch's rows in order: the split that the script's per-micro-batch mean weighs rows by.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ...config.messages import PARITY_STEPS

KEY_CHARS = 16    # hex digits of a row's key: 64 bits, no collision in any run's rows
_HEAD_TOKENS = 8  # a row's first tokens: the same head and another length is the row truncated or joined


def row_key(tokens: list[int]) -> str:
    return hashlib.sha1(repr(tokens).encode()).hexdigest()[:KEY_CHARS]


class Census:
    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {}              # key -> [count, tokens, head]
        self.splits: list[list[list[str]]] = [[] for _ in range(PARITY_STEPS)]

    def add(self, step: int, keyed: list[tuple[str, slice, int]], ids: Any) -> None:
        """One model call in optimizer step `step` (1-based): its rows, keyed as runner._row_keys keys them."""
        for key, span, index in keyed:
            entry = self.rows.get(key)
            if entry is None:
                head = ids[index, span.start:min(span.stop, span.start + _HEAD_TOKENS)].tolist()
                self.rows[key] = [1, span.stop - span.start, row_key(head)]
            else:
                entry[0] += 1
        if step <= PARITY_STEPS:
            self.splits[step - 1].append([key for key, _, _ in keyed])

    def summary(self, losses: dict[str, dict[str, float]], steps: int) -> dict[str, Any] | None:
        """The trial's `parity_rows`: per-row losses of the parity steps by key, their micro-batches, and
        the rows of all `steps` steps; None where no per-row loss was read."""
        if not losses.get("step1"):
            return None
        return {"step1": dict(losses["step1"]), "step2": dict(losses.get("step2") or {}),
                "splits": self.splits, "rows": self.rows, "steps": steps}
