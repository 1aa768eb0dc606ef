"""Comparing two success records on the same seeds: discordant counts, exact McNemar, a paired bootstrap interval;
and how far the episodes' own noise moves a figure computed from several success rates (a binomial bootstrap).

Two policies evaluated on the same held-out seeds (or a fleet and an evaluation of one policy) succeed or fail
together on most seeds; only the seeds where they disagree (the discordant ones) say which is better. A paired
test uses that, and needs far fewer episodes than comparing the two success rates as if they were independent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "PairedOutcomes",
    "binomial_bootstrap_interval",
    "mcnemar_one_sided_p",
    "paired_bootstrap_interval",
    "paired_outcomes",
]


@dataclass(frozen=True)
class PairedOutcomes:
    """Outcomes of A and B on the seeds both ran: how many both won, only A, only B, neither."""

    seeds: int
    both: int
    only_a: int
    only_b: int
    neither: int

    @property
    def difference(self) -> float:
        """A's success rate minus B's on the shared seeds."""
        return (self.only_a - self.only_b) / self.seeds if self.seeds else 0.0

    @property
    def agreement(self) -> float:
        """The share of seeds with the same outcome."""
        return (self.both + self.neither) / self.seeds if self.seeds else 1.0

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "difference": round(self.difference, 4), "agreement": round(self.agreement, 4)}


def paired_outcomes(
    seeds_a: Sequence[int], outcomes_a: Sequence[int | bool], seeds_b: Sequence[int], outcomes_b: Sequence[int | bool]
) -> tuple[PairedOutcomes, np.ndarray, np.ndarray]:
    """The paired counts on the seeds both records hold, and the two outcome vectors (0/1) on those seeds."""
    for name, seeds, outcomes in (("a", seeds_a, outcomes_a), ("b", seeds_b, outcomes_b)):
        if len(seeds) != len(outcomes):
            raise ValueError(f"outcomes_{name}: {len(outcomes)} outcomes for {len(seeds)} seeds")
    b_by_seed = dict(zip((int(s) for s in seeds_b), outcomes_b, strict=True))
    shared = [(int(outcome), int(b_by_seed[int(seed)])) for seed, outcome in zip(seeds_a, outcomes_a, strict=True)
              if int(seed) in b_by_seed]  # fmt: skip
    a = np.array([pair[0] for pair in shared], dtype=np.int64)
    b = np.array([pair[1] for pair in shared], dtype=np.int64)
    counts = PairedOutcomes(
        seeds=len(shared),
        both=int(((a == 1) & (b == 1)).sum()),
        only_a=int(((a == 1) & (b == 0)).sum()),
        only_b=int(((a == 0) & (b == 1)).sum()),
        neither=int(((a == 0) & (b == 0)).sum()),
    )
    return counts, a, b


def mcnemar_one_sided_p(only_a: int, only_b: int) -> float:
    """Exact McNemar: the chance of A winning at least ``only_a`` of the discordant seeds if A and B were equally
    good (each discordant seed a fair coin). Small values say A is better; 1.0 with no discordant seed."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(only_a, n + 1))
    return min(1.0, tail / 2.0**n)


def paired_bootstrap_interval(
    a: np.ndarray, b: np.ndarray, confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Two-sided percentile interval of mean(a) - mean(b), resampling seeds (pairs) with replacement."""
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"outcomes: need two equal, non-empty vectors, got shapes {a.shape} and {b.shape}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, a.size, size=(resamples, a.size))
    differences = (a[picks] - b[picks]).mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(differences, [tail, 1.0 - tail])
    return float(low), float(high)


def binomial_bootstrap_interval(
    records: Mapping[Any, tuple[float, int]],
    statistic: Callable[[Mapping[Any, np.ndarray]], np.ndarray],
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
    same_as: Mapping[Any, Any] | None = None,
) -> tuple[float, float] | None:
    """Two-sided percentile interval of ``statistic`` when every success record (its measured rate, its episodes) is
    drawn again, independently, as Binomial(episodes, rate) / episodes: the spread the evaluation episodes alone put
    on a figure made of several success rates (a mean over pipeline seeds, a ratio of gains), the trained policies
    held fixed. ``statistic`` maps each record's key to its ``resamples`` drawn rates and returns one value per draw,
    NaN where the figure is undefined (a ratio whose denominator drew 0 or less); None where more draws than the
    interval's tail are undefined, since no interval then bounds the figure. ``same_as`` names keys that are another
    record's evaluation (a loop that promoted nothing keeps its base): they get that record's draws."""
    if not records:
        raise ValueError("records: need at least one success record")
    for key, (rate, episodes) in records.items():
        if episodes < 1 or not 0.0 <= rate <= 1.0:
            raise ValueError(f"records[{key!r}]: got rate {rate} over {episodes} episodes")
    rng = np.random.default_rng(seed)
    drawn = {key: rng.binomial(episodes, rate, size=resamples) / episodes for key, (rate, episodes) in records.items()}
    for key, original in (same_as or {}).items():
        if original not in drawn:
            raise ValueError(f"same_as[{key!r}]: {original!r} is not a record")
        drawn[key] = drawn[original]
    values = np.asarray(statistic(drawn), dtype=float)
    tail = (1.0 - confidence) / 2.0
    defined = values[np.isfinite(values)]
    if defined.size < (1.0 - tail) * values.size:
        return None
    low, high = np.quantile(defined, [tail, 1.0 - tail])
    return float(low), float(high)
