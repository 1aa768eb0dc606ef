"""Where ROS 2 messages travel: one small interface, and the DDS transport that speaks ROS 2's wire conventions.

`DdsTransport` publishes and subscribes through Cyclone DDS with the ROS 2 naming (topic ``/x`` is the DDS topic
``rt/x``, types as in vla_recover.ros2.idl) and ROS 2's default QoS profiles, so ROS 2 nodes on the same domain see
its topics as their own. Where rclpy is installed, a transport over rclpy can stand behind the same interface.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = ["DdsTransport", "Transport", "TransportKind", "dds_topic", "make_transport", "ros_domain_id"]

Profile = Literal["default", "sensor_data"]
TransportKind = Literal["auto", "rclpy", "dds"]

log = logging.getLogger(__name__)


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


class _Dispatcher:
    """One thread that waits on a DDS waitset and runs the callbacks of every reader attached to it.

    It holds no reference to its transport, so a transport dropped without close() is still collected, and its
    finalizer stops this thread.
    """

    WAKE_PERIOD_S = 0.1  # it also wakes this often, so stop() never waits on a silent graph

    def __init__(self, participant: Any) -> None:
        from cyclonedds.core import GuardCondition, WaitSet

        self.waitset: Any = WaitSet(participant)
        self.wake: Any = GuardCondition(participant)
        self.waitset.attach(self.wake)
        self.subscriptions: list[tuple[Any, Any, type, Callable[[Any], None]]] = []  # reader, condition, struct, cb
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def add(self, reader: Any, struct: type, callback: Callable[[Any], None]) -> None:
        from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState

        condition = ReadCondition(reader, SampleState.Any | ViewState.Any | InstanceState.Any)
        with self.lock:
            self.waitset.attach(condition)
            self.subscriptions.append((reader, condition, struct, callback))
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="dds-dispatch", daemon=True)
                self.thread.start()

    def _run(self) -> None:
        timeout_ns = int(self.WAKE_PERIOD_S * 1e9)
        while not self.stopped.is_set():
            self.waitset.wait(timeout_ns)
            with self.lock:
                subscriptions = list(self.subscriptions)
            for reader, condition, struct, callback in subscriptions:
                if self.stopped.is_set():
                    return
                for sample in reader.take(N=64, condition=condition):
                    if isinstance(sample, struct):  # invalid samples (disposals) carry no message
                        self._deliver(callback, sample)

    @staticmethod
    def _deliver(callback: Callable[[Any], None], message: Any) -> None:
        try:
            callback(message)
        except Exception:  # one bad callback must not stop delivery on every other topic
            log.exception("callback for %s failed", type(message).__name__)

    def stop(self, join: bool = False) -> None:
        self.stopped.set()
        self.wake.set(True)
        if join and self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=5.0)


def ros_domain_id() -> int:
    """``ROS_DOMAIN_ID`` from the environment, as ROS 2 itself reads it; 0 when unset."""
    raw = os.environ.get("ROS_DOMAIN_ID", "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"ROS_DOMAIN_ID: {raw!r} is not a whole number") from None
    if not 0 <= value <= 232:
        raise ValueError(f"ROS_DOMAIN_ID: {value} is outside 0-232")
    return value


class DdsTransport:
    """Cyclone DDS on ``domain_id`` (default: ``ROS_DOMAIN_ID``, else 0); ``config`` is a Cyclone XML file (e.g. a
    loopback-only one for tests).

    Callbacks run on one dispatch thread of this transport that waits on a DDS waitset, never on Cyclone's own
    threads. Cyclone's listeners run Python on its delivery threads, and a write from a thread holding the GIL
    waits for a listener in progress on a reader in the same process, which waits for the GIL: the process hangs.
    """

    def __init__(self, domain_id: int | None = None, config: str | Path | None = None) -> None:
        if config is not None:
            path = Path(config).resolve()
            if not path.is_file():
                raise FileNotFoundError(f"config: {path} does not exist")
            os.environ["CYCLONEDDS_URI"] = f"file://{path}"
        from cyclonedds.domain import DomainParticipant

        self.participant: Any = DomainParticipant(ros_domain_id() if domain_id is None else domain_id)
        self._topics: dict[str, Any] = {}
        self._writers: list[Any] = []
        self._lock = threading.Lock()
        self._dispatcher: Any = _Dispatcher(self.participant)
        weakref.finalize(self, self._dispatcher.stop)

    def _topic(self, topic: str, struct: type) -> Any:
        from cyclonedds.topic import Topic

        name = dds_topic(topic)
        if name not in self._topics:
            self._topics[name] = Topic(self.participant, name, struct)
        return self._topics[name]

    def _check_open(self, topic: str) -> None:
        if self.participant is None:
            raise RuntimeError(f"{topic}: the transport is closed")

    def publisher(self, topic: str, struct: type, profile: Profile = "default") -> Callable[[Any], None]:
        from cyclonedds.pub import DataWriter

        with self._lock:
            self._check_open(topic)
            writer = DataWriter(self.participant, self._topic(topic, struct), qos=_qos(profile))
            self._writers.append(writer)
        return writer.write

    def subscribe(
        self, topic: str, struct: type, callback: Callable[[Any], None], profile: Profile = "default"
    ) -> None:
        """``callback(message)`` for every message, on this transport's dispatch thread."""
        from cyclonedds.sub import DataReader

        with self._lock:
            self._check_open(topic)
            reader = DataReader(self.participant, self._topic(topic, struct), qos=_qos(profile))
            self._dispatcher.add(reader, struct, callback)

    def close(self) -> None:
        """Stops the dispatch thread, then leaves the graph (the participant and everything it made go)."""
        with self._lock:
            if self.participant is None:
                return
            self._dispatcher.stop(join=True)
            self._dispatcher = None
            self._writers.clear()
            self._topics.clear()
            self.participant = None  # the last reference: Cyclone deletes the participant and its children


def make_transport(
    kind: str, name: str = "vla_recover", domain_id: int | None = None, dds_config: str | Path | None = None
) -> Transport:
    """A transport of ``kind``: ``rclpy`` (a sourced ROS 2; the node is called ``name``), ``dds`` (Cyclone DDS
    directly), or ``auto`` (rclpy when it is installed, else dds)."""
    if kind not in ("auto", "rclpy", "dds"):
        raise ValueError(f"transport: got {kind!r}; valid choices: auto, rclpy, dds")
    if kind == "rclpy" or (kind == "auto" and importlib.util.find_spec("rclpy") is not None):
        if domain_id is not None:  # rclpy reads the domain from the environment only
            os.environ["ROS_DOMAIN_ID"] = str(domain_id)
        from vla_recover.ros2.rclpy_transport import RclpyTransport

        return RclpyTransport(name)
    return DdsTransport(domain_id, dds_config)
