"""The knowledge-base folder: what autotune keeps between runs (so far: measured device peaks)."""

from .folder import kb_folder, read_peak_cache, remember_peaks

__all__ = ["kb_folder", "read_peak_cache", "remember_peaks"]
