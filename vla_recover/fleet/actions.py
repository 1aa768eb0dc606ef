"""Checks on actions before they reach a robot: device commands must lie in [-1, 1]; a policy's chunk passes
`vla_recover.execution.filtered_chunk`, the filter evaluation applies too (clipped a little outside, rejected beyond).

``ActionGate`` applies them for the fleet's sim robots: a rejected action becomes an ``action_rejected`` event and
the robot holds (arm still, gripper as last commanded) instead of moving on a broken command. A hardware robot's
commands are checked once, by its safety filter (`vla_recover.hardware.safety`), whose limits are the arm's: the gate
hands them on as sent (only a command that is not a vector of the action's size is refused here), and the filter's
clips and rejections are counted in the same ledger. Remote commands (`OperatorAPI.command`) are still checked on
arrival, as any network input is, so that the sender hears why one is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from vla_recover.envs.base import checked_action
from vla_recover.execution import check_range, filtered_chunk, hold_action
from vla_recover.fleet.accounting import EffortLedger

if TYPE_CHECKING:
    from vla_recover.fleet.slot import Slot

__all__ = ["ActionGate"]


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
        return hold_action(self.action_dim, slot.grip)

    def checked(self, action: Any) -> np.ndarray:
        """The action as a float array; ValueError for a wrong shape, NaN/Inf or a value outside [-1, 1]."""
        action = checked_action(action, self.action_dim)  # the tasks' own type, shape and NaN/Inf check
        check_range(action)
        return action

    def command(self, slot: Slot, action: Any, source: str) -> np.ndarray | None:
        """A device command, or None (the robot holds) when it is malformed, NaN or out of range (for a robot behind
        its safety filter: only when it is not a vector of the action's size)."""
        try:
            return self._as_sent(action) if slot.worker.safety_filtered else self.checked(action)
        except ValueError as problem:
            self.reject(slot, source, problem)
            return None

    def chunk(self, slot: Slot, actions: np.ndarray) -> np.ndarray:
        """A policy's new actions, checked together: a broken chunk is rejected whole (no actions: the robot holds);
        a slight overshoot is clipped and counted. A robot behind its safety filter gets the chunk as predicted."""
        if slot.worker.safety_filtered:
            return np.asarray(actions, dtype=np.float64).reshape(-1, self.action_dim)
        try:
            chunk, outside = filtered_chunk(actions, self.action_dim, self.policy_tolerance)
        except ValueError as problem:
            self.reject(slot, "policy", problem)
            return np.zeros((0, self.action_dim))
        self.ledger.clipped_actions += outside
        return chunk

    def _as_sent(self, action: Any) -> np.ndarray:
        """A float vector of the action's size, values unchecked (the safety filter judges them)."""
        try:
            vector = np.asarray(action, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"action: expected {self.action_dim} numbers, got {action!r}") from None
        if vector.shape != (self.action_dim,):
            raise ValueError(f"action: expected {self.action_dim} numbers, got {vector.size}")
        return vector

    def reject(self, slot: Slot, source: str, problem: ValueError) -> None:
        """Count and log a refused action; the robot's queued plan goes with it."""
        self.ledger.rejected_actions += 1
        self.event("action_rejected", source, {"reason": str(problem)}, slot.robot)
        slot.plan.clear()
