"""Per-row losses of a user's script for parity, from the loss the script itself computes.

Read for the first two optimizer steps, keyed by each row's tokens (workloads/script/runner.py), by the first
route that the script's model offers:
- `labels=` given to the model and logits returned: the causal-LM loss, shifted as Hugging Face does;
- `labels=` given and per-token `log_probs` returned (TRL's fused LM head, `fused_lm_head=True`, which
  returns no logits): their negatives, over the positions its `label_mask` keeps;
- a `cross_entropy` call inside the model's forward (nanoGPT's `model(X, Y)` computing its loss from
  positional targets): that call's own logits and targets, recomputed per row;
- logits and a loss returned with integer targets passed to the model (a compiled model, whose inner
  calls are not seen): the alignment of logits to targets (shifted or not) that gives the returned loss;
- a `cross_entropy` call on the logits after the model returned them (the loss computed in the loop).
Dropout is off in the model for those two steps (its modules' `p` and float `*dropout*` attributes
set to 0, put back after the second step), so that a change that trains the same thing reads the same
losses; the timed steps run with the script's dropout. Where no route is there, `why_not` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ...config.messages import PARITY_STEPS
from .rows import Keyed

# The returned loss and its recomputation from the same logits agree to float rounding; at random
# weights the two alignments' means differ by little more, so the closer one within this is taken.
_LOSS_MATCH = 1e-4


@dataclass(frozen=True)
class LossOptions:
    """The options of a `cross_entropy` call that its per-row losses are recomputed with."""

    ignore_index: int = -100
    label_smoothing: float = 0.0
    weight: Any = None    # a tensor of class weights (torch is imported lazily)

    @classmethod
    def of(cls, call: Mapping[str, object]) -> "LossOptions":
        """From the call's own arguments by name (whatever else the user passed is not read)."""
        ignore, smoothing = call.get("ignore_index", -100), call.get("label_smoothing", 0.0)
        return cls(ignore if isinstance(ignore, int) else -100,
                   float(smoothing) if isinstance(smoothing, (int, float)) else 0.0, call.get("weight"))


def _float_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.is_floating_point()


class LossReader:
    def __init__(self) -> None:
        self.losses: dict[str, dict[str, float]] = {"step1": {}, "step2": {}}
        self.inside: list[tuple[Any, Any, LossOptions]] = []   # cross_entropy calls in this model call
        self.in_model = False
        self.pending: tuple[str, Keyed, Any] | None = None        # a model call whose loss comes after it
        self.calls = self.read = 0
        self.route: str | None = None
        self._dropouts: list[tuple[Any, str, float]] = []

    # dropout off for the parity steps ------------------------------------------------------------
    def quiet(self, model: Any) -> None:
        """Dropout off in `model` (called when the model is first seen, before any parity step)."""
        import torch

        for module in model.modules():
            if isinstance(module, torch.nn.modules.dropout._DropoutNd):
                if module.p > 0:
                    self._dropouts.append((module, "p", module.p))
                    module.p = 0.0
                continue
            for name, value in list(vars(module).items()):
                if "dropout" in name.lower() and isinstance(value, float) and not isinstance(value, bool) and value > 0:
                    self._dropouts.append((module, name, value))
                    setattr(module, name, 0.0)

    def restore(self) -> None:
        for module, name, value in reversed(self._dropouts):
            setattr(module, name, value)
        self._dropouts.clear()

    # the model's calls -------------------------------------------------------------------------------
    def begin(self) -> None:
        self.inside.clear()
        self.in_model = True

    def end(self, step: int, keyed: Keyed, ids: Any, args: Any, kwargs: Mapping[str, object], output: Any) -> None:
        """The model returned, in parity step `step`: per-row losses by the first route that applies.
        `kwargs`: the model call's own keyword arguments (whatever its forward takes)."""
        self.in_model = False
        self.pending = None
        if step > PARITY_STEPS:
            return
        key = f"step{step}"
        self.calls += 1
        labels: Any = kwargs.get("labels")   # a tensor where given
        logits = _logits(output, ids)
        if labels is not None and logits is not None:
            self._rows(key, keyed, ids, logits[:, :-1], labels[:, 1:], LossOptions(), "labels")
            return
        log_probs: Any = getattr(output, "log_probs", None)
        if labels is not None and _float_tensor(log_probs) and log_probs.dim() == 2 and log_probs.shape[0] == ids.shape[0]:
            self._token_rows(key, keyed, ids, -log_probs.detach().float(), getattr(output, "label_mask", None))
            return
        for logits_in, target, options in reversed(self.inside):
            if target.numel() % ids.shape[0] == 0:
                self._rows(key, keyed, ids, logits_in, target, options, "cross_entropy in the model")
                return
        targets, loss = _targets(ids, args, kwargs), _loss(output)
        if logits is not None and targets is not None and loss is not None:
            aligned = _aligned(logits, targets, loss)
            if aligned is not None:
                self._rows(key, keyed, ids, *aligned, LossOptions(), "returned loss")
                return
        self.pending = (key, keyed, ids)

    def cross_entropy(self, logits: Any, target: Any, options: LossOptions) -> None:
        """A `cross_entropy` call: inside the model's forward it is kept for `end`; after it, it is the
        loss of the model call just made."""
        if self.in_model:
            self.inside.append((logits.detach(), target.detach(), options))
        elif self.pending is not None and target.numel() % self.pending[2].shape[0] == 0:
            key, keyed, ids = self.pending
            self.pending = None
            self._rows(key, keyed, ids, logits.detach(), target.detach(), options, "cross_entropy on the logits")

    def _rows(self, key: str, keyed: Keyed, ids: Any, logits: Any, target: Any, options: LossOptions,
              route: str) -> None:
        import torch

        ignore = options.ignore_index
        with torch.no_grad():
            if logits.dim() == target.dim() + 1 and logits.shape[:-1] == target.shape:
                logits = logits.reshape(-1, logits.shape[-1])   # (..., classes) as cross_entropy takes it flat
                flat_target = target.reshape(-1)
            else:
                flat_target = target
            per = torch.nn.functional.cross_entropy(
                logits.float(), flat_target, reduction="none", ignore_index=ignore,
                label_smoothing=options.label_smoothing,
                weight=options.weight.float() if options.weight is not None else None)
            batch = ids.shape[0]
            per, valid = per.reshape(batch, -1), (flat_target != ignore).reshape(batch, -1)
        self._spans(key, keyed, ids, per, valid)
        self.read += 1
        self.route = self.route or route

    def _token_rows(self, key: str, keyed: Keyed, ids: Any, per: Any, mask: Any) -> None:
        """Per-token losses (batch, positions) already computed by the model: shifted where one short."""
        import torch

        valid = mask.bool() if isinstance(mask, torch.Tensor) and mask.shape == per.shape else per != 0
        self._spans(key, keyed, ids, per, valid)
        self.read += 1
        self.route = self.route or "log_probs"

    def _spans(self, key: str, keyed: Keyed, ids: Any, per: Any, valid: Any) -> None:
        width = per.shape[1]
        for row_key, span, index in keyed:
            # A row's positions; shifted targets (one fewer per row) end a position earlier.
            stop = span.stop if width == ids.shape[1] else span.stop - 1
            inner = slice(span.start, min(width, max(span.start, stop)))
            count = int(valid[index, inner].sum())
            if count:
                self.losses[key][row_key] = float(per[index, inner][valid[index, inner]].sum() / count)

    @property
    def parity(self) -> dict[str, list[float]] | None:
        if self.calls == 0 or self.read < self.calls or not self.losses["step1"]:
            return None
        return {key: [values[k] for k in sorted(values)] for key, values in self.losses.items()}

    @property
    def why_not(self) -> str | None:
        if self.parity is not None:
            return None
        if self.calls == 0:
            return "parity not checked: no training call of the script's model was seen in the first two steps"
        return ("parity not checked: the script's model gets no labels or targets the hooks can pair with its "
                "logits, and no cross_entropy on its logits was seen, so its per-row losses are out of reach")


