"""SimRobot: a task behind the Robot interface; with the safety filter in front, the whole deployment path in sim."""

from __future__ import annotations

import numpy as np
import pytest

from vla_recover.config import validate_config
from vla_recover.envs import make_expert
from vla_recover.hardware.robot import RobotError
from vla_recover.hardware.safety import SafeRobot, SafetyConfig
from vla_recover.hardware.sim_robot import SimRobot


def test_features_are_known_before_connecting_and_use_needs_a_connection() -> None:
    robot = SimRobot("LiftCube", seed=3)
    assert robot.observation_features == {"state": (19,)} and robot.action_features == {"action": (5,)}
    with pytest.raises(RobotError, match="sim0: not connected"):
        robot.get_observation()
    with robot:
        with pytest.raises(RobotError, match="5 finite numbers"):
            robot.send_action(np.array([np.nan, 0, 0, 0, 0]))
        np.testing.assert_array_equal(robot.send_action(np.array([3.0, 0, 0, 0, -1])), [1.0, 0, 0, 0, -1])
    assert not robot.is_connected


def test_the_scripted_expert_lifts_the_cube_through_the_safety_filter() -> None:
    sim = SimRobot("LiftCube", seed=5)
    safety = validate_config(
        SafetyConfig, {"watchdog_s": 5.0, "workspace": {"low": [-0.4, -0.4, 0.0], "high": [0.4, 0.4, 0.5]}}
    )
    robot = SafeRobot(sim, safety)
    with robot:
        expert = make_expert("LiftCube", sim._env, seed=6)
        for _ in range(120):
            robot.send_action(expert())
            robot.get_observation()
            if sim.info.get("is_success"):
                break
    assert sim.info["is_success"], sim.info
    assert robot.filter.counts["rejected"] == 0 and robot.filter.counts["watchdog_hold"] == 0
