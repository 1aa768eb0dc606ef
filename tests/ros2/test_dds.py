"""The DDS transport: ROS 2 bytes on the wire, and two processes talking on loopback as ROS 2 nodes would."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("cyclonedds")

from vla_recover.ros2 import idl
from vla_recover.ros2.messages import typestore

LOOPBACK = Path(__file__).resolve().parents[1] / "fixtures" / "ros2" / "cyclonedds-loopback.xml"


def test_our_structs_encode_exactly_as_ros2_does() -> None:
    types = typestore().types
    header = types["std_msgs/msg/Header"](stamp=types["builtin_interfaces/msg/Time"](sec=3, nanosec=7), frame_id="b")
    point = types["trajectory_msgs/msg/JointTrajectoryPoint"](
        positions=np.array([0.1, 0.2]), velocities=np.array([], float), accelerations=np.array([], float),
        effort=np.array([], float), time_from_start=types["builtin_interfaces/msg/Duration"](sec=0, nanosec=33_000_000),
    )  # fmt: skip
    status = types["diagnostic_msgs/msg/DiagnosticStatus"](
        level=1, name="policy", message="slow", hardware_id="arm",
        values=[types["diagnostic_msgs/msg/KeyValue"](key="p99_ms", value="41.0")],
    )  # fmt: skip
    pairs = [
        (idl.JointState(idl.Header(idl.Time(3, 7), "b"), ["j1", "j2"], [0.5, -1.0], [0.0, 0.1], []),
         types["sensor_msgs/msg/JointState"](header=header, name=["j1", "j2"], position=np.array([0.5, -1.0]),
                                             velocity=np.array([0.0, 0.1]), effort=np.array([], float))),
        (idl.String("lift the red cube"), types["std_msgs/msg/String"](data="lift the red cube")),
        (idl.Bool(True), types["std_msgs/msg/Bool"](data=True)),
        (idl.Image(idl.Header(idl.Time(3, 7), "b"), 2, 1, "rgb8", 0, 3, [1, 2, 3, 4, 5, 6]),
         types["sensor_msgs/msg/Image"](header=header, height=2, width=1, encoding="rgb8", is_bigendian=0, step=3,
                                        data=np.arange(1, 7, dtype=np.uint8))),
        (idl.JointTrajectory(idl.Header(idl.Time(3, 7), "b"), ["j1", "j2"],
                             [idl.JointTrajectoryPoint([0.1, 0.2], [], [], [], idl.Duration(0, 33_000_000))]),
         types["trajectory_msgs/msg/JointTrajectory"](header=header, joint_names=["j1", "j2"], points=[point])),
        (idl.DiagnosticArray(idl.Header(idl.Time(3, 7), "b"),
                             [idl.DiagnosticStatus(1, "policy", "slow", "arm", [idl.KeyValue("p99_ms", "41.0")])]),
         types["diagnostic_msgs/msg/DiagnosticArray"](header=header, status=[status])),
    ]  # fmt: skip
    for ours, theirs in pairs:
        assert idl.ros_type_name(type(ours)) == theirs.__msgtype__
        assert ours.serialize() == bytes(typestore().serialize_cdr(theirs, theirs.__msgtype__)), theirs.__msgtype__


def _publish_joint_states(config: str, count: int, ready: object) -> None:
    from vla_recover.ros2.transport import DdsTransport

    transport = DdsTransport(config=config)
    publish = transport.publisher("/joint_states", idl.JointState, profile="sensor_data")
    ready.wait(10)  # type: ignore[attr-defined]
    time.sleep(0.5)  # discovery
    for i in range(count):  # 30 Hz
        publish(idl.JointState(idl.Header(idl.Time.from_ns(time.time_ns()), "base"), ["j1"], [float(i)], [], []))
        time.sleep(1 / 30)
    transport.close()


def test_two_processes_on_loopback(tmp_path: Path) -> None:
    from vla_recover.ros2.transport import DdsTransport

    transport = DdsTransport(config=LOOPBACK)
    received: list[float] = []
    got_enough = threading.Event()

    def on_joint_state(message: idl.JointState) -> None:
        received.append(message.position[0])
        if len(received) >= 20:
            got_enough.set()

    transport.subscribe("/joint_states", idl.JointState, on_joint_state, profile="sensor_data")
    context = mp.get_context("spawn")
    ready = context.Event()
    publisher = context.Process(target=_publish_joint_states, args=(str(LOOPBACK), 45, ready))
    publisher.start()
    ready.set()
    try:
        assert got_enough.wait(15), f"received {len(received)} joint states"
    finally:
        publisher.join(10)
        transport.close()
    assert received == sorted(received) and received[-1] - received[0] >= 19  # in order, a sustained stream


def test_structs_cross_to_ros_message_classes_and_back() -> None:
    """The rclpy transport's field-by-field copy, checked with the rosbags classes standing in for rclpy's."""
    from vla_recover.ros2.rclpy_transport import from_ros, to_ros

    types = typestore().types
    messages = [
        idl.JointTrajectory(idl.Header(idl.Time(1, 2), "base"), ["j1", "j2"],
                            [idl.JointTrajectoryPoint([0.1, 0.2], [0.0, 0.0], [], [], idl.Duration(0, 33_000_000))]),
        idl.JointState(idl.Header(idl.Time(3, 4), ""), ["a"], [0.5], [], []),
        idl.DiagnosticArray(idl.Header(), [idl.DiagnosticStatus(2, "n", "m", "h", [idl.KeyValue("k", "v")])]),
        idl.Image(idl.Header(), 1, 2, "rgb8", 0, 6, [1, 2, 3, 4, 5, 6]),
        idl.Bool(True),
    ]  # fmt: skip
    for message in messages:  # the ROS classes take exactly the ROS field names, nested types included
        ros = to_ros(message, resolve=types.__getitem__)
        assert ros.__msgtype__ == idl.ros_type_name(type(message))
        assert from_ros(ros, type(message)) == message


def _write_from_threads_to_readers_in_this_process(config: str, seconds: float, received: object) -> None:
    """Three Python threads write as fast as they can onto topics this process also reads, and the callbacks do
    Python work and publish in turn: with Cyclone's listeners this hangs within a second or two."""
    from vla_recover.ros2.transport import DdsTransport

    writer, reader = DdsTransport(config=config), DdsTransport(config=config)
    count = [0]
    answer = reader.publisher("/answers", idl.String)

    def on_message(message: idl.String) -> None:
        count[0] += sum(range(2000)) > 0
        answer(message)

    reader.subscribe("/questions", idl.String, on_message)
    reader.subscribe("/answers", idl.String, on_message)
    publishers = [writer.publisher("/questions", idl.String), answer, writer.publisher("/questions", idl.String)]
    time.sleep(0.3)  # discovery inside the process
    end = time.monotonic() + seconds

    def spam(publish: object) -> None:
        while time.monotonic() < end:
            publish(idl.String("how far?"))  # type: ignore[operator]

    threads = [threading.Thread(target=spam, args=(publish,)) for publish in publishers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    reader.close()
    received.value = count[0]  # type: ignore[attr-defined]


@pytest.mark.slow  # 6 to 45 s to wind down on two busy cores (below): a reliability trial, not a quick check
def test_writes_racing_callbacks_in_one_process_do_not_deadlock() -> None:
    context = mp.get_context("spawn")
    received = context.Value("i", 0)
    child = context.Process(target=_write_from_threads_to_readers_in_this_process, args=(str(LOOPBACK), 3.0, received))
    child.start()
    # 3 s of writing takes 6 to 45 s or more to wind down on two busy cores (the callbacks answer their own
    # answers, and the writers wait for the GIL); a deadlock never ends, so the limit only has to clear that tail
    child.join(120)
    hung = child.is_alive()
    if hung:
        child.kill()
    assert not hung and child.exitcode == 0, "deadlocked" if hung else f"exit code {child.exitcode}"
    assert received.value > 100


def test_a_failing_callback_is_logged_and_a_closed_transport_refuses_new_topics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from vla_recover.ros2.transport import DdsTransport

    transport = DdsTransport(config=LOOPBACK)
    received: list[str] = []

    def fail(message: idl.String) -> None:
        raise RuntimeError("a broken callback")

    transport.subscribe("/chatter", idl.String, fail)
    transport.subscribe("/chatter", idl.String, lambda message: received.append(message.data))
    publish = transport.publisher("/chatter", idl.String)
    time.sleep(0.3)
    for word in ("one", "two"):
        publish(idl.String(word))
    deadline = time.monotonic() + 5
    while len(received) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert received == ["one", "two"]
    assert "callback for String failed" in caplog.text
    started = time.monotonic()
    transport.close()
    transport.close()  # twice is harmless
    assert time.monotonic() - started < 1.0
    with pytest.raises(RuntimeError, match="/chatter: the transport is closed"):
        transport.subscribe("/chatter", idl.String, fail)


def test_the_domain_comes_from_ros_domain_id_as_ros2_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from vla_recover.ros2.transport import ros_domain_id

    monkeypatch.setenv("ROS_DOMAIN_ID", "42")
    assert ros_domain_id() == 42
    monkeypatch.delenv("ROS_DOMAIN_ID")
    assert ros_domain_id() == 0
    for bad, message in (("forty", "'forty' is not a whole number"), ("300", "300 is outside 0-232")):
        monkeypatch.setenv("ROS_DOMAIN_ID", bad)
        with pytest.raises(ValueError, match=f"ROS_DOMAIN_ID: {message}"):
            ros_domain_id()
