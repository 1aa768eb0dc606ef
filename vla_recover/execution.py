"""How a policy's action chunks become robot actions: one rule for evaluation and for the fleet.

A chunk is planned from the observation at the step where it starts executing, and its first ``action_exec``
actions run before the next one is planned. Its sampling noise comes from the episode's seed and that step
(`chunk_seed`), so an episode's outcome does not depend on the batch, process or fleet slot that ran it. Every
chunk passes one filter (`filtered_chunk`): actions a little outside [-1, 1] are clipped into it (what the simulator
would do with them anyway), a chunk with an action further out, or with NaN or Inf, is rejected whole, and the
robot holds for one step (`hold_action`) before a new chunk is planned from the observation after the hold.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_ACTION_TOLERANCE", "INITIAL_GRIP", "check_range", "chunk_seed", "filtered_chunk", "hold_action"]

DEFAULT_ACTION_TOLERANCE = 1.0  # policy actions up to this far outside [-1, 1] are clipped, further out rejected
INITIAL_GRIP = -1.0  # the gripper command a hold keeps before anything was commanded: open, as after a reset


def chunk_seed(episode_seed: int, step: int) -> int:
    """The sampling seed of the chunk planned at ``step`` of the episode reset with ``episode_seed``."""
    return int(episode_seed) * 7919 + int(step)


def check_range(actions: np.ndarray, limit: float = 1.0) -> None:
    """Raise, naming the worst action, when any value lies outside [-limit, limit]."""
    if np.abs(actions).max() > limit + 1e-6:
        rows = actions.reshape(-1, actions.shape[-1])
        worst = rows[np.abs(rows).max(axis=1).argmax()]
        raise ValueError(f"action: out of range [-{limit:g}, {limit:g}]: {np.round(worst, 3).tolist()}")


def filtered_chunk(actions: np.ndarray, action_dim: int, tolerance: float) -> tuple[np.ndarray, int]:
    """(the chunk's actions (T, A) clipped into [-1, 1], how many of them were outside); ValueError for a chunk
    to reject (wrong shape, NaN or Inf, or an action more than ``tolerance`` outside)."""
    actions = np.asarray(actions, dtype=np.float64)
    if actions.ndim != 2 or actions.shape[1] != action_dim:
        raise ValueError(f"action: expected shape (steps, {action_dim}), got {actions.shape}")
    finite = np.isfinite(actions).all(axis=1)
    if not finite.all():
        raise ValueError(f"action: contains NaN or Inf: {actions[~finite][0].tolist()}")
    check_range(actions, 1.0 + tolerance)
    outside = int((np.abs(actions).max(axis=1) > 1.0).sum())
    return np.clip(actions, -1.0, 1.0), outside


def hold_action(action_dim: int, grip: float) -> np.ndarray:
    """Arm still, gripper as last commanded (every task's action ends with its gripper command)."""
    hold = np.zeros(action_dim)
    hold[-1] = grip
    return hold
