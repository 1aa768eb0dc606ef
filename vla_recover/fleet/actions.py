"""Checks on actions before they reach a robot: device commands must lie in [-1, 1]; a policy's chunk may overshoot
a little (generative policies do, and the simulator clips as well) and is clipped, but is rejected beyond that.

``ActionGate`` applies them for the fleet: a rejected action becomes an ``action_rejected`` event and the robot
holds (arm still, gripper as last commanded) instead of moving on a broken command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from vla_recover.envs.base import checked_action
from vla_recover.fleet.accounting import EffortLedger

if TYPE_CHECKING:
    from vla_recover.fleet.slot import Slot

__all__ = ["ActionGate", "check_range", "clipped_chunk"]


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


class ActionGate:
    """What the fleet lets through to a robot, with the rejections and clips counted in the ledger."""

    def __init__(
        self,
        action_dim: int,
        policy_tolerance: float,
        ledger: EffortLedger,
        event: Callable[[str, str, dict[str, Any], str | None], None],
    ) -> None:
        self.action_dim, self.policy_tolerance = action_dim, policy_tolerance
        self.ledger, self.event = ledger, event

    def hold(self, slot: Slot) -> np.ndarray:
        """Arm still, gripper as last commanded."""
        hold = np.zeros(self.action_dim)
        hold[-1] = slot.grip
        return hold

    def checked(self, action: Any) -> np.ndarray:
        """The action as a float array; ValueError for a wrong shape, NaN/Inf or a value outside [-1, 1]."""
        action = checked_action(action, self.action_dim)  # the tasks' own type, shape and NaN/Inf check
        check_range(action)
        return action

    def command(self, slot: Slot, action: Any, source: str) -> np.ndarray:
        """A device command, or the hold when it is malformed, NaN or out of range."""
        try:
            return self.checked(action)
        except ValueError as problem:
            self.reject(slot, source, problem)
            return self.hold(slot)

    def chunk(self, slot: Slot, actions: np.ndarray) -> np.ndarray:
        """A policy's new actions, checked together: a broken chunk is rejected whole (no actions: the robot holds);
        a slight overshoot is clipped and counted."""
        try:
            chunk, outside = clipped_chunk(actions, self.action_dim, self.policy_tolerance)
        except ValueError as problem:
            self.reject(slot, "policy", problem)
            return np.zeros((0, self.action_dim))
        self.ledger.clipped_actions += outside
        return chunk

    def reject(self, slot: Slot, source: str, problem: ValueError) -> None:
        """Count and log a refused action; the robot's queued plan goes with it."""
        self.ledger.rejected_actions += 1
        self.event("action_rejected", source, {"reason": str(problem)}, slot.robot)
        slot.plan.clear()
