"""`Ros2Arm`: a `Robot` whose driver is a ROS 2 graph: joint states in, joint trajectory or position commands out.

It joins the fleet as a hardware slot or sits behind `SafeRobot` like any arm. The transport is a ROS 2 transport
(vla_recover.ros2.transport), so it works with rclpy or, where that is missing, over DDS directly. It lives with the
ROS 2 wire types rather than in `vla_recover.hardware`, so that the ROS 2 package imports the hardware one and never
the other way round.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from vla_recover.hardware.robot import Robot, RobotError
from vla_recover.ros2 import idl
from vla_recover.ros2.commands import command_struct, joint_command

__all__ = ["Ros2Arm"]


class Ros2Arm(Robot):
    def __init__(
        self,
        transport: Callable[[], Any],
        joint_names: list[str],
        name: str = "ros2_arm",
        joint_states_topic: str = "/joint_states",
        command_topic: str = "/joint_trajectory",
        command_type: Literal["joint_trajectory", "float64_multi_array"] = "joint_trajectory",
        control_hz: float = 30.0,
        home_position: list[float] | None = None,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.make_transport, self.joint_names, self.name = transport, list(joint_names), name
        self.joint_states_topic, self.command_topic, self.command_type = joint_states_topic, command_topic, command_type
        self.dt = 1.0 / control_hz
        self.home_position = np.asarray(home_position if home_position is not None else [0.0] * len(joint_names))
        self.connect_timeout_s = connect_timeout_s
        self._transport: Any = None
        self._publish: Any = None
        self._position: np.ndarray | None = None
        self._fresh = threading.Event()
        self._lock = threading.Lock()

    @property
    def observation_features(self) -> dict[str, tuple[int, ...]]:
        return {"state": (len(self.joint_names),)}

    @property
    def action_features(self) -> dict[str, tuple[int, ...]]:
        return {"action": (len(self.joint_names),)}

    @property
    def is_connected(self) -> bool:
        return self._transport is not None

    def connect(self) -> None:
        if self._transport is not None:
            return
        self._transport = self.make_transport()
        self._publish = self._transport.publisher(self.command_topic, command_struct(self.command_type))
        self._transport.subscribe(self.joint_states_topic, idl.JointState, self._on_joint_state, profile="sensor_data")
        if not self._fresh.wait(self.connect_timeout_s):
            self.disconnect()
            raise RobotError(
                f"{self.name}: no joint state on {self.joint_states_topic} within {self.connect_timeout_s} s"
            )

    def _on_joint_state(self, message: Any) -> None:
        names, positions = list(message.name), np.asarray(message.position, dtype=np.float64)
        if names and len(names) == len(positions) and all(n in names for n in self.joint_names):
            positions = positions[[names.index(n) for n in self.joint_names]]
        if positions.shape == (len(self.joint_names),) and np.all(np.isfinite(positions)):
            with self._lock:
                self._position = positions
            self._fresh.set()

    def disconnect(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        self._fresh.clear()

    def get_observation(self) -> dict[str, np.ndarray]:
        if self._transport is None:
            raise RobotError(f"{self.name}: not connected")
        with self._lock:
            if self._position is None:
                raise RobotError(f"{self.name}: no joint state yet")
            return {"state": self._position.astype(np.float32)}

    def send_action(self, action: np.ndarray) -> np.ndarray:
        if self._transport is None:
            raise RobotError(f"{self.name}: not connected")
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (len(self.joint_names),) or not np.all(np.isfinite(action)):
            raise RobotError(
                f"{self.name}: action must be {len(self.joint_names)} finite numbers, got {action.tolist()}"
            )
        self._publish(joint_command([action], self.joint_names, self.dt, self.command_type))
        return action

    def home(self) -> dict[str, np.ndarray]:
        self.send_action(self.home_position)
        return self.get_observation()
