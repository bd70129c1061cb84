"""One folder per kind of job (hf text, vlm, mlp, script): its runner, its exporter, its job builder."""
