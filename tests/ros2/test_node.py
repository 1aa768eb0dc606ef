"""The policy node against a fake arm in another process, over DDS on loopback: commands, watchdog, e-stop, bad
messages."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("cyclonedds")

from vla_recover.config import validate_config
from vla_recover.fleet.inference import PolicyChunks
from vla_recover.policies import build_policy
from vla_recover.policies.common.checkpoint import save_policy
from vla_recover.ros2 import idl
from vla_recover.ros2.node import NodeConfig, PolicyNode
from vla_recover.ros2.transport import DdsTransport

LOOPBACK = Path(__file__).resolve().parents[1] / "fixtures" / "ros2" / "cyclonedds-loopback.xml"
JOINTS = ["j1", "j2", "j3"]
WATCHDOG_S = 0.2


def _fake_arm(config: str, seconds: float) -> None:
    """Publishes JointState at 30 Hz for ``seconds``, moving to the first point of each trajectory it receives."""
    transport = DdsTransport(config=config)
    position = np.zeros(3)

    def on_command(message: idl.JointTrajectory) -> None:
        position[:] = message.points[0].positions

    transport.subscribe("/joint_trajectory", idl.JointTrajectory, on_command)
    publish = transport.publisher("/joint_states", idl.JointState, profile="sensor_data")
    publish_image = transport.publisher("/camera/front", idl.Image, profile="sensor_data")
    frame = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        header = idl.Header(idl.Time.from_ns(time.time_ns()), "")
        publish(idl.JointState(header, JOINTS, list(position), [], []))
        publish_image(idl.Image(header, 4, 6, "rgb8", 0, 18, frame.reshape(-1).tolist()))
        time.sleep(1 / 30)
    time.sleep(1.0)
    transport.close()


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    policy = build_policy("flow", {"down_dims": [32, 64], "action_horizon": 8, "action_exec": 4},
                          {"obs.state": (3,)}, 3)  # fmt: skip
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs.state": rng.uniform(-1, 1, (64, 3)), "action": rng.uniform(-0.3, 0.3, (64, 3))})
    return save_policy(policy, tmp_path_factory.mktemp("node") / "policy")


def wait_for(condition: Any, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_the_node_drives_a_fake_arm_and_stays_safe(policy_dir: Path) -> None:
    config = validate_config(NodeConfig, {
        "joint_names": JOINTS, "control_hz": 30, "diagnostics_period_s": 0.5,
        "camera_topics": {"obs.images.front": "/camera/front"},
        "safety": {"command": "joint_position", "low": [-0.5] * 3, "high": [0.5] * 3, "max_velocity": 2.0,
                   "max_relative_target": 0.2, "watchdog_s": WATCHDOG_S},
    })  # fmt: skip
    node = PolicyNode(config, PolicyChunks(policy_dir), DdsTransport(config=LOOPBACK))
    probe = DdsTransport(config=LOOPBACK)  # the test's own view of the graph: what a ROS 2 peer would see
    commands: list[tuple[float, idl.JointTrajectory]] = []
    diagnostics: list[idl.DiagnosticArray] = []
    probe.subscribe("/joint_trajectory", idl.JointTrajectory, lambda m: commands.append((time.monotonic(), m)))
    probe.subscribe("/diagnostics", idl.DiagnosticArray, diagnostics.append)
    send_state = probe.publisher("/joint_states", idl.JointState, profile="sensor_data")
    estop = probe.publisher("/estop", idl.Bool)
    reset = probe.publisher("/estop_reset", idl.String)
    safety_events: list[tuple[float, str]] = []
    forward = node.safety.on_event

    def record(kind: str, payload: dict[str, Any]) -> None:
        safety_events.append((time.monotonic(), kind))
        if forward is not None:
            forward(kind, payload)

    node.safety.on_event = record
    arm = mp.get_context("spawn").Process(target=_fake_arm, args=(str(LOOPBACK), 3.0))
    node.start()
    arm.start()
    try:
        assert wait_for(lambda: len(commands) >= 20, 10), f"{len(commands)} commands"
        assert wait_for(lambda: "images.front" in node.images, 3)  # the camera stream arrives decoded
        np.testing.assert_array_equal(node.images["images.front"], np.arange(72, dtype=np.uint8).reshape(4, 6, 3))
        for _, message in commands:  # every point of every trajectory inside the joint limits
            positions = np.array([p.positions for p in message.points])
            assert np.all(np.abs(positions) <= 0.5 + 1e-9) and list(message.joint_names) == JOINTS
            offsets = [p.time_from_start.sec + p.time_from_start.nanosec / 1e9 for p in message.points]
            assert offsets == sorted(offsets) and offsets[0] == pytest.approx(1 / 30, abs=1e-6)

        # malformed joint states are rejected with a reason, and the node keeps going
        header = idl.Header(idl.Time(0, 0), "")
        send_state(idl.JointState(header, JOINTS, [0.0, float("nan"), 0.0], [], []))
        send_state(idl.JointState(header, ["j1", "j2"], [0.0, 0.0, 0.0], [], []))
        send_state(idl.JointState(header, ["a", "b", "c"], [0.0, 0.0, 0.0], [], []))
        assert wait_for(lambda: node.counts["rejected_joint_state"] >= 3, 3)
        count = len(commands)
        assert wait_for(lambda: len(commands) > count + 5, 3)

        # e-stop: latched, every command holds where the arm is, until someone clears it
        estop(idl.Bool(True))
        assert wait_for(lambda: node.safety.estopped, 3)
        latched_at = time.monotonic()
        assert wait_for(lambda: len([c for t, c in commands if t > latched_at + 0.1]) >= 5, 3)
        held = [np.array(c.points[0].positions) for t, c in commands if t > latched_at + 0.1]
        assert all(np.allclose(h, held[0], atol=1e-6) for h in held)
        estop(idl.Bool(False))  # false does not clear the latch
        time.sleep(0.2)
        assert node.safety.estopped
        reset(idl.String("alice"))
        assert wait_for(lambda: not node.safety.estopped, 3)

        # the arm stops publishing: the node holds within one watchdog period
        arm.join(10)
        stopped = node.last_state_time
        assert wait_for(lambda: node.safety.counts["watchdog_hold"] >= 1, 3)
        first_hold = min(t for t, kind in safety_events if kind == "watchdog_hold")
        assert stopped + WATCHDOG_S <= first_hold <= stopped + WATCHDOG_S + 2 / 30 + 0.05
    finally:
        node.stop()
        probe.close()
        if arm.is_alive():
            arm.kill()
    values = {kv.key: kv.value for kv in diagnostics[-1].status[0].values}
    assert float(values["inference_p50_ms"]) > 0 and int(values["rejected_joint_state"]) >= 3
    assert float(values["obs_to_command_p50_ms"]) > 0
    assert int(values["estop"]) == 1 and int(values["estop_cleared"]) == 1


def test_serve_checks_the_policy_fits_the_joints_and_runs(policy_dir: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vla_recover.cli.main import app

    runner = CliRunner()
    configs = Path(__file__).resolve().parents[2] / "configs" / "ros2"
    result = runner.invoke(app, ["ros2", "serve", "--policy", str(policy_dir), "--config", str(configs / "so101.yaml")])
    assert result.exit_code == 2 and "6 joints, but the policy reads a state of 3" in result.output, result.output
    three = tmp_path / "three.yaml"
    three.write_text("joint_names: [a, b, c]\nsafety: {command: joint_position, low: [-1, -1, -1], high: [1, 1, 1]}\n")
    args = ["ros2", "serve", "--policy", str(policy_dir), "--config", str(three), "--dds-config", str(LOOPBACK)]
    result = runner.invoke(app, [*args, "--seconds", "0.5"])
    assert result.exit_code == 0, result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("joint_names: [a]\nsafety: {command: ee_delta}\n")
    result = runner.invoke(app, ["ros2", "serve", "--policy", str(policy_dir), "--config", str(bad)])
    assert result.exit_code == 2 and "safety.command" in result.output


@pytest.mark.slow  # an arm process on a DDS graph with its faults played through: 10 s on two cores
def test_a_ros2_arm_is_a_robot_over_the_graph() -> None:
    from vla_recover.hardware.robot import RobotError
    from vla_recover.ros2.arm import Ros2Arm

    lonely = Ros2Arm(lambda: DdsTransport(config=LOOPBACK), JOINTS, joint_states_topic="/nobody", connect_timeout_s=0.3)
    with pytest.raises(RobotError, match=r"no usable message on /nobody within 0\.3 s"):
        lonely.connect()
    arm_process = mp.get_context("spawn").Process(target=_fake_arm, args=(str(LOOPBACK), 4.0))
    arm_process.start()
    arm = Ros2Arm(lambda: DdsTransport(config=LOOPBACK), JOINTS, connect_timeout_s=10.0)
    try:
        with arm:
            assert arm.observation_features == {"state": (3,)}
            np.testing.assert_array_equal(arm.send_action(np.array([0.1, 0.2, 0.3])), [0.1, 0.2, 0.3])
            assert wait_for(lambda: np.allclose(arm.get_observation()["state"], [0.1, 0.2, 0.3]), 3)
            with pytest.raises(RobotError, match="3 finite numbers"):
                arm.send_action(np.array([0.1, np.nan, 0.3]))
    finally:
        arm_process.join(10)
