"""Built-in model presets: configs only (random weights), so smoke runs and tests need no download.

Pure data: the parent process validates names against this without importing torch.
"""

from __future__ import annotations

# Small enough for a CPU trial in seconds, large enough that batching and attention choices matter.
_TINY = dict(
    vocab_size=2048, hidden_size=128, intermediate_size=352, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
)

PRESETS: dict[str, dict] = {
    "tiny-llama": {"model_type": "llama", **_TINY},
    "tiny-qwen2": {"model_type": "qwen2", **_TINY, "tie_word_embeddings": True},
    # The shape of Qwen2.5-0.5B (its public config.json), with random weights: a real GPU workload
    # that needs no download.
    "qwen2.5-0.5b-shape": {
        "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "rope_theta": 1000000.0, "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
    },
}

# What `smoke` shrinks any architecture to: same model_type, tiny dimensions.
SMOKE_DIMENSIONS = {k: v for k, v in _TINY.items() if k != "vocab_size"}
DEMO_PRESET = "tiny-qwen2"


def preset_for_architecture(model_type: str | None) -> str:
    """The tiny preset closest to an architecture, for smoke runs whose config cannot be read."""
    if model_type and "qwen" in model_type:
        return "tiny-qwen2"
    return "tiny-llama"
