"""The tuned segmenter: its exported forest, what it learns from ground truth, its checkpoint and its command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from sklearn.ensemble import RandomForestClassifier
from typer.testing import CliRunner

from vla_recover.cli.main import app
from vla_recover.config import validate_config
from vla_recover.critic.metrics import ground_truth_segments, per_kind_f1, step_labels
from vla_recover.critic.model import ProgressCritic
from vla_recover.critic.segmenter import SegmenterConfig, segment_episode
from vla_recover.critic.train import CriticTrainConfig, train_critic
from vla_recover.critic.tuned import (
    TUNED_FILES,
    TUNED_SCHEMA,
    StateMotion,
    TuneConfig,
    TunedSegmenter,
    curve_features,
    fit_tuned_segmenter,
    step_features,
)
from vla_recover.data import EpisodeStore
from vla_recover.rollout import expert_episodes

SMALL = TuneConfig(trees=20, min_leaf_steps=5)


def synthetic_episode(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int, str]]]:
    """(true progress, a critic-like reading of it, supervision): rises, stalls and drops, read through noise, a
    slow drift and a scale the truth does not have."""
    pieces, level = [], 0.0
    while sum(len(p) for p in pieces) < 160:
        steps = int(rng.integers(8, 30))
        change = rng.choice([0.15, 0.0, -0.1], p=[0.5, 0.3, 0.2])
        pieces.append(level + np.linspace(0, change, steps))
        level = float(np.clip(level + change, 0.0, 1.0))
    truth = np.clip(np.concatenate(pieces)[:160], 0.0, 1.0)
    drift = np.cumsum(rng.normal(0, 0.002, truth.size))
    reading = 0.4 * truth + drift + rng.normal(0, 0.01, truth.size)
    takeover = int(rng.integers(40, 120))
    supervision = [
        (0, takeover, "autonomous"),
        (takeover, takeover + 30, "intervention"),
        (takeover + 30, 160, "autonomous"),
    ]
    return truth, reading, supervision


def test_the_exported_forest_predicts_as_scikit_learn_does() -> None:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(600, 5)).astype(np.float32)
    labels = (features[:, 0] > 0).astype(int) + 2 * (features[:, 1] * features[:, 2] > 0.3)
    tuned = fit_tuned_segmenter([features], [labels], SMALL)
    reference = RandomForestClassifier(20, min_samples_leaf=5, class_weight="balanced", random_state=0, n_jobs=1)
    reference.fit(features, labels)
    probe = rng.normal(size=(300, 5)).astype(np.float32)
    np.testing.assert_allclose(tuned.probabilities(probe), reference.predict_proba(probe), atol=1e-6)
    unscored = np.full(600, -1)
    with pytest.raises(ValueError, match="no scored step"):
        fit_tuned_segmenter([features], [unscored], SMALL)


def test_a_tuned_segmenter_cuts_a_noisy_reading_closer_to_the_truth_than_the_slope_rule() -> None:
    rng = np.random.default_rng(1)
    episodes = [synthetic_episode(rng) for _ in range(40)]
    truths = [step_labels(t.size, ground_truth_segments(t, s)) for t, _, s in episodes]
    features = [curve_features(r, np.isin(np.arange(r.size), range(s[1][0], s[1][1]))) for _, r, s in episodes]
    tuned = fit_tuned_segmenter(features[:30], truths[:30], SMALL)

    def macro(config: SegmenterConfig, segmenter: TunedSegmenter | None) -> float:
        cut = [step_labels(r.size, segment_episode(r, config, s, segmenter)) for _, r, s in episodes[30:]]
        return per_kind_f1(np.concatenate(truths[30:]), np.concatenate(cut))["macro"]  # type: ignore[return-value]

    tuned_f1, slope_f1 = macro(SegmenterConfig(), tuned), macro(SegmenterConfig(rule="slope"), None)
    assert tuned_f1 > slope_f1 + 0.1, (tuned_f1, slope_f1)
    assert macro(SegmenterConfig(rule="slope"), tuned) == slope_f1  # a rule named outright is kept
    with pytest.raises(ValueError, match="no tuned segmenter; make one with vla-recover critic tune"):
        segment_episode(episodes[0][1], SegmenterConfig(rule="tuned"))


def test_critic_tune_fits_saves_and_label_uses_it_until_the_critic_is_retrained(tmp_path: Path) -> None:
    store = tmp_path / "lift"
    with EpisodeStore(store, mode="a") as opened:
        opened.append_episodes([r.to_episode_data() for r in expert_episodes("LiftCube", list(range(8)))])
    critic = tmp_path / "critic"
    tiny = {"steps": 60, "batch_size": 32, "critic": {"hidden": 32, "layers": 1}, "held_out_fraction": 0.0}
    train_critic(store, critic, validate_config(CriticTrainConfig, tiny))
    runner = CliRunner()
    rule = tmp_path / "tuned.yaml"
    rule.write_text("segmenter:\n  rule: tuned\n")
    result = runner.invoke(app, ["label", "--store", str(store), "--critic", str(critic), "--config", str(rule)])
    assert result.exit_code == 2 and "no tuned segmenter; make one with vla-recover critic tune" in result.output
    with EpisodeStore(store) as opened:
        assert not opened.segments(source="critic")  # nothing written
    result = runner.invoke(app, ["critic", "tune", "--store", str(store), "--critic", str(critic), "--trees", "10"])
    assert result.exit_code == 0, result.output
    metrics = json.loads(result.output.strip().splitlines()[-1])
    assert metrics["episodes"] == 8 and metrics["held_out_episodes"] == 2
    assert set(metrics["held_out_macro_f1"]) == {"tuned", "slope_rule"}
    assert (critic / "tuned_segmenter_held_out.png").stat().st_size > 10_000  # the held-out confusions
    loaded = ProgressCritic.load(critic)
    assert loaded.tuned is not None and loaded.tuned.meta["episodes"] == 8
    # it reads how still the robot's nine entries and the cube's were
    assert metrics["state_motion"] == {"key": "obs.state", "width": 19, "robot_entries": 9}
    assert loaded.tuned.motion == StateMotion.from_meta(metrics["state_motion"])
    args = ["critic", "tune", "--store", str(store), "--critic", str(critic), "--trees", "10", "--no-state-motion"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and json.loads(result.output.strip().splitlines()[-1])["state_motion"] is None
    assert ProgressCritic.load(critic).tuned.motion is None  # type: ignore[union-attr]
    result = runner.invoke(app, args[:-1])  # and back: the default reads the stillness
    assert result.exit_code == 0, result.output

    result = runner.invoke(app, ["label", "--store", str(store), "--critic", str(critic)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output.strip().splitlines()[-1])["segmenter"] == "tuned"
    with EpisodeStore(store) as opened:
        assert {e.payload["segmenter"] for e in opened.events(kind="labels_written")} == {"tuned"}

    loaded.save(critic)  # a critic saved over the directory drops the segmenter tuned on the old one
    assert not any((critic / name).exists() for name in TUNED_FILES)
    assert ProgressCritic.load(critic).tuned is None


def test_tune_refuses_a_store_without_simulator_progress_and_a_broken_segmenter(tmp_path: Path) -> None:
    store = tmp_path / "real"
    with EpisodeStore(store, mode="a") as opened:
        episodes = [r.to_episode_data() for r in expert_episodes("LiftCube", list(range(4)))]
        for episode in episodes:
            del episode.steps["progress"]
        opened.append_episodes(episodes)
    critic = tmp_path / "critic"
    train_critic(store, critic, validate_config(CriticTrainConfig, {"steps": 5, "held_out_fraction": 0.0}))
    runner = CliRunner()
    result = runner.invoke(app, ["critic", "tune", "--store", str(store), "--critic", str(critic)])
    assert result.exit_code == 2 and "0 episodes carry the simulator's 'progress'" in result.output, result.output
    (critic / TUNED_FILES[0]).write_text(json.dumps({"kind": "tuned_segmenter", "schema_version": 1}))
    with pytest.raises(ValueError, match="schema 1; this vla_recover reads tuned_segmenter schema 2; tune the"):
        ProgressCritic.load(critic)  # one fit before the stillness was read
    (critic / TUNED_FILES[0]).write_text(json.dumps({"kind": "tuned_segmenter", "schema_version": TUNED_SCHEMA}))
    with pytest.raises(FileNotFoundError, match=r"tuned_segmenter\.safetensors: missing"):
        ProgressCritic.load(critic)
    shutil.copy(critic / "config.json", critic / TUNED_FILES[0])
    with pytest.raises(ValueError, match="kind 'progress_critic'"):
        ProgressCritic.load(critic)


def test_a_forest_whose_walk_would_not_end_is_refused_on_load(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    features = [curve_features(rng.random(50), np.zeros(50, bool)) for _ in range(4)]
    tuned = fit_tuned_segmenter(features, [rng.integers(0, 4, 50) for _ in range(4)], TuneConfig(trees=2))
    tuned.save(tmp_path)
    assert TunedSegmenter.load(tmp_path) is not None
    looping = {**tuned.arrays, "left": tuned.arrays["left"].copy()}
    inner = int(np.flatnonzero(looping["left"] >= 0)[0])
    looping["left"][inner] = inner  # a node that is its own child
    TunedSegmenter(looping, tuned.meta).save(tmp_path)
    with pytest.raises(ValueError, match="children or feature are out of range; tune the segmenter again"):
        TunedSegmenter.load(tmp_path)
    tuned.save(tmp_path)
    meta = json.loads((tmp_path / TUNED_FILES[0]).read_text())
    (tmp_path / TUNED_FILES[0]).write_text(json.dumps({**meta, "state_motion": {"key": "obs.state"}}))
    with pytest.raises(ValueError, match=r"state_motion \{'key': 'obs.state'\} is not a key, width and robot_entries"):
        TunedSegmenter.load(tmp_path)


def test_state_motion_is_the_largest_change_of_the_robot_and_of_the_objects_near_each_step() -> None:
    motion = StateMotion("obs.state", 5, robot_entries=2)
    state = np.zeros((100, 5))
    state[:, 0] = 0.01 * np.arange(100)  # the robot moves 1 cm a step; the objects stay
    state[60:, 3] = 0.5  # an object jumps at step 60
    features = motion.features(state)
    assert features.shape == (100, motion.feature_count) == (100, 6)
    np.testing.assert_allclose(features[20], [0.01, 0.06, 0.24, 0.0, 0.0, 0.0])  # robot at spans 1, 6, 24; objects
    np.testing.assert_allclose(features[59, 3:], [0.5, 0.5, 0.5])  # the jump is one step after
    np.testing.assert_allclose(features[40, 3:], [0.0, 0.0, 0.5])  # within 24 steps, not 6
    np.testing.assert_allclose(features[0, :3], [0.01, 0.06, 0.24])  # nothing before the first step: the ends repeat
    assert StateMotion("obs.state", 5).feature_count == 3  # the split unknown: the state as one part
    with pytest.raises(ValueError, match=r"obs.state: expected \(steps, 5\)"):
        motion.features(state[:, :4])


def test_the_state_motion_tells_a_pause_from_a_move_a_flat_curve_hides(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    motion = StateMotion("obs.state", 3)

    def episode() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        moving = np.repeat(rng.random(8) < 0.5, 20)  # eight stretches of 20 steps: the arm moves or pauses
        state = np.cumsum(np.where(moving[:, None], 0.01, 0.0) * rng.normal(1, 0.1, (160, 3)), axis=0)
        curve = rng.normal(0.5, 0.05, 160)  # a critic that says nothing
        return curve, state, np.where(moving, 0, 1)  # progress while moving, idle while paused

    episodes = [episode() for _ in range(30)]
    human = np.zeros(160, dtype=bool)

    def fit(with_motion: StateMotion | None) -> float:
        features = [step_features(c, human, with_motion, s) for c, s, _ in episodes[:20]]
        tuned = fit_tuned_segmenter(features, [y for _, _, y in episodes[:20]], SMALL, with_motion)
        tuned.save(tmp_path)
        tuned = TunedSegmenter.load(tmp_path)
        assert tuned is not None and tuned.motion == with_motion
        cut = [step_labels(160, segment_episode(c, None, (), tuned, s)) for c, s, _ in episodes[20:]]
        return per_kind_f1(np.concatenate([y for _, _, y in episodes[20:]]), np.concatenate(cut))["macro"]  # type: ignore[return-value]

    assert fit(motion) > 0.95
    assert fit(None) < 0.7
    tuned = TunedSegmenter.load(tmp_path)
    assert tuned is not None
    tuned.meta["state_motion"], tuned.motion = motion.to_meta(), motion
    with pytest.raises(ValueError, match=r"reads how still 'obs\.state' was: pass the episode's obs\.state"):
        segment_episode(episodes[0][0], None, (), tuned)