def _logits(output: Any, ids: Any) -> Any:
    """The model's logits: `.logits`, or the first float tensor (batch, length, classes) it returned."""
    found = getattr(output, "logits", None)
    candidates = [found] if found is not None else (list(output) if isinstance(output, (tuple, list)) else [output])
    for value in candidates:
        if _float_tensor(value) and value.dim() == 3 and value.shape[:2] == ids.shape:
            return value
    return None


def _loss(output: Any) -> Any:
    found = getattr(output, "loss", None)
    candidates = [found] if found is not None else (list(output) if isinstance(output, (tuple, list)) else [])
    return next((v for v in candidates if _float_tensor(v) and v.dim() == 0), None)


def _targets(ids: Any, args: Any, kwargs: Mapping[str, object]) -> Any:
    """An integer tensor of the ids' shape passed beside them (nanoGPT's `model(X, Y)`, `targets=`)."""
    import torch

    given = list(args[1:]) + [v for k, v in kwargs.items() if k not in ("input_ids", "attention_mask", "position_ids")]
    return next((v for v in given if isinstance(v, torch.Tensor) and not v.is_floating_point()
                 and v.shape == ids.shape and v is not ids), None)


def _aligned(logits: Any, targets: Any, loss: Any) -> tuple[Any, Any] | None:
    """(logits, targets) aligned as the model's own loss aligns them: the mean cross-entropy of the
    alignment that gives the returned loss (targets already shifted, as nanoGPT's, or shifted here)."""
    import torch

    with torch.no_grad():
        wanted = float(loss.detach().float())
        gaps = []
        for pair in ((logits, targets), (logits[:, :-1], targets[:, 1:])):
            mean = float(torch.nn.functional.cross_entropy(pair[0].reshape(-1, pair[0].shape[-1]).float(),
                                                           pair[1].reshape(-1), ignore_index=-100))
            gaps.append((abs(mean - wanted), pair))
        gap, pair = min(gaps, key=lambda item: item[0])
    return pair if gap <= _LOSS_MATCH * max(abs(wanted), 1e-6) else None


def patch_cross_entropy(reader_for: Any) -> Any:
    """torch.nn.functional.cross_entropy (which nn.CrossEntropyLoss calls too) reporting each call to the
    reader `reader_for()` returns (None: not reading); the undo function is returned."""
    import torch

    original = torch.nn.functional.cross_entropy

    def cross_entropy(input: Any, target: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(input, target, *args, **kwargs)
        reader = reader_for()
        if reader is not None and isinstance(target, torch.Tensor) and not target.is_floating_point():
            names = ("weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing")
            reader.cross_entropy(input, target, LossOptions.of({**dict(zip(names, args)), **kwargs}))
        return result

    torch.nn.functional.cross_entropy = cross_entropy

    def undo() -> None:
        torch.nn.functional.cross_entropy = original

    return undo
