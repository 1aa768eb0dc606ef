"""Promote a candidate only when it beats the current version with a confidence bound.

The bound is a one-sided lower confidence limit on the difference of two success rates, Newcombe's hybrid score
interval built from the two Wilson intervals: it behaves at 0 and 100% and at small counts, where the normal
approximation does not.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.evaluate import wilson_interval

__all__ = ["Decision", "PromotionConfig", "decide", "difference_lower_bound"]


class PromotionConfig(FrozenConfig):
    confidence: float = Field(default=0.9, gt=0.5, lt=1.0, description="one-sided confidence of the lower bound")
    margin: float = Field(default=0.0, ge=-1.0, le=1.0, description="the bound must exceed this (in success rate)")


def difference_lower_bound(s1: int, n1: int, s0: int, n0: int, confidence: float) -> float:
    """Lower limit of p1 - p0 at one-sided ``confidence`` (Newcombe's method 10)."""
    if n1 <= 0 or n0 <= 0:
        raise ValueError(f"episodes: both evaluations need episodes, got {n1} and {n0}")
    z = NormalDist().inv_cdf(confidence)
    p1, p0 = s1 / n1, s0 / n0
    low1, _ = wilson_interval(s1, n1, z)
    _, high0 = wilson_interval(s0, n0, z)
    return p1 - p0 - math.sqrt((p1 - low1) ** 2 + (high0 - p0) ** 2)


@dataclass(frozen=True)
class Decision:
    promote: bool
    candidate_rate: float
    current_rate: float
    diff_lower_bound: float
    confidence: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def decide(candidate: dict[str, Any], current: dict[str, Any], config: PromotionConfig) -> Decision:
    """``candidate`` and ``current`` are evaluation results (successes, episodes) on the same held-out seeds."""
    bound = difference_lower_bound(
        candidate["successes"], candidate["episodes"], current["successes"], current["episodes"], config.confidence
    )
    return Decision(
        promote=bound > config.margin,
        candidate_rate=candidate["successes"] / candidate["episodes"],
        current_rate=current["successes"] / current["episodes"],
        diff_lower_bound=round(bound, 4),
        confidence=config.confidence,
    )
