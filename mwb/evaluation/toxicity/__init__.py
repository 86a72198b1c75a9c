"""Offline toxicity scoring and the RealToxicityPrompts metrics (SGEAT, Wang et al. 2022)."""
from .metrics import toxicity_metrics
from .scorers import Scorer, ScorerSpec

__all__ = ["Scorer", "ScorerSpec", "toxicity_metrics"]
