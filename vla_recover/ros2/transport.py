"""Where ROS 2 messages travel: one small interface, and the DDS transport that speaks ROS 2's wire conventions.

`DdsTransport` publishes and subscribes through Cyclone DDS with the ROS 2 naming (topic ``/x`` is the DDS topic
``rt/x``, types as in vla_recover.ros2.idl) and ROS 2's default QoS profiles, so ROS 2 nodes on the same domain see
its topics as their own. Where rclpy is installed, a transport over rclpy can stand behind the same interface.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = ["DdsTransport", "Transport", "dds_topic"]

Profile = Literal["default", "sensor_data"]


class Transport(Protocol):
    def publisher(self, topic: str, struct: type, profile: Profile = "default") -> Callable[[Any], None]: ...
    def subscribe(
        self, topic: str, struct: type, callback: Callable[[Any], None], profile: Profile = "default"
    ) -> None: ...
    def close(self) -> None: ...


def dds_topic(topic: str) -> str:
    """``/joint_states`` → ``rt/joint_states``, as ROS 2 maps topics onto DDS."""
    if not topic.startswith("/"):
        raise ValueError(f"topic: {topic!r} must be absolute (start with '/')")
    return "rt" + topic


def _qos(profile: Profile) -> Any:
    from cyclonedds.core import Policy
    from cyclonedds.qos import Qos
    from cyclonedds.util import duration

    if profile == "sensor_data":  # rclcpp's SensorDataQoS: best effort, keep last 5
        return Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5), Policy.Durability.Volatile)
    return Qos(Policy.Reliability.Reliable(duration(milliseconds=100)), Policy.History.KeepLast(10),
               Policy.Durability.Volatile)  # fmt: skip


class DdsTransport:
    """Cyclone DDS on ``domain_id``; ``config`` is a Cyclone XML file (e.g. a loopback-only one for tests)."""

    def __init__(self, domain_id: int = 0, config: str | Path | None = None) -> None:
        if config is not None:
            path = Path(config).resolve()
            if not path.is_file():
                raise FileNotFoundError(f"config: {path} does not exist")
            os.environ["CYCLONEDDS_URI"] = f"file://{path}"
        from cyclonedds.domain import DomainParticipant

        self.participant = DomainParticipant(domain_id)
        self._topics: dict[str, Any] = {}
        self._entities: list[Any] = []
        self._lock = threading.Lock()

    def _topic(self, topic: str, struct: type) -> Any:
        from cyclonedds.topic import Topic

        name = dds_topic(topic)
        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, struct)
        return self._topics[name]

    def publisher(self, topic: str, struct: type, profile: Profile = "default") -> Callable[[Any], None]:
        from cyclonedds.pub import DataWriter

        writer = DataWriter(self.participant, self._topic(topic, struct), qos=_qos(profile))
        self._entities.append(writer)
        return writer.write

    def subscribe(
        self, topic: str, struct: type, callback: Callable[[Any], None], profile: Profile = "default"
    ) -> None:
        """``callback(message)`` for every message, on Cyclone's listener thread."""
        from cyclonedds.core import Listener
        from cyclonedds.sub import DataReader

        def on_data_available(reader: Any) -> None:
            for sample in reader.take(N=64):
                if isinstance(sample, struct):  # invalid samples (disposals) carry no message
                    callback(sample)

        reader = DataReader(self.participant, self._topic(topic, struct), qos=_qos(profile),
                            listener=Listener(on_data_available=on_data_available))  # fmt: skip
        self._entities.append(reader)

    def close(self) -> None:
        self._entities.clear()
        self._topics.clear()
