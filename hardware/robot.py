"""The `Robot` interface real arms implement, and `FakeRobot`, a deterministic stand-in for tests.

In the spirit of LeRobot's robots: features are declared before connecting, ``connect``/``disconnect`` (or a
``with`` block) bracket use, ``get_observation`` reads, and ``send_action`` returns the action actually sent (after
whatever limiting the robot applies), because that, not the request, is what the data must record.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

__all__ = ["FakeRobot", "Robot", "RobotError"]


class RobotError(RuntimeError):
    """The robot cannot do what was asked (not connected, bad action, hardware fault)."""


class Robot(abc.ABC):
    name: str = "robot"

    @property
    @abc.abstractmethod
    def observation_features(self) -> dict[str, tuple[int, ...]]:
        """Observation key → shape, known before connecting."""

    @property
    @abc.abstractmethod
    def action_features(self) -> dict[str, tuple[int, ...]]:
        """Action key → shape, known before connecting."""

    @property
    @abc.abstractmethod
    def is_connected(self) -> bool: ...

    @abc.abstractmethod
    def connect(self) -> None: ...

    @abc.abstractmethod
    def disconnect(self) -> None: ...

    @abc.abstractmethod
    def get_observation(self) -> dict[str, np.ndarray]: ...

    @abc.abstractmethod
    def send_action(self, action: np.ndarray) -> np.ndarray:
        """Command ``action``; returns what was actually sent."""

    @abc.abstractmethod
    def home(self) -> dict[str, np.ndarray]:
        """Move to the start pose; returns the observation there."""

    def observation_age(self) -> float:
        """Seconds since the newest usable observation was measured (infinite while a sensor's latest reading is
        unusable). A driver that reads its sensors when asked is never stale: 0."""
        return 0.0

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()


class FakeRobot(Robot):
    """A kinematic gantry gripper: end-effector deltas ``[dx, dy, dz, dyaw, grip]`` in [-1, 1] move it exactly.

    ``state`` is ``[x, y, z, sin yaw, cos yaw, opening, vx, vy, vz]``, the proprioception of the sim tasks, then
    ``scene`` (a fixed vector standing in for perceived object poses, so the fake fits a task's observation).
    Positions stay inside ``workspace``; the action sent is the request clipped to [-1, 1] and to the workspace.
    """

    PROPRIO_DIMS = 9
    MAX_TRANSLATION = 0.02  # m per control step at |action| = 1
    MAX_ROTATION = 0.15  # rad per control step
    HOME = (0.0, 0.0, 0.25)

    def __init__(
        self, name: str = "fake0", control_hz: float = 20.0, workspace: float = 0.4, scene: np.ndarray | None = None
    ) -> None:
        self.name = name
        self.scene = np.zeros(0, np.float32) if scene is None else np.asarray(scene, np.float32)
        self.dt = 1.0 / control_hz
        self.workspace = workspace
        self._connected = False
        self._pos = np.array(self.HOME)
        self._vel = np.zeros(3)
        self._yaw = 0.0
        self._opening = 0.04

    @property
    def observation_features(self) -> dict[str, tuple[int, ...]]:
        return {"state": (9 + self.scene.size,)}

    @property
    def action_features(self) -> dict[str, tuple[int, ...]]:
        return {"action": (5,)}

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def _require_connection(self) -> None:
        if not self._connected:
            raise RobotError(f"{self.name}: not connected")

    def get_observation(self) -> dict[str, np.ndarray]:
        self._require_connection()
        state = [*self._pos, np.sin(self._yaw), np.cos(self._yaw), self._opening, *self._vel, *self.scene]
        return {"state": np.asarray(state, dtype=np.float32)}

    def send_action(self, action: np.ndarray) -> np.ndarray:
        self._require_connection()
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (5,) or not np.all(np.isfinite(action)):
            raise RobotError(f"{self.name}: action must be 5 finite numbers, got {action.tolist()}")
        sent = np.clip(action, -1.0, 1.0)
        target = np.clip(self._pos + sent[:3] * self.MAX_TRANSLATION, -self.workspace, self.workspace)
        target[2] = max(target[2], 0.0)
        sent[:3] = (target - self._pos) / self.MAX_TRANSLATION
        self._vel = (target - self._pos) / self.dt
        self._pos = target
        self._yaw += sent[3] * self.MAX_ROTATION
        self._opening = 0.04 * (1.0 - max(0.0, float(sent[4])))
        return sent

    def home(self) -> dict[str, np.ndarray]:
        self._require_connection()
        self._pos, self._vel, self._yaw, self._opening = np.array(self.HOME), np.zeros(3), 0.0, 0.04
        return self.get_observation()

    def pose(self) -> dict[str, Any]:
        return {"pos": self._pos.copy(), "yaw": self._yaw, "opening": self._opening}
