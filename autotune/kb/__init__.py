"""The knowledge base: its folder, the measured device peaks kept there, and the append-only store."""

from .folder import kb_folder, read_peak_cache, remember_peaks
from .store import TABLES, CorruptFileError, InvalidRecordError, Repair, Store, TornLineError, repair

__all__ = ["TABLES", "CorruptFileError", "InvalidRecordError", "Repair", "Store", "TornLineError", "kb_folder",
           "read_peak_cache", "remember_peaks", "repair"]
