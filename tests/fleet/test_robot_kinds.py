"""Robots by kind: a fleet config lists its robots (sim, fake, ros2, lerobot:<type>), every hardware slot stands
behind its safety filter, and a robot without the task's features is refused at start."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from tests.fleet.test_fleet import fleet_config, tick_until
from vla_recover.config import ConfigError
from vla_recover.data import EpisodeStore
from vla_recover.fleet import FleetManager, SlotState
from vla_recover.fleet.robot_backend import RobotWorker
from vla_recover.fleet.robots import ROBOTS, RobotFeatureError
from vla_recover.hardware.robot import FakeRobot, Robot, RobotError
from vla_recover.hardware.safety import SafeRobot, SafetyConfig
from vla_recover.teleop.kinds import make_device
from vla_recover.teleop.lease import LeaseError

JOINT_SAFETY = {"command": "joint_position", "low": [-1.0] * 5, "high": [1.0] * 5}


def test_a_fleet_lists_its_robots_by_kind_and_names_them(tmp_path: Path) -> None:
    robots = [{"kind": "sim", "count": 1}, {"kind": "fake", "name": "bench_arm"}, {"kind": "fake", "count": 2}]
    config = fleet_config(tmp_path, robots=robots, episodes=4, task_config={"horizon": 15})
    FleetManager(config).run()
    with EpisodeStore(tmp_path / "store") as store:
        assert {row.robot for row in store.episodes()} <= {"sim00", "bench_arm", "fake00", "fake01"}
        assert len(store) >= 4
    # the older shorthand is the same fleet as its list
    shorthand = fleet_config(tmp_path, robots=1, fake_robots=2)
    assert [(c.kind, c.count) for c in shorthand.robot_configs()] == [("sim", 1), ("fake", 2)]


@pytest.mark.parametrize(
    ("robots", "extra", "message"),
    [
        (
            [{"kind": "ur5"}],
            {},
            r"robots\[0\]\.kind: unknown robot kind 'ur5'; valid choices: fake, lerobot, ros2, sim",
        ),
        ([{"kind": "sim"}], {"fake_robots": 1}, r"fake_robots: got 1 beside a robots list; list them there"),
        ([{"kind": "fake", "name": "a"}, {"kind": "fake", "name": "a"}], {}, r"the names \['a'\] are given to more"),
        ([{"kind": "sim:PickPlaceBin"}], {}, r"robots\[0\]\.kind: sim:PickPlaceBin in a fleet of LiftCube"),
        ([{"kind": "ros2", "name": "arm", "joint_names": ["j1"]}], {}, r"robots\[0\]\.safety"),
        ([{"kind": "fake", "count": 0}], {}, r"robots\[0\]\.count"),
        ([{"kind": "ros2", "name": "arm", "safety": {}}], {}, r"robots\[0\].*joint_names: needed for joint_trajectory"),
        (
            [
                {
                    "kind": "ros2",
                    "name": "arm",
                    "safety": {},
                    "command_type": "float64_multi_array",
                    "observation": {"state": [{"topic": "/arm/poses", "type": "float_array"}]},
                }
            ],
            {},
            r"robots\[0\]\.observation\.state\.0.*shape: /arm/poses needs its shape",
        ),
        (
            [
                {
                    "kind": "ros2",
                    "name": "arm",
                    "safety": {},
                    "command_type": "float64_multi_array",
                    "observation": {"images.front": [{"topic": "/arm/cam", "type": "image", "shape": [8, 8]}]},
                }
            ],
            {},
            r"shape: an image is \[height, width, 3\], got \[8, 8\]",
        ),
        ([{"kind": "fake:big"}], {}, r"a fake robot takes no ':<variant>'"),
        (["fake"], {}, r"robots\[0\]: expected a mapping with a kind, got 'fake'"),
        ([], {}, r"robots: a fleet needs at least one robot"),
    ],
)
def test_a_bad_robots_entry_is_refused_naming_the_field(
    tmp_path: Path, robots: list[Any], extra: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        fleet_config(tmp_path, robots=robots, **extra)


def test_a_robot_without_the_tasks_features_is_refused_at_start_and_nothing_is_left_running(tmp_path: Path) -> None:
    arm = {"kind": "ros2", "name": "arm_left", "joint_names": [f"j{i}" for i in range(5)], "safety": JOINT_SAFETY}
    config = fleet_config(tmp_path, robots=[{"kind": "sim", "count": 1}, arm])
    before = set(mp.active_children())
    with pytest.raises(RobotFeatureError, match=r"robot 'arm_left' \(ros2\): observation feature 'state' has shape"):
        FleetManager(config)
    assert set(mp.active_children()) <= before  # the sim worker started before the arm was refused is gone


def test_a_lerobot_arm_where_lerobot_is_missing_is_refused_saying_how_to_install_it(tmp_path: Path) -> None:
    arm = {"kind": "lerobot:so101_follower", "port": "/dev/null", "safety": JOINT_SAFETY}
    config = fleet_config(tmp_path, robots=[arm])
    assert config.robot_configs()[0].type == "so101_follower"  # type: ignore[attr-defined]
    with pytest.raises(RobotError, match="LeRobot"):
        FleetManager(config)


def test_a_fake_arm_in_the_fleet_stays_inside_its_safety_workspace_and_the_filter_reports_once(
    tmp_path: Path,
) -> None:
    box = {"low": [-0.4, -0.4, 0.0], "high": [0.4, 0.4, 0.27]}  # home is z = 0.25: 1 step of 0.02 m of room
    arm = {"kind": "fake", "name": "arm", "safety": {"workspace": box, "watchdog_s": 30.0}}
    fleet = FleetManager(fleet_config(tmp_path, robots=[arm], episodes=1, task_config={"horizon": 30}))
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["arm"].state is SlotState.AUTONOMOUS)
        up = make_device("scripted", {"actions": [[0.0, 0.0, 1.0, 0.0, -1.0]] * 12})
        lease = fleet.grant_takeover("arm", "alice", up)
        heights = []
        for _ in range(12):
            fleet.tick()
            heights.append(float(fleet.slots["arm"].obs["state"][2]))
        actors = [row["actor"] for row in fleet.slots["arm"].attempt.rows[-12:]]  # type: ignore[union-attr]
        assert actors[0] == "human" and set(actors[2:]) == {"safety"}  # clipped rows are not what alice chose
        fleet.release_takeover("arm", lease.token)
    finally:
        fleet.close()
    assert max(heights) == pytest.approx(0.27, abs=1e-6)
    with EpisodeStore(tmp_path / "store") as store:
        reports = [e for e in store.events(robot="arm") if e.kind == "safety_interventions"]
    assert reports and sum(r.payload["interventions"]["clipped"]["count"] for r in reports) >= 10
    assert len(reports) <= 3  # one summary a sim-second, not one event a command


class _JointArm(Robot):
    """Absolute joint commands, recorded as they arrive; the joints go where they are sent."""

    def __init__(self, start: list[float] | None = None, home_position: list[float] | None = None) -> None:
        self.received: list[list[float]] = []
        self.position = np.asarray(start or [0.0, 0.0])
        self.home_position = home_position
        self._connected = False

    observation_features = property(lambda self: {"state": (2,)})
    action_features = property(lambda self: {"action": (2,)})
    is_connected = property(lambda self: self._connected)

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def get_observation(self) -> dict[str, np.ndarray]:
        return {"state": self.position.astype(np.float32)}

    def send_action(self, action: np.ndarray) -> np.ndarray:
        self.received.append(np.asarray(action).tolist())
        self.position = np.asarray(action, np.float64)
        return self.position.copy()

    def home(self) -> dict[str, np.ndarray]:  # the driver's own homing: stays put (a jump would send nothing)
        return self.get_observation()


def test_a_rewind_of_an_arm_with_absolute_commands_replays_its_positions_backwards() -> None:
    arm = _JointArm()
    worker = RobotWorker(arm, "joints", horizon=50, command="joint_position")
    worker.call("reset", 0)
    for position in ([0.1, 0.0], [0.2, 0.1], [0.3, 0.2]):
        worker.call("step", np.array(position))
    arm.received.clear()
    worker.call("rewind_to", 1)
    assert arm.received == [[0.2, 0.1], [0.1, 0.0]]  # back through where it was, to where step 1 left it
    with pytest.raises(ValueError, match="cannot retrace its first step"):
        worker.call("rewind_to", 0)


def test_every_robot_kind_names_its_config_and_slot_factory() -> None:
    assert ROBOTS.names() == ["fake", "lerobot", "ros2", "sim"]
    for entry in ROBOTS:
        assert callable(entry.load()) and entry.config_cls.model_fields["kind"].default == entry.name


def test_homing_an_arm_with_absolute_commands_follows_a_trajectory_within_its_limits() -> None:
    arm = _JointArm(start=[0.9, -0.9], home_position=[0.0, 0.0])
    limits = {"command": "joint_position", "low": [-1.0, -1.0], "high": [1.0, 1.0], "max_relative_target": 0.1}
    with SafeRobot(arm, SafetyConfig(**limits, control_hz=500.0, watchdog_s=30.0)) as safe:
        safe.home()
    path = [[0.9, -0.9], *arm.received]
    steps = np.abs(np.diff(np.asarray(path), axis=0))
    assert len(arm.received) >= 9 and steps.max() <= 0.1 + 1e-6  # nine bounded steps, not one jump
    np.testing.assert_allclose(arm.position, [0.0, 0.0], atol=1e-3)


def test_the_fleets_estop_latches_a_hardware_slots_safety_filter(tmp_path: Path) -> None:
    fleet = FleetManager(fleet_config(tmp_path, robots=[{"kind": "fake", "name": "arm"}], task_config={"horizon": 30}))
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["arm"].state is SlotState.AUTONOMOUS)
        safe = fleet.slots["arm"].worker.robot  # type: ignore[attr-defined]
        fleet.estop("floor")  # E-STOP ALL
        assert safe.filter.estopped and fleet.slots["arm"].state is SlotState.ESTOPPED
        assert np.allclose(safe.send_action(np.array([1.0, 0, 0, 0, 1.0]))[:4], 0.0)  # latched: every command holds
        fleet.clear_estop("arm", "floor")
        assert not safe.filter.estopped
    finally:
        fleet.close()


class _RecordingFake(FakeRobot):
    """A fake arm that keeps every command it receives."""

    received: ClassVar[list[np.ndarray]] = []

    def send_action(self, action: np.ndarray) -> np.ndarray:
        _RecordingFake.received.append(np.asarray(action, np.float64).copy())
        return super().send_action(action)


def test_no_command_from_a_device_the_console_or_a_policy_reaches_an_arm_outside_its_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("vla_recover.fleet.backends.FakeRobot", _RecordingFake)
    _RecordingFake.received = []
    safety = {"low": [-0.5] * 5, "high": [0.5] * 5, "max_velocity": 4.0, "control_hz": 20.0, "watchdog_s": 30.0}
    step = 4.0 / 20.0
    rng = np.random.default_rng(0)
    wild = rng.normal(0.0, 3.0, size=(60, 5))
    wild[rng.random(60) < 0.1] = np.nan
    wild[rng.random(60) < 0.05] = np.inf
    config = fleet_config(
        tmp_path,
        robots=[{"kind": "fake", "name": "arm", "safety": safety}],
        constant_action=[1.4, -1.4, 0.9, 0.0, 1.0],  # the policy overshoots: clipped to [-1, 1], then to the limits
        policy_action_tolerance=0.5,
        task_config={"horizon": 200},
    )
    fleet = FleetManager(config)
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["arm"].state is SlotState.AUTONOMOUS)
        for _ in range(10):
            fleet.tick()
        lease = fleet.grant_takeover("arm", "alice", make_device("scripted", {"actions": wild[:30].tolist()}))
        for _ in range(30):
            fleet.tick()
        fleet.release_takeover("arm", lease.token)
        lease = fleet.grant_takeover("arm", "bob", make_device("remote"))
        for action in wild[30:]:
            with contextlib.suppress(ValueError):  # refused out of range or NaN: the sender hears why
                fleet.command("arm", lease.token, action)
            fleet.tick()
    finally:
        fleet.close()
    received = np.asarray(_RecordingFake.received)
    assert len(received) >= 60 and np.all(np.isfinite(received))
    assert np.all(received >= -0.5 - 1e-9) and np.all(received <= 0.5 + 1e-9)
    assert np.all(np.abs(np.diff(received, axis=0)) <= step + 1e-9)
    # each command was checked once, by the arm's filter: the policy's overshoot and the device's NaN reached it as
    # sent (the gate refused none), and its clips and rejections are the fleet's counts
    with EpisodeStore(tmp_path / "store") as store:
        events = store.events(robot="arm")
    reports = [e.payload["interventions"] for e in events if e.kind == "safety_interventions"]
    assert not [e for e in events if e.kind == "action_rejected" and e.actor != "human"]  # remote: input checks
    assert fleet.ledger.clipped_actions == sum(r.get("clipped", {}).get("count", 0) for r in reports) > 0
    assert fleet.ledger.rejected_actions >= sum(r.get("rejected", {}).get("count", 0) for r in reports) > 0


def test_an_arm_stays_resetting_until_the_floor_operator_confirms_its_scene_is_reset(tmp_path: Path) -> None:
    arm = {"kind": "fake", "name": "arm", "operator_resets": True}
    fleet = FleetManager(fleet_config(tmp_path, robots=[arm], episodes=2, task_config={"horizon": 5}))
    slot = fleet.slots["arm"]
    fleet.start()
    try:
        tick_until(fleet, lambda: slot.awaiting_reset)  # homed at start; the scene is set up by a person
        for _ in range(5):
            fleet.tick()
        assert slot.state is SlotState.RESETTING and slot.waiting_for_human
        fleet.confirm_reset("arm", "frank")
        tick_until(fleet, lambda: slot.state is SlotState.AUTONOMOUS)
        with pytest.raises(LeaseError, match="robot arm: no reset to confirm"):
            fleet.confirm_reset("arm", "frank")
        tick_until(fleet, lambda: slot.awaiting_reset)  # its episode ended and it homed: waiting again
        fleet.confirm_reset("arm", "frank")
        tick_until(fleet, lambda: fleet.finished)
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:
        kinds = [(e.kind, e.actor) for e in store.events(robot="arm") if e.kind.startswith("reset_")]
    assert kinds[:4] == [("reset_awaiting_operator", "fleet"), ("reset_confirmed", "frank")] * 2


def test_a_simulated_floor_operator_resets_an_arms_scene_and_its_time_is_charged(tmp_path: Path) -> None:
    from vla_recover.fleet import build_fleet

    arm = {"kind": "fake", "name": "arm", "operator_resets": True}
    config = fleet_config(tmp_path, robots=[arm], episodes=3, task_config={"horizon": 5},
                          floor_operator={"enabled": True, "resets": "automatic", "reset_s": 2.0})  # fmt: skip
    summary = build_fleet(config).run()
    assert summary["episodes"] == 3
    assert summary["operator_s"]["floor"] == pytest.approx(2.0 * 3, abs=2.0 + 1e-9)  # one reset a start or more
    with EpisodeStore(tmp_path / "store") as store:
        confirmed = [e.actor for e in store.events(robot="arm", kind="reset_confirmed")]
    assert len(confirmed) >= 3 and set(confirmed) == {"floor-1"}
