"""autotune: makes a single-GPU fine-tuning job faster by experiment."""

__version__ = "0.1.0"
