"""What a trial runs: each runner is `python -m autotune.runners.NAME SPEC RESULT` (or forked by the
local executor through `common.run_forked`). `hf` is the built-in Hugging Face causal-LM runner.
Importing this package loads no runner (they import torch).
"""

__all__ = ["common", "hf"]
