"""Hugging Face causal-LM jobs: the runner, TRL's SFT path, the model loading, the hand-over."""
