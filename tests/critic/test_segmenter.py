"""Segmenter rules on synthetic progress curves, and the retention policy."""

from __future__ import annotations

import numpy as np
import pytest

from vla_recover.config import ConfigError, validate_config
from vla_recover.critic.retention import RetentionConfig, retention_labels
from vla_recover.critic.segmenter import SegmenterConfig, segment_episode

# rise 0-5, flat 6-11, fall 12-16, regain the lost ground 17-21, new ground 22-26
CURVE = np.array(
    [0, 0.1, 0.2, 0.3, 0.4, 0.5] + [0.5] * 6 + [0.4, 0.3, 0.2, 0.1, 0.0] + [0.1, 0.2, 0.3, 0.4, 0.5]
    + [0.6, 0.7, 0.8, 0.9, 1.0]
)  # fmt: skip
CRISP = {
    "rule": "slope",
    "smooth_steps": 1,
    "slope_steps": 2,
    "rise_per_step": 0.01,
    "fall_per_step": 0.01,
    "regain_margin": 0.0,
}


def crisp(**overrides: float | str) -> SegmenterConfig:
    return validate_config(SegmenterConfig, {**CRISP, **overrides})


def test_each_kind_is_cut_where_the_curve_says() -> None:
    # the slope is taken over the step before and after, so a kink belongs to the side it leans towards
    assert segment_episode(CURVE, crisp(min_steps=1)) == [
        (0, 6, "progress"),
        (6, 11, "idle"),
        (11, 16, "failure_inducing"),
        (16, 17, "idle"),  # the valley
        (17, 21, "recovery"),  # rising, still below the earlier best of 0.5
        (21, 27, "progress"),
    ]


def test_the_dead_band_rule_cuts_each_kind_and_starts_a_fall_where_a_noisy_plateau_ends() -> None:
    band = {"rule": "dead_band", "smooth_steps": 1, "move": 0.05, "rise_per_step": 0.01, "fall_per_step": 0.01}
    assert segment_episode(CURVE, validate_config(SegmenterConfig, {**band, "regain_margin": 0.0, "min_steps": 1})) == [
        (0, 6, "progress"),
        (6, 12, "idle"),  # the fall turns at the plateau's last step (11) and takes the steps after it
        (12, 17, "failure_inducing"),
        (17, 21, "recovery"),
        (21, 27, "progress"),
    ]
    # a critic-like curve, the other settings at their defaults: a rise, a plateau wobbling by 0.01 for 40 steps,
    # a fall, a regain; the fall starts where the plateau ends (step 90), not at its highest wobble, and the
    # wobble is one idle run
    rng = np.random.default_rng(0)
    wobbly = np.concatenate(
        [np.linspace(0, 0.5, 50), 0.5 + rng.normal(0, 0.01, 40), np.linspace(0.5, 0.2, 15), np.linspace(0.2, 1, 40)]
    )
    dead_band = SegmenterConfig(rule="dead_band")
    assert segment_episode(wobbly, dead_band) == [
        (0, 51, "progress"),
        (51, 91, "idle"),
        (91, 107, "failure_inducing"),
        (107, 119, "recovery"),
        (119, 145, "progress"),
    ]
    # a slow drift moves past the band but slower than rise_per_step: idle
    drift = np.linspace(0.3, 0.4, 100)  # 0.001 per step
    assert segment_episode(drift, dead_band) == [(0, 100, "idle")]


def test_runs_shorter_than_min_steps_join_their_neighbour() -> None:
    assert segment_episode(CURVE, crisp(min_steps=2)) == [
        (0, 6, "progress"),
        (6, 11, "idle"),
        (11, 17, "failure_inducing"),
        (17, 21, "recovery"),
        (21, 27, "progress"),
    ]
    short_first = np.concatenate([[0.3, 0.3], np.linspace(0.3, 1.0, 20)])
    assert segment_episode(short_first, crisp(min_steps=3)) == [(0, 22, "progress")]


def test_smoothing_keeps_one_noisy_step_from_making_a_segment() -> None:
    rng = np.random.default_rng(0)
    noisy = np.linspace(0, 1, 120) + rng.normal(0, 0.01, 120)
    assert segment_episode(noisy, SegmenterConfig()) == [(0, 120, "progress")]


def test_rewind_rows_get_no_critic_segment_and_split_the_run_around_them() -> None:
    rising = np.linspace(0, 1, 30)
    progress = np.concatenate([rising[:10], rising[9::-1][:5], rising[10:]])  # 5 rewind rows after step 9
    supervision = [(0, 10, "autonomous"), (10, 15, "rewind"), (15, 35, "intervention")]
    assert segment_episode(progress, crisp(), supervision) == [(0, 10, "progress"), (15, 35, "progress")]


