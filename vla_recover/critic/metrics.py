"""Scoring a segmentation against ground truth, per step, and the length-only baseline it must beat.

Ground-truth segments come from the simulator's true progress (phase progress, which falls when an injected
failure or a fumble undoes work and rises again while a human recovers) through a dead band: the progress has
moved only once it is ``TRUTH_MOVE`` away from where it last moved (2% of the task). The move's steps, from its
last turn (the lowest point before a rise, the highest before a fall), are rising or falling if it came at
``TRUTH_RATE`` per step or faster, else idle (a slow drift). Rising steps are ``recovery`` while below the best
reached earlier minus ``TRUTH_REGAIN_MARGIN``, else ``progress``; falling steps are ``failure_inducing``; steps
that never move are ``idle``. The dead band keeps a hovering arm's millimetre jitter in the continuous reach term
from reading as a string of one-step progress and failure segments. Rewinds are not scored.

The length-only baseline knows nothing but an episode's length and each step's position in it: per length bin
and tenth of the episode, the kind most common in its training episodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from vla_recover.critic.data import CriticEpisode, length_bin_edges
from vla_recover.critic.segmenter import CRITIC_KINDS, cut_episode, dead_band_kinds

__all__ = ["LengthBaseline", "ground_truth_segments", "per_kind_f1", "step_labels", "true_labels"]

TRUTH_MOVE = 0.02
TRUTH_RATE = 0.002
TRUTH_REGAIN_MARGIN = 0.02
_UNSCORED = -1


def ground_truth_segments(
    progress: np.ndarray, supervision: Sequence[tuple[int, int, str]] = ()
) -> list[tuple[int, int, str]]:
    """The true segments of one episode from the simulator's per-row progress (the rules in the module docstring)."""
    rule = partial(
        dead_band_kinds, move=TRUTH_MOVE, rise_per_step=TRUTH_RATE, fall_per_step=TRUTH_RATE,
        regain_margin=TRUTH_REGAIN_MARGIN,
    )  # fmt: skip
    return cut_episode(progress, rule, 1, supervision)


def true_labels(episode: CriticEpisode) -> np.ndarray:
    """The ground-truth kind index of every row of a sim episode (-1 on rewinds)."""
    if episode.true_progress is None:
        raise ValueError(f"episode {episode.id}: no simulator progress to cut ground truth from")
    return step_labels(
        episode.length, ground_truth_segments(episode.on_rows(episode.true_progress), episode.supervision)
    )


def step_labels(length: int, segments: Sequence[tuple[int, int, str]]) -> np.ndarray:
    """The kind index (into CRITIC_KINDS) of every step; -1 where no critic segment covers it."""
    labels = np.full(length, _UNSCORED, dtype=np.int8)
    for start, stop, kind in segments:
        if kind in CRITIC_KINDS:
            labels[start:stop] = CRITIC_KINDS.index(kind)
    return labels


def per_kind_f1(truth: np.ndarray, predicted: np.ndarray) -> dict[str, float | None]:
    """F1 of each kind over the scored steps (None for a kind absent from both), plus ``macro`` over the kinds
    present in the ground truth and ``accuracy``."""
    scored = truth != _UNSCORED
    truth, predicted = truth[scored], predicted[scored]
    result: dict[str, float | None] = {}
    present = []
    for index, kind in enumerate(CRITIC_KINDS):
        tp = int(np.sum((truth == index) & (predicted == index)))
        fp = int(np.sum((truth != index) & (predicted == index)))
        fn = int(np.sum((truth == index) & (predicted != index)))
        if tp + fp + fn == 0:
            result[kind] = None
            continue
        result[kind] = round(2 * tp / (2 * tp + fp + fn), 4)
        if np.any(truth == index):
            present.append(result[kind])
    result["macro"] = round(float(np.mean(present)), 4) if present else None  # type: ignore[arg-type]
    result["accuracy"] = round(float(np.mean(truth == predicted)), 4) if truth.size else None
    return result


class LengthBaseline:
    """Predicts each step's kind from the episode's length bin and the step's tenth of the episode only."""

    POSITIONS = 10

    def __init__(self, edges: np.ndarray, table: np.ndarray) -> None:
        self.edges, self.table = edges, table

    @classmethod
    def fit(cls, lengths: Sequence[int], labels: Sequence[np.ndarray], bins: int = 4) -> LengthBaseline:
        lengths_array = np.asarray(lengths)
        baseline = cls(length_bin_edges(lengths_array, bins), np.empty(0, dtype=np.int8))
        counts = np.zeros((baseline.edges.size + 1, cls.POSITIONS, len(CRITIC_KINDS)))
        for length, label in zip(lengths_array, labels, strict=True):
            b = baseline.bin_of(int(length))
            positions = cls._positions(int(length))
            for position, kind in zip(positions, label, strict=True):
                if kind != _UNSCORED:
                    counts[b, position, kind] += 1
        fallback = counts.sum(axis=(0, 1)).argmax()
        baseline.table = np.where(counts.sum(-1) > 0, counts.argmax(-1), fallback).astype(np.int8)
        return baseline

    @classmethod
    def _positions(cls, length: int) -> np.ndarray:
        return np.minimum((np.arange(length) * cls.POSITIONS) // max(length, 1), cls.POSITIONS - 1)

    def bin_of(self, length: int) -> int:
        return int(np.searchsorted(self.edges, length, side="right"))

    def predict(self, length: int) -> np.ndarray:
        return self.table[self.bin_of(length), self._positions(length)]
