"""``vla-recover critic tune``: fit a critic's tuned segmenter on a sim fleet store's ground truth.

The store's episodes must carry the simulator's progress (``progress``), which the ground truth is cut from
(`vla_recover.critic.metrics`). A seeded share of the episodes is held out first: the forest fit on the rest is
scored on them beside the slope rule, so the tuning reports what it gained; the forest that is saved is then fit
on every episode. The held-out quarter's confusions, tuned beside the slope rule, are drawn in the critic's
directory (``tuned_segmenter_held_out.png``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.critic.data import CriticEpisode, human_steps, load_episodes
from vla_recover.critic.metrics import per_kind_f1, step_labels, true_labels
from vla_recover.critic.model import ProgressCritic
from vla_recover.critic.plots import plot_confusions
from vla_recover.critic.segmenter import CRITIC_KINDS, SegmenterConfig, segment_timeline
from vla_recover.critic.train import robot_state_size, split_episodes
from vla_recover.critic.tuned import (
    StateMotion,
    TuneConfig,
    TunedSegmenter,
    fit_tuned_segmenter,
    step_features,
)
from vla_recover.data import EpisodeStore

__all__ = ["fit_on_episodes", "state_motion", "tune_segmenter", "tuning_episodes"]

HELD_OUT_FRACTION = 0.25
TUNING_PLOT = "tuned_segmenter_held_out.png"  # the held-out quarter's confusion, tuned beside the slope rule
SLOPE_RULE = SegmenterConfig(rule="slope")


def state_motion(critic: ProgressCritic, episodes: list[CriticEpisode], config: TuneConfig) -> StateMotion | None:
    """What the segmenter reads of the critic's state input: how still the robot's entries and the objects' were
    (one part for a task vla_recover does not simulate); None without a state input."""
    key = critic.config.state_key
    if not config.state_motion or not key:
        return None
    robot_entries = robot_state_size({e.task for e in episodes}) or 0
    return StateMotion(key, int(episodes[0].inputs[key].shape[1]), robot_entries)


def fit_on_episodes(
    episodes: list[CriticEpisode], curves: dict[int, np.ndarray], config: TuneConfig, motion: StateMotion | None
) -> TunedSegmenter:
    """A segmenter fit on ``episodes``' ground truth, each read through ``curves[episode.id]`` (and ``motion``)."""
    features = [
        step_features(curves[e.id], human_steps(e.length, e.supervision), motion, _state(e, motion)) for e in episodes
    ]
    return fit_tuned_segmenter(features, [true_labels(e)[e.rows] for e in episodes], config, motion)


def _state(episode: CriticEpisode, motion: StateMotion | None) -> np.ndarray | None:
    return episode.inputs[motion.key] if motion else None


def _held_out_score(
    episodes: list[CriticEpisode], curves: dict[int, np.ndarray], rule: SegmenterConfig, tuned: TunedSegmenter | None
) -> tuple[float | None, np.ndarray]:
    """(macro-F1, confusion counts: true kind × kind cut) over the scored steps of ``episodes``."""
    truth, predicted = [], []
    for episode in episodes:
        truth.append(true_labels(episode))
        predicted.append(step_labels(episode.length, segment_timeline(episode, curves[episode.id], rule, tuned)))
    true_kinds, cut_kinds = np.concatenate(truth), np.concatenate(predicted)
    scored = true_kinds >= 0
    confusion = np.zeros((len(CRITIC_KINDS), len(CRITIC_KINDS)), dtype=np.int64)
    np.add.at(confusion, (true_kinds[scored], cut_kinds[scored]), 1)
    return per_kind_f1(true_kinds, cut_kinds)["macro"], confusion


def tuning_episodes(store_path: str | Path, critic: ProgressCritic, task: str | None = None) -> list[CriticEpisode]:
    """The episodes of ``store_path`` (of ``task``) that carry the simulator's progress; at least 4."""
    with EpisodeStore(store_path) as store:
        episodes = load_episodes(store, critic.input_keys, task)
    # a store keeps a 'progress' column for every episode; one recorded without it (a real robot) reads NaN there
    episodes = [e for e in episodes if e.true_progress is not None and e.steps and np.isfinite(e.true_progress).all()]
    if len(episodes) < 4:
        raise ValueError(
            f"{store_path}: {len(episodes)} episodes" + (f" of task {task!r}" if task else "") + " carry the "
            "simulator's 'progress'; tuning needs at least 4 (a quarter is held out to score it), from a sim fleet "
            "of the critic's task: a real robot's store has none"
        )
    return episodes


def tune_segmenter(
    store_path: str | Path,
    critic_dir: str | Path,
    config: TuneConfig | None = None,
    task: str | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Fit and save ``critic_dir``'s tuned segmenter on ``store_path``'s episodes that carry the simulator's progress;
    returns held-out macro-F1 (tuned vs slope)."""
    config = config or TuneConfig()
    stage = on_stage or (lambda _: None)
    critic = ProgressCritic.load(critic_dir)
    episodes = tuning_episodes(store_path, critic, task)
    stage("critic curves")
    curves = {e.id: critic.predict(e.inputs, e.instruction, where=f"episode {e.id}") for e in episodes}
    motion = state_motion(critic, episodes, config)
    train, held_out = split_episodes(episodes, HELD_OUT_FRACTION, config.seed)
    stage("fit on three quarters, score the rest")
    trial = fit_on_episodes(train, curves, config, motion)
    tuned_f1, tuned_confusion = _held_out_score(held_out, curves, SegmenterConfig(rule="tuned"), trial)
    slope_f1, slope_confusion = _held_out_score(held_out, curves, SLOPE_RULE, None)
    scores = {"tuned": tuned_f1, "slope_rule": slope_f1}
    stage("fit on every episode")
    tuned = fit_on_episodes(episodes, curves, config, motion)
    tuned.meta.update({"store": str(store_path), "task": task, "episodes": len(episodes), "held_out_macro_f1": scores})
    tuned.save(critic_dir)
    metrics = {"episodes": len(episodes), "held_out_episodes": len(held_out), "held_out_macro_f1": scores,
               "steps": tuned.meta["steps"], "nodes": tuned.meta["nodes"],
               "state_motion": tuned.meta["state_motion"]}  # fmt: skip
    (Path(critic_dir) / "tuned_segmenter_metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_confusions(
        {
            f"tuned segmenter (macro-F1 {tuned_f1})": tuned_confusion,
            f"slope rule (macro-F1 {slope_f1})": slope_confusion,
        },
        Path(critic_dir) / TUNING_PLOT,
    )
    return metrics
