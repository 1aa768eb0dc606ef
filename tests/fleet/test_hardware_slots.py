"""Hardware slots: a FakeRobot joins the fleet beside sim workers; rewind replays its commands backwards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.fleet.test_fleet import fleet_config, tick_until
from vla_recover.data import EpisodeStore
from vla_recover.fleet import FleetManager, SlotState
from vla_recover.fleet.robot_backend import RobotWorker
from vla_recover.hardware.robot import FakeRobot, RobotError
from vla_recover.teleop.devices import ScriptedDevice


def test_fake_robot_clips_to_its_workspace_and_reports_what_it_sent() -> None:
    with FakeRobot(workspace=0.3) as robot:
        robot.home()
        sent = robot.send_action(np.array([0.0, 0.0, 9.0, 0.0, 1.0]))
        assert sent[2] == pytest.approx(1.0)  # clipped to [-1, 1]
        for _ in range(10):
            robot.send_action(np.array([0.0, 0.0, 1.0, 0.0, 1.0]))
        assert robot.get_observation()["state"][2] == pytest.approx(0.3)  # held at the workspace bound
        assert robot.send_action(np.array([0.0, 0.0, 1.0, 0.0, 1.0]))[2] == pytest.approx(0.0)
        with pytest.raises(RobotError, match="5 finite numbers"):
            robot.send_action(np.array([np.nan, 0, 0, 0, 0]))
    with pytest.raises(RobotError, match="not connected"):
        robot.get_observation()


def test_rewind_on_a_robot_replays_its_commands_backwards() -> None:
    worker = RobotWorker(FakeRobot(), "fake00", horizon=50)
    worker.call("reset", 0)
    for action in ([1.0, 0, 0, 0.5, -1], [0, 1.0, 0, 0, -1], [0, 0, -1.0, 0, 1]):
        worker.call("step", np.array(action))
    back, _ = worker.call("rewind_to", 1)
    after_first = np.array([*FakeRobot.HOME]) + np.array([0.02, 0, 0])
    np.testing.assert_allclose(back["state"][:3], after_first, atol=1e-9)
    with pytest.raises(ValueError, match="no scripted expert"):
        worker.call("step", None)


def test_fake_robots_join_the_fleet_beside_sim_workers(tmp_path: Path) -> None:
    config = fleet_config(tmp_path, robots=1, fake_robots=1, episodes=2, task_config={"horizon": 20})
    fleet = FleetManager(config)
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["fake00"].state is SlotState.AUTONOMOUS)
        for _ in range(3):
            fleet.tick()
        lease = fleet.grant_takeover("fake00", "alice", ScriptedDevice(lambda obs: np.array([0.5, 0, 0, 0, -1.0])))
        for _ in range(4):
            fleet.tick()
        assert fleet.rewind("fake00", lease.token, steps=2) == 2
        fleet.release_takeover("fake00", lease.token)
        tick_until(fleet, lambda: fleet.finished)
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:
        robots = {r.robot: r for r in store.episodes()}
        assert set(robots) == {"sim00", "fake00"}
        kinds = [s.kind for s in store.segments(episode=robots["fake00"].id)]
        assert kinds == ["autonomous", "intervention", "rewind", "autonomous"]
