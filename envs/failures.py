"""Failure injection: scheduled at reset, fired by phase or step, recorded so later components can be scored.

All of the injector's state is plain data (:meth:`FailureInjector.state_dict`) so a saved simulator state
restores a half-finished slip or noise burst exactly, and all of its randomness comes from the env's generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_recover.envs.config import FailureSpec
from vla_recover.envs.plain_copy import plain_copy

__all__ = ["DEFAULT_DURATION", "DEFAULT_MAGNITUDE", "FailureEvent", "FailureInjector"]

DEFAULT_MAGNITUDE: dict[str, float] = {
    "slip": 2.0,  # N downwards on the object while the grip loosens
    "early_release": 1.0,
    "push": 1.2,  # N horizontally on the object: a 50 g cube tips over and rolls several centimetres
    "actuator_noise": 1.2,  # std of Gaussian noise in normalised action units
    "pose_shift": 0.06,  # m
}
DEFAULT_DURATION: dict[str, int] = {
    "slip": 4,
    "early_release": 6,
    "push": 2,
    "actuator_noise": 8,
    "pose_shift": 1,
}


@dataclass(frozen=True)
class FailureEvent:
    """A failure that fired: what, when (step index of the env step it affected) and in which phase."""

    kind: str
    step: int
    phase: str

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "step": self.step, "phase": self.phase}


class FailureInjector:
    def __init__(self, specs: tuple[FailureSpec, ...], phases: tuple[str, ...]) -> None:
        for index, spec in enumerate(specs):
            if spec.phase is not None and spec.phase not in phases:
                raise ValueError(
                    f"failures.{index}.phase: got {spec.phase!r}; valid phases for this task: {', '.join(phases)}"
                )
        self.specs = specs
        self.phases = phases
        self._state: dict[str, Any] = {"pending": [], "active": {}, "events": []}

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def reset(self, rng: np.random.Generator) -> None:
        pending = []
        for index, spec in enumerate(self.specs):
            if rng.random() >= spec.probability:
                continue
            delay = int(rng.integers(spec.delay[0], spec.delay[1] + 1))
            fire_step = None if spec.phase is not None else spec.at_step + delay
            pending.append({"spec": index, "delay": delay, "fire_step": fire_step})
        self._state = {"pending": pending, "active": {}, "events": []}

    def begin_step(self, step: int, phase_index: int, rng: np.random.Generator, away: np.ndarray) -> list[FailureEvent]:
        """Fire what is due at ``step``; returns the failures that fired now.

        ``away`` is the horizontal unit vector from the gripper to the object: pushes and pose shifts move the
        object roughly that way, so they always undo reaching progress instead of sometimes helping it.
        """
        fired: list[FailureEvent] = []
        still_pending = []
        for item in self._state["pending"]:
            spec = self.specs[item["spec"]]
            if item["fire_step"] is None and phase_index >= self.phases.index(spec.phase or ""):
                item["fire_step"] = step + item["delay"]
            if item["fire_step"] is not None and step >= item["fire_step"]:
                fired.append(self._activate(spec, step, phase_index, rng, away))
            else:
                still_pending.append(item)
        self._state["pending"] = still_pending
        return fired

    def end_step(self) -> None:
        active = self._state["active"]
        for kind in list(active):
            active[kind]["remaining"] -= 1
            if active[kind]["remaining"] <= 0:
                del active[kind]

    def _activate(
        self, spec: FailureSpec, step: int, phase_index: int, rng: np.random.Generator, away: np.ndarray
    ) -> FailureEvent:
        magnitude = spec.magnitude if spec.magnitude is not None else DEFAULT_MAGNITUDE[spec.kind]
        angle = float(np.arctan2(away[1], away[0]) + rng.uniform(-0.5, 0.5))
        effect = {
            "remaining": 1 if spec.kind == "pose_shift" else (spec.duration or DEFAULT_DURATION[spec.kind]),
            "magnitude": float(magnitude),
            "direction": [float(np.cos(angle)), float(np.sin(angle))],
        }
        self._state["active"][spec.kind] = effect
        event = FailureEvent(spec.kind, step, self.phases[phase_index])
        self._state["events"].append(event.as_dict())
        return event

    # -- effects -----------------------------------------------------------------------------------------------
    def filter_action(
        self, action: np.ndarray, gripper_index: int, loose_grip: float, rng: np.random.Generator
    ) -> np.ndarray:
        """The action the robot actually executes. ``loose_grip`` is the gripper command that opens the
        fingers just past the object's width: what a slipping grasp looks like."""
        active = self._state["active"]
        if "actuator_noise" in active:
            action = action + rng.normal(0.0, active["actuator_noise"]["magnitude"], size=action.shape)
        if "early_release" in active or "slip" in active:
            action = action.copy()
            action[gripper_index] = -1.0 if "early_release" in active else min(action[gripper_index], loose_grip)
        return np.clip(action, -1.0, 1.0)

    def object_force(self) -> np.ndarray | None:
        """The force (N, world frame) to apply to the task's object this step, or None."""
        active = self._state["active"]
        if not ("slip" in active or "push" in active):
            return None
        force = np.zeros(3)
        if "slip" in active:
            force[2] -= active["slip"]["magnitude"]
        if "push" in active:
            push = active["push"]
            force[:2] += push["magnitude"] * np.asarray(push["direction"])
        return force

    def pose_shift(self) -> np.ndarray | None:
        """The horizontal offset (m) to move the object by now, once, or None."""
        shift = self._state["active"].get("pose_shift")
        if shift is None or shift.get("applied"):
            return None
        shift["applied"] = True
        return shift["magnitude"] * np.asarray(shift["direction"])

    # -- records -----------------------------------------------------------------------------------------------
    @property
    def events(self) -> tuple[dict[str, Any], ...]:
        return tuple(dict(e) for e in self._state["events"])

    def state_dict(self) -> dict[str, Any]:
        return plain_copy(self._state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._state = plain_copy(state)
