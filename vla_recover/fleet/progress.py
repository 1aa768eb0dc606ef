"""How far along each robot is: ground-truth progress in sim, or a trained critic's rating of what it saw.

The floor operator watches these curves for failures and stalls, and an in-distribution rewind goes back to the
last state on the current branch where the curve was at its best. In sim, ground truth is there from the start; a
critic (``FleetConfig.critic``) works on real robots too, and is what the loop trains each round.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from vla_recover.fleet.slot import Slot

__all__ = ["CriticRater", "GateRater"]


class CriticRater:
    """A critic (any registered kind) rating each recorded step's observation, every robot's new steps in one
    forward."""

    def __init__(
        self,
        directory: str | Path,
        recorded_keys: Sequence[str],
        done_threshold: float | None = None,
        device: str = "cpu",
    ) -> None:
        """``device``: a device name (`vla_recover.devices`), resolved here."""
        from vla_recover.critic.kinds import load_critic
        from vla_recover.devices import resolve_device

        self.directory, self.done_threshold = Path(directory), done_threshold
        self.critic = load_critic(self.directory, resolve_device(device, "device"))
        if done_threshold is not None and not self.critic.has_done_head:
            raise ValueError(
                f"critic_done_threshold: the critic at {self.directory} has no done head (train it with done_head)"
            )
        missing = [key for key in self.critic.input_keys if key not in recorded_keys]
        if missing:
            raise ValueError(
                f"critic: {self.directory} reads {missing[0]}, but the fleet records only {', '.join(recorded_keys)}"
            )

    def rate(self, rows: list[dict[str, Any]], instructions: list[str]) -> np.ndarray:
        """Progress in [0, 1] for each recorded row (the observation the step was taken in)."""
        return self._rate(rows, instructions)[0]

    def _rate(self, rows: list[dict[str, Any]], instructions: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """Progress for each row and, with a done threshold, P(done), from one forward."""
        if not rows:
            return np.zeros(0, dtype=np.float32), None
        steps = {key: np.stack([row[key] for row in rows]) for key in self.critic.input_keys}
        if self.done_threshold is None:
            return self.critic.predict(steps, instructions, where="fleet"), None
        return self.critic.predict_with_done(steps, instructions, where="fleet")

    def rate_new_steps(self, slots: Iterable[Slot]) -> None:
        """Rate every step the slots recorded on their branches since the last call, all robots in one forward."""
        rows, owners = [], []
        for slot in slots:
            if slot.attempt is not None:
                for index in slot.branch_rows[len(slot.branch_critic) :]:
                    rows.append(slot.attempt.rows[index])
                    owners.append(slot)
        ratings, done = self._rate(rows, [slot.attempt.instruction for slot in owners])  # type: ignore[union-attr]
        for slot, rating in zip(owners, ratings, strict=True):
            slot.branch_critic.append(float(rating))
        if done is None:
            return
        for slot, p_done in zip(owners, done, strict=True):  # the robots with no success detector of their own (arms)
            if not slot.worker.simulated:
                slot.critic_done = max(slot.critic_done, float(p_done))


class GateRater:
    """A recovery gate judging each recorded step's observation (and its change since the branch's previous step),
    every robot's new steps in one forward; it keeps each slot's verdict on its branch (``slot.gate_raised``)."""

    def __init__(self, directory: str | Path, recorded_keys: Sequence[str]) -> None:
        from vla_recover.recovery.gate import RecoveryGate

        self.directory = Path(directory)
        self.gate = RecoveryGate.load(self.directory)
        if self.gate.config.state_key not in recorded_keys:
            raise ValueError(
                f"gate: {self.directory} reads {self.gate.config.state_key}, but the fleet records only "
                f"{', '.join(recorded_keys)}"
            )

    def rate_new_steps(self, slots: Iterable[Slot]) -> None:
        key = self.gate.config.state_key
        states, previous, owners = [], [], []
        for slot in slots:
            if slot.attempt is None:
                continue
            rows = slot.attempt.rows
            for step in range(len(slot.branch_gate), len(slot.branch_rows)):
                states.append(rows[slot.branch_rows[step]][key])
                previous.append(rows[slot.branch_rows[max(step - 1, 0)]][key])
                owners.append(slot)
        if not owners:
            return
        for slot, p in zip(owners, self.gate.probability(np.stack(states), np.stack(previous)), strict=True):
            slot.branch_gate.append(float(p))
        for slot in {id(slot): slot for slot in owners}.values():
            slot.gate_raised = self.gate.raised(slot.branch_gate)
