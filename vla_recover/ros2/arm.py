"""`Ros2Arm`: a `Robot` whose driver is a ROS 2 graph: observation topics in, commands out.

By default its observation is the arm's ``JointState`` positions and its commands are joint trajectories (or
position arrays); ``observation`` maps any features onto topics instead (vla_recover.ros2.features), and
``float64_multi_array`` commands carry any action, e.g. the end-effector deltas of a task. It joins the fleet as a
hardware slot or sits behind `SafeRobot` like any arm. The transport is a ROS 2 transport
(vla_recover.ros2.transport), so it works with rclpy or, where that is missing, over DDS directly. It lives with the
ROS 2 wire types rather than in `vla_recover.hardware`, so that the ROS 2 package imports the hardware one and never
the other way round.

Freshness: after a command, `get_observation` waits (up to ``reply_timeout_s``) for every topic to deliver a message
sent after it, so a step's observation shows the step. A message that cannot be read (a missing joint, the wrong
size, a non-finite value) is reported to ``on_event`` and leaves its topic without a usable reading until the next
good one: `observation_age` is then infinite, and the safety filter holds the arm.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from vla_recover.hardware.robot import Robot, RobotError
from vla_recover.ros2 import idl
from vla_recover.ros2.commands import command_struct, joint_command
from vla_recover.ros2.features import TopicSource, feature_shapes, read_message

__all__ = ["Ros2Arm"]

STRUCTS = {"joint_state": "JointState", "float_array": "Float64MultiArray", "image": "Image"}


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
        observation: dict[str, list[TopicSource]] | None = None,
        action_size: int | None = None,
        home_topic: str | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.make_transport, self.joint_names, self.name = transport, list(joint_names), name
        self.command_topic, self.command_type, self.home_topic = command_topic, command_type, home_topic
        self.dt = 1.0 / control_hz
        self.reply_timeout_s = 2.0 * self.dt
        self.action_size = action_size if action_size is not None else len(self.joint_names)
        if self.action_size < 1 or (command_type == "joint_trajectory" and self.action_size != len(self.joint_names)):
            raise ValueError(f"joint_names: {self.joint_names} for trajectory commands of {self.action_size} values")
        self.home_position = np.asarray(home_position if home_position is not None else [0.0] * self.action_size)
        self.connect_timeout_s, self.on_event = connect_timeout_s, on_event
        if observation is None:
            joints = {"topic": joint_states_topic, "type": "joint_state", "names": self.joint_names}
            observation = {"state": [TopicSource.model_validate(joints)]}
        self.observation, self._shapes = observation, feature_shapes(observation)
        self._sources = [(key, source) for key, sources in observation.items() for source in sources]
        self._values: list[np.ndarray | None] = [None] * len(self._sources)
        self._received = [-np.inf] * len(self._sources)  # monotonic time of each source's latest good reading
        self._changed = threading.Condition()
        self._transport: Any = None
        self._publish: Any = None
        self._publish_home: Any = None
        self._asked_at = -np.inf  # when the last command or home request went out

    @property
    def observation_features(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    @property
    def action_features(self) -> dict[str, tuple[int, ...]]:
        return {"action": (self.action_size,)}

    @property
    def is_connected(self) -> bool:
        return self._transport is not None

    def connect(self) -> None:
        if self._transport is not None:
            return
        self._transport = self.make_transport()
        self._publish = self._transport.publisher(self.command_topic, command_struct(self.command_type))
        if self.home_topic is not None:
            self._publish_home = self._transport.publisher(self.home_topic, idl.String)
        for topic in dict.fromkeys(source.topic for _, source in self._sources):
            indices = [i for i, (_, source) in enumerate(self._sources) if source.topic == topic]
            struct = getattr(idl, STRUCTS[self._sources[indices[0]][1].type])
            self._transport.subscribe(topic, struct, lambda m, ix=indices: self._on_message(ix, m), "sensor_data")
        if not self._wait_for_readings(after=-np.inf, timeout=self.connect_timeout_s):
            silent = sorted({source.topic for i, (_, source) in enumerate(self._sources) if self._values[i] is None})
            self.disconnect()
            raise RobotError(f"{self.name}: no usable message on {', '.join(silent)} within {self.connect_timeout_s} s")

    def _on_message(self, indices: list[int], message: Any) -> None:
        now = time.monotonic()
        for i in indices:
            source = self._sources[i][1]
            try:
                value = read_message(source, message)
            except ValueError as exc:
                with self._changed:
                    self._received[i] = -np.inf  # no usable reading until the next good message
                self._report("message_rejected", reason=f"{source.topic}: {exc}")
                continue
            with self._changed:
                self._values[i], self._received[i] = value, now
                self._changed.notify_all()

    def _report(self, kind: str, **payload: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, payload)

    def _wait_for_readings(self, after: float, timeout: float) -> bool:
        """Wait until every source has a good reading received after ``after``; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: min(self._received) > after, timeout)

    def disconnect(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        with self._changed:
            self._values, self._received = [None] * len(self._sources), [-np.inf] * len(self._sources)

    def _require_connection(self) -> None:
        if self._transport is None:
            raise RobotError(f"{self.name}: not connected")

    def observation_age(self) -> float:
        with self._changed:
            return time.monotonic() - min(self._received)

    def get_observation(self) -> dict[str, np.ndarray]:
        self._require_connection()
        self._wait_for_readings(after=self._asked_at, timeout=self.reply_timeout_s)  # late: the latest it has
        with self._changed:
            if any(value is None for value in self._values):
                raise RobotError(f"{self.name}: no reading yet")
            parts: dict[str, list[np.ndarray]] = {}
            for (key, _), value in zip(self._sources, self._values, strict=True):
                parts.setdefault(key, []).append(value)  # type: ignore[arg-type]
        return {
            key: values[0].astype(np.uint8) if values[0].ndim == 3 else np.concatenate(values).astype(np.float32)
            for key, values in parts.items()
        }

    def send_action(self, action: np.ndarray) -> np.ndarray:
        self._require_connection()
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (self.action_size,) or not np.all(np.isfinite(action)):
            raise RobotError(f"{self.name}: action must be {self.action_size} finite numbers, got {action.tolist()}")
        self._asked_at = time.monotonic()
        self._publish(joint_command([action], self.joint_names, self.dt, self.command_type))
        return action

    def home(self) -> dict[str, np.ndarray]:
        """Ask the arm's ``home_topic`` to home (a stand-in arm also resets its scene there), or command
        ``home_position``; returns the first observation after it."""
        if self.home_topic is None:
            self.send_action(self.home_position)
            return self.get_observation()
        self._require_connection()
        self._asked_at = time.monotonic()
        self._publish_home(idl.String("home"))
        if not self._wait_for_readings(after=self._asked_at, timeout=self.connect_timeout_s):
            raise RobotError(f"{self.name}: no observation within {self.connect_timeout_s} s of homing")
        return self.get_observation()
