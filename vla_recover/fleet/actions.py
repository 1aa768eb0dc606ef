"""Checks on actions before they reach a robot: device commands must lie in [-1, 1]; a policy's chunk may overshoot
a little (generative policies do, and the simulator clips as well) and is clipped, but is rejected beyond that."""

from __future__ import annotations

import numpy as np

__all__ = ["check_range", "clipped_chunk"]


def check_range(actions: np.ndarray, limit: float = 1.0) -> None:
    """Raise, naming the worst action, when any value lies outside [-limit, limit]."""
    if np.abs(actions).max() > limit + 1e-6:
        rows = actions.reshape(-1, actions.shape[-1])
        worst = rows[np.abs(rows).max(axis=1).argmax()]
        raise ValueError(f"action: out of range [-{limit:g}, {limit:g}]: {np.round(worst, 3).tolist()}")


def clipped_chunk(actions: np.ndarray, action_dim: int, tolerance: float) -> tuple[np.ndarray, int]:
    """(the chunk clipped into [-1, 1], how many of its actions were outside); ValueError for a broken chunk."""
    actions = np.asarray(actions, dtype=np.float64)
    if actions.ndim != 2 or actions.shape[1] != action_dim:
        raise ValueError(f"action: expected shape (steps, {action_dim}), got {actions.shape}")
    finite = np.isfinite(actions).all(axis=1)
    if not finite.all():
        raise ValueError(f"action: contains NaN or Inf: {actions[~finite][0].tolist()}")
    check_range(actions, 1.0 + tolerance)
    outside = int((np.abs(actions).max(axis=1) > 1.0).sum())
    return np.clip(actions, -1.0, 1.0), outside
