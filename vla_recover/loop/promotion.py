"""Promote a candidate only when it beats the current version by a test that holds at the configured confidence.

Candidate and incumbent are evaluated on the same held-out seeds, so the test is paired: exact McNemar on the
seeds where exactly one of them succeeded (``vla_recover.stats``). The candidate is promoted when winning that many
of the discordant seeds would be unlikely were the two equally good (one-sided p below ``1 - confidence``) and its
gain on the shared seeds exceeds ``margin``. Two evaluations without per-seed outcomes on shared seeds (results
saved before evaluations kept them) fall back to an unpaired bound: a one-sided lower confidence limit on the
difference of the two success rates, Newcombe's hybrid score interval from the two Wilson intervals.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.evaluate import wilson_interval
from vla_recover.stats import mcnemar_one_sided_p, paired_outcomes

__all__ = ["Decision", "PromotionConfig", "decide", "difference_lower_bound"]


class PromotionConfig(FrozenConfig):
    confidence: float = Field(default=0.9, gt=0.5, lt=1.0, description="one-sided confidence of the test")
    margin: float = Field(default=0.0, ge=-1.0, le=1.0, description="the gain must exceed this (in success rate)")


def difference_lower_bound(s1: int, n1: int, s0: int, n0: int, confidence: float) -> float:
    """Lower limit of p1 - p0 at one-sided ``confidence`` (Newcombe's method 10), for unpaired evaluations."""
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
    confidence: float
    test: str  # "mcnemar" (paired, on shared seeds) or "newcombe" (unpaired)
    shared_seeds: int = 0
    candidate_only: int = 0  # shared seeds the candidate won and the incumbent lost
    current_only: int = 0  # and the other way round
    p_value: float | None = None  # McNemar's one-sided exact p
    diff_lower_bound: float | None = None  # the unpaired bound

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def decide(candidate: dict[str, Any], current: dict[str, Any], config: PromotionConfig) -> Decision:
    """``candidate`` and ``current`` are evaluation results (successes, episodes, and per-seed ``seeds`` and
    ``outcomes`` where they kept them)."""
    rates = {
        "candidate_rate": candidate["successes"] / candidate["episodes"],
        "current_rate": current["successes"] / current["episodes"],
        "confidence": config.confidence,
    }
    if "outcomes" in candidate and "outcomes" in current:
        counts, _, _ = paired_outcomes(candidate["seeds"], candidate["outcomes"], current["seeds"], current["outcomes"])
        if counts.seeds:
            p = mcnemar_one_sided_p(counts.only_a, counts.only_b)
            return Decision(
                promote=p < 1.0 - config.confidence and counts.difference > config.margin,
                test="mcnemar",
                shared_seeds=counts.seeds,
                candidate_only=counts.only_a,
                current_only=counts.only_b,
                p_value=p,
                **rates,
            )
    bound = difference_lower_bound(
        candidate["successes"], candidate["episodes"], current["successes"], current["episodes"], config.confidence
    )
    return Decision(promote=bound > config.margin, test="newcombe", diff_lower_bound=round(bound, 4), **rates)
