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
from vla_recover.critic.train import split_episodes
from vla_recover.critic.tuned import TuneConfig, TunedSegmenter, curve_features, fit_tuned_segmenter
from vla_recover.data import EpisodeStore

__all__ = ["tune_segmenter"]

HELD_OUT_FRACTION = 0.25
TUNING_PLOT = "tuned_segmenter_held_out.png"  # the held-out quarter's confusion, tuned beside the slope rule
SLOPE_RULE = SegmenterConfig(rule="slope")


def _fit(episodes: list[CriticEpisode], curves: dict[int, np.ndarray], config: TuneConfig) -> TunedSegmenter:
    features = [curve_features(curves[e.id], human_steps(e.length, e.supervision)) for e in episodes]
    return fit_tuned_segmenter(features, [true_labels(e)[e.rows] for e in episodes], config)


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
    stage("critic curves")
    curves = {e.id: critic.predict(e.inputs, e.instruction, where=f"episode {e.id}") for e in episodes}
    train, held_out = split_episodes(episodes, HELD_OUT_FRACTION, config.seed)
    stage("fit on three quarters, score the rest")
    trial = _fit(train, curves, config)
    tuned_f1, tuned_confusion = _held_out_score(held_out, curves, SegmenterConfig(rule="tuned"), trial)
    slope_f1, slope_confusion = _held_out_score(held_out, curves, SLOPE_RULE, None)
    scores = {"tuned": tuned_f1, "slope_rule": slope_f1}
    stage("fit on every episode")
    tuned = _fit(episodes, curves, config)
    tuned.meta.update({"store": str(store_path), "task": task, "episodes": len(episodes), "held_out_macro_f1": scores})
    tuned.save(critic_dir)
    metrics = {"episodes": len(episodes), "held_out_episodes": len(held_out), "held_out_macro_f1": scores,
               "steps": tuned.meta["steps"], "nodes": tuned.meta["nodes"]}  # fmt: skip
    (Path(critic_dir) / "tuned_segmenter_metrics.json").write_text(json.dumps(metrics, indent=2))
    plot_confusions(
        {
            f"tuned segmenter (macro-F1 {tuned_f1})": tuned_confusion,
            f"slope rule (macro-F1 {slope_f1})": slope_confusion,
        },
        Path(critic_dir) / TUNING_PLOT,
    )
    return metrics
