"""Chooses what to try next. Pure: it returns hypotheses and updates, it changes nothing."""

from .rank import Hypothesis, key, pooled, rank, score
from .revise import Observation, find_split, observe, outcome_of, restructure

__all__ = ["Hypothesis", "Observation", "find_split", "key", "observe", "outcome_of", "pooled", "rank", "restructure", "score"]
