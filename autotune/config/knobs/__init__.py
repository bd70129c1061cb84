"""The knob table and one configuration (`Knobs`).

`table.py` is the one table: each entry (`entry.Knob`) owns a knob's values to try and their order,
what it requires (`requires.py`), how it maps onto SFTConfig / from_pretrained (`mapping.py`), its
script names, interactions, cost to measure and numerics class. Everything else reads it from here.
"""

from .config import (CATALOG, CATALOG_ORDER, INTERACTIONS, NAIVE_START, NUMERICS, REQUIRED, Knobs, job_limits,
                     knobs_schema, not_applicable, numerics_changes, numerics_limits, parse_knob_value)
from .entry import Knob, SftContext
from .requires import PACKAGES
from .table import TABLE
from .values import (ATTENTION, BASE_DTYPES, COMPILE_MODES, HUB_FLASH, IMAGE_PIXEL_CAP, OPTIMIZERS, PADDING_MODES,
                     PRECISIONS, VARLEN_BOUNDS, divisors, is_flash)

__all__ = ["ATTENTION", "BASE_DTYPES", "CATALOG", "CATALOG_ORDER", "COMPILE_MODES", "HUB_FLASH", "IMAGE_PIXEL_CAP",
           "INTERACTIONS", "NAIVE_START", "NUMERICS", "OPTIMIZERS", "PACKAGES", "PADDING_MODES", "PRECISIONS",
           "REQUIRED", "TABLE", "VARLEN_BOUNDS", "Knob", "Knobs", "SftContext", "divisors", "is_flash", "job_limits",
           "knobs_schema", "not_applicable", "numerics_changes", "numerics_limits", "parse_knob_value"]
