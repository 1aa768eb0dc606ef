"""Progress curves and the signals read from them: one smoother, falls, stalls and the best-so-far.

The fleet's floor operator reads these live, so its smoothing is causal (the value at step t uses only what was seen
by t); the segmentation critic reads whole recorded episodes and smooths centred. Both go through ``smoothed``.
Nothing here imports the rest of the project, so the fleet, the teleoperators and the critic can all share it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["best_before", "fell", "is_failing", "last_in_distribution", "progress_lost", "smoothed", "stalled"]


def smoothed(curve: Sequence[float] | np.ndarray, steps: int, causal: bool = True) -> np.ndarray:
    """Moving mean over ``steps``.

    Causal: the trailing mean (fewer values at the start), for a live signal. Centred: the window around each step,
    the ends repeating the first and last values, for a curve recorded whole.
    """
    values = np.asarray(curve, dtype=np.float64)
    if values.size <= 1 or steps <= 1:
        return values.copy()
    if not causal:
        before, after = (steps - 1) // 2, steps // 2
        padded = np.concatenate([np.full(before, values[0]), values, np.full(after, values[-1])])
        return np.convolve(padded, np.ones(steps) / steps, mode="valid")
    sums = np.cumsum(np.concatenate([[0.0], values]))
    starts = np.maximum(np.arange(1, values.size + 1) - steps, 0)
    return (sums[1:] - sums[starts]) / (np.arange(1, values.size + 1) - starts)


def best_before(curve: np.ndarray) -> np.ndarray:
    """The best value the curve reached before each step (-inf at the first): what a recovery regains."""
    return np.maximum.accumulate(np.concatenate([[-np.inf], curve[:-1]]))


def fell(curve: Sequence[float], drop: float, smooth_steps: int) -> bool:
    """The causally smoothed curve is now more than ``drop`` below the best it reached."""
    values = smoothed(curve, smooth_steps)
    return bool(values.size) and bool(values[-1] < values.max() - drop)


def stalled(curve: Sequence[float], steps: int, gain: float, smooth_steps: int) -> bool:
    """The causally smoothed curve gained less than ``gain`` over its last ``steps`` steps."""
    values = smoothed(curve, smooth_steps)
    return len(values) > steps and bool(values[-steps:].max() < values[-steps - 1] + gain)


def progress_lost(curve: Sequence[float]) -> float:
    """How far the curve is below its best: the risk a robot is in (0 for an empty curve)."""
    return float(max(curve) - curve[-1]) if len(curve) else 0.0


def last_in_distribution(curve: Sequence[float], tolerance: float = 1e-6, smooth_steps: int = 1) -> int:
    """The index of the latest value within ``tolerance`` of the best so far (``0`` for an empty curve)."""
    values = smoothed(curve, smooth_steps)
    if values.size == 0:
        return 0
    at_best = np.flatnonzero(values >= np.maximum.accumulate(values) - tolerance)
    return int(at_best[-1])


def is_failing(info: dict[str, Any], progress: list[float], drop: float) -> bool:
    """The ground truth after the latest step: an injected failure fired, or progress fell ``drop`` below its best."""
    return bool(info.get("failure")) or (bool(progress) and progress[-1] < max(progress) - drop)
