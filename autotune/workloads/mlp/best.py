"""The MLP job's best config: the plain PyTorch loop's settings in the names of the calls that take
them, and the autotune command that measures it again (the MLP has no trainer command to hand over)."""

from __future__ import annotations

import shlex
from typing import Any

from ...config.job import Job
from ...config.knobs import Knobs
from ...config.types import JsonObject
from .job import MLP_KNOBS


def loop_settings(job: Job, knobs: Knobs) -> JsonObject:
    """The best config of a plain PyTorch loop (model=mlp), in the names of the calls that take it."""
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}.get(knobs.precision)
    return {"DataLoader": {"batch_size": knobs.per_device_train_batch_size,
                           "num_workers": knobs.dataloader_num_workers, "pin_memory": knobs.dataloader_pin_memory},
            "gradient_accumulation_steps": knobs.accumulation(job.effective_batch),
            "torch.autocast": {"dtype": dtype} if dtype else None,
            "torch.backends.cuda.matmul.allow_tf32": knobs.precision == "tf32",
            "torch.compile": knobs.torch_compile,
            "torch.optim.AdamW": {"fused": knobs.optim == "adamw_torch_fused"}}


def remeasure_command(job: Job, knobs: Knobs) -> str:
    """autotune measuring the best config again: the MLP has no trainer command to hand over."""
    words = ["autotune", "tune", f"{job.run}-best", f"model={job.model}", f"mlp_width={job.mlp.width}",
             f"mlp_depth={job.mlp.depth}", f"mlp_rows={job.mlp.rows}", f"max_len={job.max_len}",
             f"effective_batch={job.effective_batch}"]
    words += [f"{name}={str(value).lower() if isinstance(value, bool) else value}"
              for name, value in knobs.to_dict().items() if name in MLP_KNOBS]
    return shlex.join([*words, "max_trials=1"])


def best_config(job: Job, knobs: Knobs, **_: Any) -> JsonObject:
    return {"schema_version": 1, "knobs": knobs.to_dict(), "pytorch_loop": loop_settings(job, knobs),
            "command": remeasure_command(job, knobs), "caveats": []}