def test_length_one_empty_and_nan_episodes() -> None:
    assert segment_episode(np.array([0.4])) == [(0, 1, "idle")]
    with pytest.raises(ValueError, match=r"progress: expected a non-empty 1-D curve, got shape \(0,\)"):
        segment_episode(np.array([]))
    with pytest.raises(ValueError, match="progress: NaN or Inf at step 2"):
        segment_episode(np.array([0.0, 0.1, np.nan, 0.2]))


def test_retention_keeps_progress_recovery_and_interventions_by_default() -> None:
    critic = [(0, 4, "progress"), (4, 6, "idle"), (6, 8, "failure_inducing"), (8, 10, "recovery")]
    supervision = [(0, 5, "autonomous"), (5, 7, "intervention"), (7, 10, "autonomous")]
    np.testing.assert_array_equal(retention_labels(11, critic, supervision), [1, 1, 1, 1, 0, 1, 1, 0, 1, 1, 0])
    as_negatives = RetentionConfig(negatives=True, keep_interventions=False)
    np.testing.assert_array_equal(
        retention_labels(10, critic, supervision, as_negatives), [1, 1, 1, 1, -1, -1, -1, -1, 1, 1]
    )
    with pytest.raises(ConfigError, match="keep"):
        validate_config(RetentionConfig, {"keep": ["progress", "wandering"]})


def test_per_kind_f1_and_the_length_only_baseline() -> None:
    from vla_recover.critic.metrics import LengthBaseline, per_kind_f1, step_labels

    truth = step_labels(10, [(0, 4, "progress"), (4, 6, "idle"), (6, 10, "recovery")])
    predicted = step_labels(10, [(0, 5, "progress"), (5, 10, "recovery")])
    scores = per_kind_f1(truth, predicted)
    assert scores["progress"] == pytest.approx(8 / 9, abs=1e-4)  # 4 right, 1 idle step called progress
    assert scores["idle"] == 0.0 and scores["failure_inducing"] is None
    assert scores["recovery"] == pytest.approx(8 / 9, abs=1e-4)
    assert scores["macro"] == pytest.approx((8 / 9 + 0 + 8 / 9) / 3, abs=1e-4) and scores["accuracy"] == 0.8

    # the baseline learns "short episodes are all progress, long ones idle at the end" and nothing else
    def labelled(length: int) -> np.ndarray:
        half = min(length, 20) if length > 20 else length
        return step_labels(length, [(0, half, "progress")] + ([(half, length, "idle")] if half < length else []))

    short = labelled(10)
    baseline = LengthBaseline.fit([10, 11, 40, 41], [labelled(n) for n in (10, 11, 40, 41)], bins=2)
    np.testing.assert_array_equal(baseline.predict(10), short)
    assert list(baseline.predict(40)[[0, 39]]) == [0, 1]  # progress first, idle last


def test_ground_truth_reads_moves_past_the_dead_band_and_ignores_jitter() -> None:
    from vla_recover.critic.metrics import ground_truth_segments

    rng = np.random.default_rng(0)
    hover = 0.3 + rng.uniform(-0.008, 0.008, 40)  # a hovering arm: jitter well inside the 0.02 dead band
    assert ground_truth_segments(hover) == [(0, 40, "idle")]
    reach = np.linspace(0.0, 0.3, 11)  # +0.03 per step
    hold = np.full(5, 0.3)
    drop = np.array([0.25, 0.15, 0.1])  # the object slips
    regain = np.array([0.13, 0.17, 0.21, 0.25, 0.29, 0.33])  # recovery until back within 0.02 of the best (0.3)
    drift = 0.33 + 0.001 * np.arange(1, 31)  # slower than 0.002 per step: idle, though it moves 0.03
    curve = np.concatenate([reach, hold, drop, regain, drift])
    assert ground_truth_segments(curve) == [
        (0, 11, "progress"),
        (11, 16, "idle"),
        (16, 19, "failure_inducing"),
        (19, 23, "recovery"),
        (23, 25, "progress"),
        (25, 55, "idle"),
    ]
    # a fall runs from its turn, the highest point before it (step 1); the steps up to there stay idle
    jittery = np.array([0.3, 0.305, 0.298, 0.302, 0.296, 0.27, 0.24])
    assert ground_truth_segments(jittery) == [(0, 2, "idle"), (2, 7, "failure_inducing")]
    # rewinds are skipped as by the segmenter
    assert ground_truth_segments(reach, [(0, 5, "autonomous"), (5, 8, "rewind"), (8, 11, "intervention")]) == [
        (0, 5, "progress"),
        (8, 11, "progress"),
    ]
