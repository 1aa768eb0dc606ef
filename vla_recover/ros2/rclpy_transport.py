"""The same `Transport` over rclpy, for robots with a ROS 2 installation: the node runs unchanged on either.

Messages cross as vla_recover.ros2.idl structs; `to_ros` / `from_ros` copy them field by field to and from the
generated ROS 2 message classes (any classes with the ROS field names: rclpy's, or the `rosbags` ones in tests).
rclpy is not on PyPI, so this module imports it only when a transport is made.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import typing
from collections.abc import Callable
from typing import Any

from vla_recover.ros2.idl import ros_type_name
from vla_recover.ros2.transport import Profile

__all__ = ["RclpyTransport", "from_ros", "ros_message_class", "to_ros"]


def ros_message_class(type_name: str) -> Any:
    """``sensor_msgs/msg/JointState`` → ``sensor_msgs.msg.JointState`` (from the ROS 2 installation)."""
    package, _, name = type_name.split("/")
    return getattr(importlib.import_module(f"{package}.msg"), name)


def _is_struct(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and hasattr(type(value), "__idl_typename__")


def to_ros(value: Any, resolve: Callable[[str], Any] = ros_message_class) -> Any:
    """An idl struct as the ROS 2 message class ``resolve`` gives for its type."""
    if _is_struct(value):
        fields = {f.name: to_ros(getattr(value, f.name), resolve) for f in dataclasses.fields(value)}
        return resolve(ros_type_name(type(value)))(**fields)
    if isinstance(value, list):
        return [to_ros(item, resolve) for item in value]
    return value


def _element_struct(struct: type, name: str) -> type | None:
    """The struct type of a field, or of a sequence field's elements; None for plain values."""
    hint = typing.get_type_hints(struct)[name]
    for candidate in (hint, *typing.get_args(hint)):
        for inner in (candidate, *typing.get_args(candidate)):
            if isinstance(inner, type) and hasattr(inner, "__idl_typename__"):
                return inner
    return None


def from_ros(message: Any, struct: type) -> Any:
    """A ROS 2 message as the idl ``struct``."""
    values = {}
    for field in dataclasses.fields(struct):
        value, inner = getattr(message, field.name), _element_struct(struct, field.name)
        if inner is not None and isinstance(value, list | tuple):
            values[field.name] = [from_ros(item, inner) for item in value]
        elif inner is not None:
            values[field.name] = from_ros(value, inner)
        elif hasattr(value, "tolist") and not isinstance(value, int | float | str | bool):
            values[field.name] = value.tolist()
        elif isinstance(value, list | tuple | bytes | bytearray):
            values[field.name] = list(value)
        else:
            values[field.name] = value
    return struct(**values)


class RclpyTransport:
    """A node named ``name`` on rclpy, spun on a background thread."""

    def __init__(self, name: str = "vla_recover_policy_node") -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        if not rclpy.ok():
            rclpy.init()
        self._rclpy = rclpy
        self.node = rclpy.create_node(name)
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._executor.spin, name=f"{name}-spin", daemon=True)
        self._thread.start()

    def _qos(self, profile: Profile) -> Any:
        from rclpy.qos import qos_profile_sensor_data

        return qos_profile_sensor_data if profile == "sensor_data" else 10

    def publisher(self, topic: str, struct: type, profile: Profile = "default") -> Callable[[Any], None]:
        publisher = self.node.create_publisher(ros_message_class(ros_type_name(struct)), topic, self._qos(profile))
        return lambda message: publisher.publish(to_ros(message))

    def subscribe(
        self, topic: str, struct: type, callback: Callable[[Any], None], profile: Profile = "default"
    ) -> None:
        message_class = ros_message_class(ros_type_name(struct))
        self.node.create_subscription(
            message_class, topic, lambda message: callback(from_ros(message, struct)), self._qos(profile)
        )

    def close(self) -> None:
        self._executor.shutdown()
        self.node.destroy_node()
