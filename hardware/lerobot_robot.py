"""A LeRobot robot (SO-100/SO-101 followers, Koch, …) behind our `Robot` interface, where LeRobot is installed.

LeRobot robots speak dicts of named features (``"shoulder_pan.pos": float``, cameras as ``(H, W, 3)``); here the
float features become the ``state`` vector in their declared order, each camera ``images.<name>``, and an action
vector maps onto ``action_features`` in order. ``send_action`` returns what LeRobot actually sent (after its own
``max_relative_target`` clipping), as our interface asks. Put `SafeRobot` in front for the full safety filter.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from typing import Any

import numpy as np

from vla_recover.hardware.robot import Robot, RobotError

__all__ = ["LeRobotRobot", "lerobot_config_class"]


def lerobot_config_class(package_name: str, base: Any, kind: str, what: str) -> Any:
    """LeRobot's config class registered as ``kind`` (its modules register on import)."""
    package = importlib.import_module(package_name)
    for module in pkgutil.iter_modules(package.__path__):
        with contextlib.suppress(ImportError):
            importlib.import_module(f"{package.__name__}.{module.name}")
    try:
        return base.get_choice_class(kind)
    except Exception as exc:
        raise ValueError(f"{what} kind: LeRobot has no {what} {kind!r}") from exc


class LeRobotRobot(Robot):
    """``robot`` is a LeRobot ``Robot`` (or anything with its features, connect, get_observation, send_action)."""

    def __init__(self, robot: Any, name: str | None = None) -> None:
        self.robot = robot
        self.name = name or getattr(robot, "id", None) or type(robot).__name__
        features = robot.observation_features
        self.state_keys = [key for key, kind in features.items() if kind is float]
        self.camera_keys = [key for key, kind in features.items() if isinstance(kind, tuple)]
        self.action_keys = list(robot.action_features)

    @classmethod
    def from_lerobot(cls, kind: str, port: str, **config: Any) -> LeRobotRobot:
        """Build ``kind`` (e.g. ``so101_follower``) through LeRobot's own registry, not yet connected."""
        try:
            from lerobot.robots.config import RobotConfig
            from lerobot.robots.utils import make_robot_from_config
        except ImportError as exc:
            raise RobotError("LeRobot robot: needs LeRobot (bash scripts/install_lerobot_venv.sh)") from exc
        config_cls = lerobot_config_class("lerobot.robots", RobotConfig, kind, "robot")
        try:
            return cls(make_robot_from_config(config_cls(port=port, **config)))
        except ImportError as exc:  # the arm's motor SDK is a LeRobot extra
            raise RobotError(f"LeRobot robot {kind}: LeRobot lacks its motor SDK ({exc})") from exc

    @property
    def observation_features(self) -> dict[str, tuple[int, ...]]:
        cameras = {f"images.{key}": tuple(self.robot.observation_features[key]) for key in self.camera_keys}
        return {"state": (len(self.state_keys),), **cameras}

    @property
    def action_features(self) -> dict[str, tuple[int, ...]]:
        return {"action": (len(self.action_keys),)}

    @property
    def is_connected(self) -> bool:
        return bool(self.robot.is_connected)

    def connect(self) -> None:
        try:
            self.robot.connect()
        except Exception as exc:  # serial, OS and LeRobot's own connection errors
            raise RobotError(f"{self.name}: cannot connect ({type(exc).__name__}: {exc})") from exc

    def disconnect(self) -> None:
        if self.robot.is_connected:
            self.robot.disconnect()

    def get_observation(self) -> dict[str, np.ndarray]:
        if not self.robot.is_connected:
            raise RobotError(f"{self.name}: not connected")
        raw = self.robot.get_observation()
        observation = {"state": np.asarray([raw[key] for key in self.state_keys], dtype=np.float32)}
        for key in self.camera_keys:
            observation[f"images.{key}"] = np.asarray(raw[key], dtype=np.uint8)
        return observation

    def send_action(self, action: np.ndarray) -> np.ndarray:
        if not self.robot.is_connected:
            raise RobotError(f"{self.name}: not connected")
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (len(self.action_keys),) or not np.all(np.isfinite(action)):
            raise RobotError(
                f"{self.name}: action must be {len(self.action_keys)} finite numbers, got {action.tolist()}"
            )
        sent = self.robot.send_action({key: float(value) for key, value in zip(self.action_keys, action, strict=True)})
        return np.asarray([sent[key] for key in self.action_keys], dtype=np.float64)

    def home(self) -> dict[str, np.ndarray]:
        """LeRobot arms have no scripted home; the observation where the arm is (an operator moves it)."""
        return self.get_observation()
