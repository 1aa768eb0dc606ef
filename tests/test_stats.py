"""Paired comparisons of success records on shared seeds."""

from __future__ import annotations

import numpy as np
import pytest

from vla_recover.stats import mcnemar_one_sided_p, paired_bootstrap_interval, paired_outcomes


def test_paired_counts_use_only_the_seeds_both_ran() -> None:
    counts, a, b = paired_outcomes([1, 2, 3, 4, 9], [1, 1, 0, 0, 1], [4, 3, 2, 1, 7], [1, 1, 0, 1, 0])
    assert (counts.seeds, counts.both, counts.only_a, counts.only_b, counts.neither) == (4, 1, 1, 2, 0)
    assert a.tolist() == [1, 1, 0, 0] and b.tolist() == [1, 0, 1, 1]
    assert counts.difference == pytest.approx(-0.25) and counts.agreement == pytest.approx(0.25)
    with pytest.raises(ValueError, match="outcomes_a: 2 outcomes for 3 seeds"):
        paired_outcomes([1, 2, 3], [1, 0], [1], [1])


def test_exact_mcnemar() -> None:
    assert mcnemar_one_sided_p(0, 0) == 1.0
    assert mcnemar_one_sided_p(5, 0) == pytest.approx(1 / 32)
    assert mcnemar_one_sided_p(0, 5) == 1.0
    assert mcnemar_one_sided_p(3, 3) == pytest.approx(42 / 64)  # P(X >= 3), X ~ Bin(6, 1/2)


def test_paired_bootstrap_interval_brackets_the_difference() -> None:
    rng = np.random.default_rng(0)
    a = (rng.random(200) < 0.6).astype(int)
    b = a.copy()
    b[:20] = 1 - b[:20]
    low, high = paired_bootstrap_interval(a, b)
    assert low <= (a - b).mean() <= high and high - low < 0.2
    assert paired_bootstrap_interval(a, a) == (0.0, 0.0)
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_bootstrap_interval(a, b[:5])
