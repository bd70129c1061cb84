"""Chooses what to try next. Pure: it returns hypotheses and updates, it changes nothing."""

from .rank import Hypothesis, key, rank

__all__ = ["Hypothesis", "key", "rank"]
