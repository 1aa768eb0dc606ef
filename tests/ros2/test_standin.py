"""The stand-in arm (a MuJoCo task on a ROS 2 graph, in its own process) as a fleet's `ros2` robot beside sim and
fake robots: a policy drives all three, a takeover and a rewind reach it, and its dropped, stalled and malformed
messages each end in a hold and an event, never a crash or a lost episode."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

pytest.importorskip("cyclonedds")

from tests.fleet.test_fleet import fleet_config, tick_until
from vla_recover.console.runner import fleet_snapshot
from vla_recover.data import EpisodeStore
from vla_recover.data.schema import ACTORS
from vla_recover.fleet import FleetManager, SlotState
from vla_recover.ros2 import idl
from vla_recover.ros2.transport import DdsTransport
from vla_recover.teleop.kinds import make_device

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = ROOT / "tests" / "fixtures" / "ros2" / "cyclonedds-loopback.xml"


def start_standin(namespace: str, *options: str) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    """The CLI's stand-in arm on ``namespace``, and the fleet entry it prints (read up to its 'up' comment)."""
    command = [sys.executable, "-m", "vla_recover.cli.main", "ros2", "standin", "--dds-config", str(LOOPBACK),
               "--namespace", namespace, "--name", namespace.strip("/"), "--seconds", "300", *options]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    lines: list[str] = []
    while not lines or not lines[-1].startswith("# stand-in arm up"):
        line = process.stdout.readline()
        if not line:
            process.kill()
            raise AssertionError(f"the stand-in exited: {process.stderr.read() if process.stderr else ''}")
        lines.append(line)
    return process, yaml.safe_load("".join(lines))["robots"][0]


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture
def standin() -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    process, entry = start_standin("/arm")
    try:
        yield process, entry
    finally:
        stop(process)


def _tick_for(fleet: FleetManager, seconds: float) -> None:
    """Tick at about the control rate, as the console's runner does, so a fault's seconds pass in few steps."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        fleet.tick()
        time.sleep(fleet.dt)


def test_a_fleet_of_sim_fake_and_ros2_arms_runs_a_policy_takes_over_the_arm_and_survives_its_faults(
    tmp_path: Path, standin: tuple[subprocess.Popen[str], dict[str, Any]]
) -> None:
    process, arm = standin
    arm["safety"].update(watchdog_s=0.2, workspace={"low": [-0.3, -0.3, 0.0], "high": [0.3, 0.3, 0.4]})
    robots = [{"kind": "sim"}, {"kind": "fake"}, arm]
    fleet = FleetManager(fleet_config(tmp_path, robots=robots, episodes=3, task_config={"horizon": 120}))
    faults = DdsTransport(config=LOOPBACK)
    inject = faults.publisher("/arm/fault", idl.String)
    status: list[dict[str, Any]] = []
    faults.subscribe("/arm/status", idl.String, lambda m: status.append(json.loads(m.data)))
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["arm"].awaiting_reset)  # home; a person sets the scene up
        fleet.confirm_reset("arm", "frank")
        tick_until(fleet, lambda: fleet.slots["arm"].state is SlotState.AUTONOMOUS)
        snapshot = json.loads(json.dumps(fleet_snapshot(fleet), allow_nan=False))  # what the console serves
        shown = {card["robot"]: card for card in snapshot["robots"]}
        assert set(shown) == {"sim00", "fake00", "arm"} and len(shown["arm"]["robot_state"]) == 19
        for _ in range(5):
            fleet.tick()
        safety = fleet.slots["arm"].worker.robot.filter  # type: ignore[attr-defined]  # the arm's safety filter
        stalled = ({"kind": "stall", "seconds": 0.5}, {"kind": "drop", "count": 8})
        for fault in (*stalled, *({"kind": kind, "count": 3} for kind in ("nan", "out_of_range", "short"))):
            held = safety.counts["watchdog_hold"]
            inject(idl.String(json.dumps(fault)))
            _tick_for(fleet, 0.8 if fault in stalled else 0.4)
            assert safety.counts["watchdog_hold"] > held, f"{fault} did not hold the arm"
            assert fleet.slots["arm"].state is SlotState.AUTONOMOUS  # the episode goes on
        lease = fleet.grant_takeover("arm", "alice", make_device("scripted", {"actions": [[0.5, 0, 0, 0, -1.0]] * 6}))
        for _ in range(4):
            fleet.tick()
        assert fleet.rewind("arm", lease.token, steps=2) == 2
        fleet.release_takeover("arm", lease.token)
        tick_until(fleet, lambda: fleet.finished, limit=2000)
        tick_until(fleet, lambda: fleet.slots["arm"].awaiting_reset)  # its episode over, home, waiting for a person
        (card,) = [c for c in fleet_snapshot(fleet)["robots"] if c["robot"] == "arm"]
        assert card["state"] == "resetting" and "reset_the_scene" in card["alerts"]
    finally:
        fleet.close()
        faults.close()
    assert process.poll() is None  # the arm's process served throughout
    assert status and max(s["commands"] for s in status) >= 60  # it stepped on the fleet's commands
    with EpisodeStore(tmp_path / "store") as store:
        assert {e.robot for e in store.episodes()} == {"sim00", "fake00", "arm"}
        (episode,) = store.episodes(robot="arm")
        kinds = [s.kind for s in store.segments(episode=episode.id)]
        assert "intervention" in kinds and "rewind" in kinds
        actors = {ACTORS[a] for a in store.episode(episode.id)["actor"]}
        reports = [e.payload["interventions"] for e in store.events(robot="arm") if e.kind == "safety_interventions"]
    assert {"policy", "human", "safety"} <= actors  # the held steps are recorded as the filter's, not the policy's
    seen = {kind: sum(r.get(kind, {}).get("count", 0) for r in reports) for kind in
            ("watchdog_hold", "message_rejected", "observation_rejected")}  # fmt: skip
    assert all(count > 0 for count in seen.values()), seen
    rejected = " ".join(r["message_rejected"]["first"] for r in reports if "message_rejected" in r)
    assert "non-finite" in rejected or "missing" in rejected


def test_the_stand_in_publishes_its_cameras_and_the_ros2_kind_reads_them_as_image_features() -> None:
    from vla_recover.ros2.arm import Ros2Arm
    from vla_recover.ros2.features import TopicSource

    process, entry = start_standin("/cam_arm", "--camera", "front", "--image-size", "32")
    try:
        observation = {
            key: [TopicSource.model_validate(s) for s in sources] for key, sources in entry["observation"].items()
        }
        arm = Ros2Arm(lambda: DdsTransport(config=LOOPBACK), [], command_topic=entry["topics"]["command"],
                      command_type="float64_multi_array", observation=observation, action_size=5)  # fmt: skip
        assert arm.observation_features == {"state": (19,), "images.front": (32, 32, 3)}
        with arm:
            before = arm.get_observation()
            arm.send_action(np.array([0.0, 0.0, -1.0, 0.0, -1.0]))
            after = arm.get_observation()
        assert before["images.front"].dtype == np.uint8 and before["images.front"].std() > 0  # a rendered scene
        assert after["state"][2] < before["state"][2]  # the command moved the arm down, in the next observation
    finally:
        stop(process)
