"""Per-token cross-entropy from hidden states, chunk by chunk: the `[tokens, vocab]` logits never exist.

The knob `chunked_cross_entropy` in autotune's own loop (engine/train.py: VLMs). With a 151,936-token
vocabulary (Qwen) at 2048 tokens a row, a row's fp32 logits are 1.2 GB, and the standard loss holds
them, their log-softmax and both gradients at once. Here the forward keeps only each token's
log-sum-exp; the backward recomputes each chunk's logits and turns them into the gradient in place.
The loss is the standard one (log-sum-exp minus the target logit, zero where the label is ignored),
so per-row losses match the full-logits loss to fp32 summation order. `trl.SFTTrainer` (text trials)
does the same in its fused LM head; this is the plain-PyTorch twin for the loop TRL does not run.
"""

from __future__ import annotations

from typing import Any

import torch

IGNORE = -100
# fp32 logits of one chunk at most this large: small next to a row's logits at a large vocabulary,
# large enough that each chunk's matmul keeps a GPU busy (>= 16 tokens x the vocabulary).
CHUNK_BYTES = 64 * 2**20
MIN_CHUNK_TOKENS = 16


def chunk_tokens(vocab: int) -> int:
    return max(MIN_CHUNK_TOKENS, CHUNK_BYTES // (4 * vocab))


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """One chunk's logits as the standard path makes them: the matmul in the compute dtype, then fp32."""
    logits = torch.mm(hidden.to(dtype), weight.to(dtype).t())
    if bias is not None:
        logits = logits + bias.to(dtype)
    return logits.float()


class ChunkedCrossEntropy(torch.autograd.Function):
    """losses[i] = logsumexp(h_i W^T + b) - (h_i W^T + b)[y_i], 0 where y_i is ignored."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                labels: torch.Tensor, dtype: torch.dtype, chunk: int) -> torch.Tensor:
        valid = labels != IGNORE
        safe = labels.clamp(min=0)
        losses = torch.zeros(hidden.shape[0], device=hidden.device, dtype=torch.float32)
        lse = torch.zeros_like(losses)
        with torch.autocast(hidden.device.type, enabled=False), torch.no_grad():
            for start in range(0, hidden.shape[0], chunk):
                end = min(start + chunk, hidden.shape[0])
                logits = _logits(hidden[start:end], weight, bias, dtype)
                lse[start:end] = torch.logsumexp(logits, dim=-1)
                target = logits.gather(1, safe[start:end, None]).squeeze(1)
                losses[start:end] = torch.where(valid[start:end], lse[start:end] - target, 0.0)
        ctx.save_for_backward(hidden, weight, bias if bias is not None else torch.empty(0), labels, lse)
        ctx.has_bias, ctx.dtype, ctx.chunk = bias is not None, dtype, chunk
        return losses

    @staticmethod
    def backward(ctx: Any, grad_losses: torch.Tensor) -> tuple:
        hidden, weight, bias, labels, lse = ctx.saved_tensors
        bias = bias if ctx.has_bias else None
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        valid = labels != IGNORE
        safe = labels.clamp(min=0)
        grad_hidden = torch.zeros(hidden.shape, device=hidden.device, dtype=torch.float32) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=torch.float32) if need_weight else None
        grad_bias = torch.zeros(weight.shape[0], device=weight.device, dtype=torch.float32) if need_bias else None
        with torch.autocast(hidden.device.type, enabled=False), torch.no_grad():
            for start in range(0, hidden.shape[0], ctx.chunk):
                end = min(start + ctx.chunk, hidden.shape[0])
                # softmax - onehot, scaled by each token's incoming gradient, in place on the recomputed chunk
                grad = _logits(hidden[start:end], weight, bias, ctx.dtype).sub_(lse[start:end, None]).exp_()
                grad[torch.arange(end - start, device=grad.device), safe[start:end]] -= 1.0
                grad.mul_((grad_losses[start:end] * valid[start:end])[:, None].float())
                if grad_hidden is not None:
                    grad_hidden[start:end] = torch.mm(grad.to(ctx.dtype), weight.to(ctx.dtype)).float()
                if grad_weight is not None:
                    grad_weight += torch.mm(grad.t().to(ctx.dtype), hidden[start:end].to(ctx.dtype)).float()
                if grad_bias is not None:
                    grad_bias += grad.sum(0)
        return (grad_hidden.to(hidden.dtype) if grad_hidden is not None else None,
                grad_weight.to(weight.dtype) if grad_weight is not None else None,
                grad_bias.to(bias.dtype) if grad_bias is not None else None, None, None, None)


def token_losses(hidden: torch.Tensor, head: torch.nn.Module, labels: torch.Tensor,
                 dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-token losses of `hidden` ([tokens, hidden]) through the LM head's weights, in chunks."""
    return ChunkedCrossEntropy.apply(hidden, head.weight, head.bias, labels, dtype, chunk_tokens(head.weight.shape[0]))


def hidden_states_out(model: torch.nn.Module) -> torch.nn.Module:
    """Make the model's LM head pass its input through, so the forward's `logits` are the hidden states
    the chunked loss projects itself; returns the head (its weights are still the model's, tied or not).
    Permanent for the trial: a `torch.compile` of the model traces the forward once, with the head as it is."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = base.get_output_embeddings()
    if head is None or not isinstance(head, torch.nn.Linear):
        raise ValueError(f"{type(base).__name__} has no linear LM head the chunked loss can project through")
    head.forward = lambda hidden: hidden  # type: ignore[method-assign]
    return head
