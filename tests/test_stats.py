"""Paired comparisons of success records on shared seeds."""

from __future__ import annotations

import numpy as np
import pytest

from vla_recover.stats import (
    binomial_bootstrap_interval,
    mcnemar_one_sided_p,
    paired_bootstrap_interval,
    paired_outcomes,
)


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


def test_binomial_bootstrap_interval_of_a_mean_matches_the_normal_approximation() -> None:
    records = {("seed0", "habc"): (0.7, 200), ("seed1", "habc"): (0.6, 200)}
    low, high = binomial_bootstrap_interval(records, lambda r: (r[("seed0", "habc")] + r[("seed1", "habc")]) / 2)
    half = 1.96 * np.sqrt(0.7 * 0.3 / 200 + 0.6 * 0.4 / 200) / 2
    assert low == pytest.approx(0.65 - half, abs=0.01) and high == pytest.approx(0.65 + half, abs=0.01)
    # the same draws for the same seed: a figure's interval does not move between two reports of one run
    assert binomial_bootstrap_interval(records, lambda r: r[("seed0", "habc")]) == binomial_bootstrap_interval(
        records, lambda r: r[("seed0", "habc")]
    )


def test_binomial_bootstrap_ratio_shares_the_base_draw_and_refuses_an_unbounded_one() -> None:
    def gain_ratio(r: dict) -> np.ndarray:
        numerator, denominator = r["method"] - r["base"], r["demos"] - r["base"]
        return np.where(denominator > 0, numerator / np.where(denominator > 0, denominator, 1.0), np.nan)

    bounded = binomial_bootstrap_interval({"base": (0.2, 200), "method": (0.7, 200), "demos": (0.5, 200)}, gain_ratio)
    assert bounded is not None and bounded[0] < 0.5 / 0.3 < bounded[1]
    # a denominator within noise of zero: no interval bounds the ratio
    assert (
        binomial_bootstrap_interval({"base": (0.1, 200), "method": (0.2, 200), "demos": (0.11, 200)}, gain_ratio)
        is None
    )
    with pytest.raises(ValueError, match=r"records\['base'\]: got rate 1.5 over 200 episodes"):
        binomial_bootstrap_interval({"base": (1.5, 200)}, lambda r: r["base"])


def test_binomial_bootstrap_draws_a_kept_base_once() -> None:
    """A loop that promoted nothing keeps its base: its figure is the base's evaluation, so its gain is exactly 0 in
    every draw, not the difference of two independent draws."""
    gain = binomial_bootstrap_interval(
        {"base": (0.3, 200)}, lambda r: 100 * (r["kept"] - r["base"]), same_as={"kept": "base"}
    )
    assert gain == (0.0, 0.0)
    with pytest.raises(ValueError, match=r"same_as\['kept'\]: 'nowhere' is not a record"):
        binomial_bootstrap_interval({"base": (0.3, 200)}, lambda r: r["base"], same_as={"kept": "nowhere"})
