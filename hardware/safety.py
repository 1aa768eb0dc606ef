"""The safety filter that always stands between a policy or an operator and a robot, and `SafeRobot` that applies it.

Per command, in order: a command that is not ``dim`` finite numbers is rejected and the robot holds; the e-stop
latch, once set, turns every command into the hold until an explicit, logged `SafetyFilter.clear_estop`; then each
dimension is clipped to the intersection of
- the absolute limits ``low``/``high`` (joint limits, or the action range),
- ``max_relative_target`` around the present measured position (joint commands, as LeRobot's option),
- ``max_velocity``·dt around the previous command sent (both modes),
- for end-effector deltas, the step that keeps the commanded position inside the ``workspace`` box.
The absolute limits always hold; a further bound that cannot be met together with the stronger ones is approached
as far as they allow (priority: step from the last command, workspace, reach from the present position). The hold
(the present position, or a zero delta with the grip kept) goes through the same bounds. The robot is held, whatever
is commanded, while its observation is older than ``watchdog_s`` (the driver's `Robot.observation_age`) or its
latest measured position was rejected (non-finite, or further than ``measured_margin`` outside the joint limits or
the workspace: a sensor fault, not a place the arm can be). A watchdog (`SafetyFilter.watchdog`) commands the hold
when no fresh command or observation came within ``watchdog_s``.
Every intervention is counted by kind and passed to ``on_event`` (logged as a warning where there is none).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from vla_recover.config import FrozenConfig
from vla_recover.hardware.robot import Robot, RobotError

__all__ = ["SafeRobot", "SafetyConfig", "SafetyFilter", "WorkspaceBox"]

log = logging.getLogger(__name__)


class WorkspaceBox(FrozenConfig):
    low: tuple[float, float, float] = Field(
        description="lowest x, y, z of the commanded position, metres, in the frame of the observed position"
    )
    high: tuple[float, float, float] = Field(
        description="highest x, y, z of the commanded position, metres, in the frame of the observed position"
    )

    @model_validator(mode="after")
    def _ordered(self) -> WorkspaceBox:
        if any(lo > hi for lo, hi in zip(self.low, self.high, strict=True)):
            raise ValueError(f"workspace: low {self.low} must not exceed high {self.high}")
        return self


class SafetyConfig(FrozenConfig):
    command: Literal["ee_delta", "joint_position"] = Field(
        "ee_delta",
        description="what the robot is sent: ee_delta: end-effector deltas (and grip) in [-1, 1]; joint_position: "
        "absolute joint targets",
    )
    low: list[float] | None = Field(None, description="per-dimension lower limits; ee_delta default -1")
    high: list[float] | None = Field(None, description="per-dimension upper limits; ee_delta default +1")
    max_relative_target: float | None = Field(None, gt=0.0, description="joint_position: |target − present| per step")
    max_velocity: float | None = Field(None, gt=0.0, description="|command − previous command| per second")
    workspace: WorkspaceBox | None = Field(None, description="ee_delta: the commanded position stays inside")
    translation_per_unit: float = Field(0.02, gt=0.0, description="ee_delta: metres per step at |delta| = 1")
    position_key: str = Field(
        "state", description="observation key that holds the present position (joints, or the end effector's xyz)"
    )
    position_indices: list[int] | None = Field(
        None,
        description="present position in the key; None: every joint (joint_position, one per limit) or x, y, z "
        "(ee_delta, the first three)",
    )
    gripper_index: int | None = Field(4, description="ee_delta: held at its last value while holding")
    watchdog_s: float = Field(
        0.25, gt=0.0, description="seconds without a fresh command or observation before the robot is held"
    )
    measured_margin: float = Field(
        0.05,
        ge=0.0,
        description="how far a measured position may lie outside the joint limits (joint_position) or the "
        "workspace (ee_delta) before it is rejected as a sensor fault and the robot held",
    )
    control_hz: float = Field(
        20.0,
        gt=0.0,
        description="commands per second: max_velocity bounds each command's step to max_velocity / control_hz",
    )

    @model_validator(mode="after")
    def _consistent(self) -> SafetyConfig:
        if (self.low is None) != (self.high is None):
            raise ValueError("low / high: give both or neither")
        if (
            self.low is not None
            and self.high is not None
            and (len(self.low) != len(self.high) or any(lo > hi for lo, hi in zip(self.low, self.high, strict=False)))
        ):
            raise ValueError(f"low / high: need equal lengths and low <= high, got {self.low} and {self.high}")
        if self.command == "joint_position" and self.low is None:
            raise ValueError("low / high: joint_position commands need joint limits")
        if self.workspace is not None and self.command != "ee_delta":
            raise ValueError("workspace: only for ee_delta commands")
        indices, low = self.position_indices, self.low
        if self.command == "joint_position" and indices is not None and low is not None and len(indices) != len(low):
            raise ValueError(
                f"position_indices: {len(indices)} for {len(low)} joints; joint_position commands compare every "
                "joint with its measured position"
            )
        return self

    @property
    def present_indices(self) -> list[int]:
        """Where the present position is in ``position_key``: as given, else every joint or x, y, z."""
        if self.position_indices is not None:
            return self.position_indices
        return list(range(len(self.low or []))) if self.command == "joint_position" else [0, 1, 2]


class SafetyFilter:
    """Makes any command safe for one robot with ``dim`` action dimensions; see the module docstring."""

    def __init__(
        self,
        config: SafetyConfig,
        dim: int,
        clock: Callable[[], float] = time.monotonic,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.config, self.dim, self.clock, self.on_event = config, dim, clock, on_event
        default = 1.0 if config.command == "ee_delta" else np.inf
        self.low = np.asarray(config.low if config.low is not None else [-default] * dim, dtype=np.float64)
        self.high = np.asarray(config.high if config.high is not None else [default] * dim, dtype=np.float64)
        if self.low.shape != (dim,):
            raise ValueError(f"low / high: {self.low.size} limits for an action of {dim}")
        self.dt = 1.0 / config.control_hz
        self.counts: Counter[str] = Counter()
        self.present: np.ndarray | None = None  # measured position (joints, or the end effector's xyz)
        self.previous: np.ndarray | None = None  # the last command sent
        self.last_command = self.last_observation = -np.inf
        self.measured_ok = True  # the latest measured position was usable
        self.estopped = False
        self.estop_reason = ""

    # -- inputs -----------------------------------------------------------------------------------------------------
    def observe(self, observation: dict[str, np.ndarray]) -> bool:
        """Take the measured position from ``observation``; False (and the robot held) when it is unusable."""
        values = np.asarray(observation[self.config.position_key], dtype=np.float64).reshape(-1)
        position = values[self.config.present_indices]
        problem = self._implausible(position)
        self.measured_ok = problem is None
        if problem is not None:
            self._intervene("observation_rejected", reason=f"{problem} {np.round(position, 4).tolist()}")
            return False
        self.present = position
        self.last_observation = self.clock()
        return True

    def _implausible(self, position: np.ndarray) -> str | None:
        if not np.all(np.isfinite(position)):
            return "non-finite position"
        margin = self.config.measured_margin
        if self.config.command == "joint_position":
            low, high = self.low, self.high
        elif self.config.workspace is not None:
            low, high = np.asarray(self.config.workspace.low), np.asarray(self.config.workspace.high)
        else:
            return None
        if np.any(position < low - margin) or np.any(position > high + margin):
            return "position outside the limits"
        return None

    def estop(self, who: str, reason: str = "") -> None:
        if not self.estopped:
            self.estopped, self.estop_reason = True, reason
            self._intervene("estop", who=who, reason=reason)

    def clear_estop(self, who: str) -> None:
        """Only this clears the latch; it is logged with who did it."""
        if self.estopped:
            self.estopped = False
            self._intervene("estop_cleared", who=who, reason=self.estop_reason)

    # -- outputs ----------------------------------------------------------------------------------------------------
    def hold(self) -> np.ndarray:
        """Stay where the robot is (the present joints, or a zero delta with the grip kept), within every limit."""
        rest = self._at_rest()
        if rest is None:  # joints never observed: stay at the last command, or the nearest in-limits zero
            rest = self.previous if self.previous is not None else np.zeros(self.dim)
        return self._clip(np.clip(rest, self.low, self.high))

    def filter(self, command: Any, observation_age: float = 0.0) -> np.ndarray:
        """The safe command for ``command`` (whatever it is) with an observation ``observation_age`` seconds old;
        records it as sent."""
        self.last_command = self.clock()
        try:
            action = np.asarray(command, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            action = np.full(self.dim + 1, np.nan)  # not numbers at all: rejected below
        if action.shape != (self.dim,) or not np.all(np.isfinite(action)):
            self._intervene(
                "rejected", reason=f"expected {self.dim} finite numbers, got {np.asarray(command).tolist()}"
            )
            return self._send(self.hold())
        if self.estopped:
            self.counts["estop_hold"] += 1
            return self._send(self.hold())
        if observation_age > self.config.watchdog_s or not self.measured_ok:
            why = "the observation is stale" if self.measured_ok else "the measured position was rejected"
            self._intervene("watchdog_hold", stale=["observation"], reason=f"{why} ({observation_age:.3f} s old)")
            return self._send(self.hold())
        safe = self._clip(action)
        if np.any(np.abs(safe - action) > 1e-12):
            self._intervene("clipped", requested=np.round(action, 4).tolist(), sent=np.round(safe, 4).tolist())
        return self._send(safe)

    def _clip(self, action: np.ndarray) -> np.ndarray:
        """Clip into the absolute limits, then, per dimension, into each further bound that still leaves room, in
        order of priority: the step from the last command, the workspace, the reach from the present position."""
        lo, hi = self.low.copy(), self.high.copy()
        for bound_lo, bound_hi in self._bounds():
            narrower_lo, narrower_hi = np.maximum(lo, bound_lo), np.minimum(hi, bound_hi)
            room = narrower_lo <= narrower_hi
            if not np.all(room):  # cannot meet this bound: go as far towards it as the stronger ones allow
                self.counts["conflict"] += 1
                nearest = np.where(bound_lo > hi, hi, lo)
                narrower_lo, narrower_hi = np.where(room, narrower_lo, nearest), np.where(room, narrower_hi, nearest)
            lo, hi = narrower_lo, narrower_hi
        return np.clip(action, lo, hi)

    def _bounds(self) -> list[tuple[np.ndarray, np.ndarray]]:
        bounds = []
        reference = self.previous if self.previous is not None else self._at_rest()  # a first step from rest
        if self.config.max_velocity is not None and reference is not None:
            step = self.config.max_velocity * self.dt
            bounds.append((reference - step, reference + step))
        if self.config.workspace is not None and self.present is not None:
            n = len(self.config.present_indices)
            unit = self.config.translation_per_unit
            box_lo, box_hi = np.full(self.dim, -np.inf), np.full(self.dim, np.inf)
            box_lo[:n] = (np.asarray(self.config.workspace.low) - self.present) / unit
            box_hi[:n] = (np.asarray(self.config.workspace.high) - self.present) / unit
            bounds.append((box_lo, box_hi))
        if self.config.max_relative_target is not None and self.present is not None:
            reach = self.config.max_relative_target
            bounds.append((self.present - reach, self.present + reach))
        return bounds

    def _at_rest(self) -> np.ndarray | None:
        """The command that keeps the robot where it is: the present joints (None before any observation), or a
        zero delta with the grip kept."""
        if self.config.command == "joint_position":
            return self.present
        rest = np.zeros(self.dim)
        grip = self.config.gripper_index
        if grip is not None and self.previous is not None:
            rest[grip] = self.previous[grip]
        return rest

    def bound_following(self, first: np.ndarray, following: list[np.ndarray]) -> list[np.ndarray]:
        """The points after ``first`` in a planned trajectory, each inside the absolute limits and one velocity
        step from the point before. Nothing is recorded as sent: only ``first`` went through `filter`."""
        step = (self.config.max_velocity or np.inf) * self.dt
        points, previous = [], first
        for action in following:
            previous = np.clip(np.clip(action, previous - step, previous + step), self.low, self.high)
            points.append(previous)
        return points

    def watchdog(self, observation_age: float = 0.0) -> np.ndarray | None:
        """The hold when the command or the observation (the last one taken, or the driver's newest, which is
        ``observation_age`` seconds old) went stale; None while both are fresh."""
        now, limit = self.clock(), self.config.watchdog_s
        ages = {"command": now - self.last_command, "observation": max(now - self.last_observation, observation_age)}
        stale = [name for name, age in ages.items() if age > limit]
        if not stale:
            return None
        self._intervene("watchdog_hold", stale=stale)
        return self._send(self.hold())

    def _send(self, action: np.ndarray) -> np.ndarray:
        self.previous = action.copy()
        return action

    def _intervene(self, kind: str, **payload: Any) -> None:
        self.counts[kind] += 1
        if self.on_event is None:
            log.warning("safety %s: %s", kind, payload)
        else:  # the listener reports them (the fleet: one summary per robot a second), so the log does not flood
            log.debug("safety %s: %s", kind, payload)
            self.on_event(kind, payload)


class SafeRobot(Robot):
    """A `Robot` behind a `SafetyFilter`, with a watchdog thread that holds the robot when inputs go stale."""

    def __init__(
        self, robot: Robot, config: SafetyConfig, on_event: Callable[[str, dict[str, Any]], None] | None = None
    ):
        self.robot, self.name = robot, robot.name
        dim = sum(int(np.prod(shape)) for shape in robot.action_features.values())
        self.filter = SafetyFilter(config, dim, on_event=on_event)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._last_good: dict[str, np.ndarray] | None = None

    @property
    def observation_features(self) -> dict[str, tuple[int, ...]]:
        return self.robot.observation_features

    @property
    def action_features(self) -> dict[str, tuple[int, ...]]:
        return self.robot.action_features

    @property
    def is_connected(self) -> bool:
        return self.robot.is_connected

    def connect(self) -> None:
        self.robot.connect()
        self.get_observation()
        self._stop.clear()
        self._watchdog = threading.Thread(target=self._watch, name=f"{self.name}-watchdog", daemon=True)
        self._watchdog.start()

    def disconnect(self) -> None:
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join(timeout=2.0)
        self.robot.disconnect()

    def get_observation(self) -> dict[str, np.ndarray]:
        """The robot's observation; one whose measured position the filter rejects is replaced by the last one it
        accepted (the robot is held meanwhile), so no implausible reading reaches a policy."""
        with self._lock:
            observation = self.robot.get_observation()
            if self.filter.observe(observation) or self._last_good is None:
                self._last_good = observation
            return self._last_good

    def observation_age(self) -> float:
        return self.robot.observation_age()

    def send_action(self, action: np.ndarray) -> np.ndarray:
        if not self.robot.is_connected:
            raise RobotError(f"{self.name}: not connected")
        with self._lock:
            return self.robot.send_action(self.filter.filter(action, self.robot.observation_age()))

    def home(self, tolerance: float = 1e-3, max_steps: int = 2000) -> dict[str, np.ndarray]:
        """Back to the start pose. An arm with absolute joint commands and a ``home_position`` gets there along a
        trajectory within the filter's limits (each command bounded in reach and velocity, one a control period),
        never in one jump; any other robot homes through its own driver."""
        target = getattr(self.robot, "home_position", None)
        if self.filter.config.command != "joint_position" or target is None:
            with self._lock:
                observation = self.robot.home()
                self.filter.observe(observation)
            return observation
        target = np.asarray(target, dtype=np.float64)
        for _ in range(max_steps):
            observation = self.get_observation()
            if self.filter.present is not None and np.max(np.abs(self.filter.present - target)) <= tolerance:
                return observation
            self.send_action(target)  # the filter makes it one bounded step towards home
            time.sleep(self.filter.dt)
        raise RobotError(
            f"{self.name}: homing did not reach {target.tolist()} within {max_steps} steps (at "
            f"{None if self.filter.present is None else self.filter.present.tolist()})"
        )

    def estop(self, who: str, reason: str = "") -> None:
        with self._lock:
            self.filter.estop(who, reason)
            self.robot.send_action(self.filter.hold())

    def clear_estop(self, who: str) -> None:
        with self._lock:
            self.filter.clear_estop(who)

    def _watch(self) -> None:
        period = min(self.filter.config.watchdog_s / 4, self.filter.dt)  # a hold within a control period
        while not self._stop.wait(period):
            with self._lock:
                hold = self.filter.watchdog(self.robot.observation_age())
                if hold is not None and self.robot.is_connected:
                    self.robot.send_action(hold)
