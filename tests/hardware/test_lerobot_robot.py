"""The LeRobot robot adapter: named features become our vectors; built by LeRobot's own registry where present."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import pytest

from vla_recover.hardware.lerobot_robot import LeRobotRobot
from vla_recover.hardware.robot import RobotError


class FakeFollower:
    """LeRobot's robot shape: named float joints, a camera, and send_action clipping like max_relative_target."""

    observation_features: ClassVar[dict[str, Any]] = {"pan.pos": float, "lift.pos": float, "front": (4, 5, 3)}
    action_features: ClassVar[dict[str, Any]] = {"pan.pos": float, "lift.pos": float}

    def __init__(self) -> None:
        self.is_connected = False
        self.joints = {"pan.pos": 0.0, "lift.pos": 10.0}

    def connect(self) -> None:
        self.is_connected = True

    def disconnect(self) -> None:
        self.is_connected = False

    def get_observation(self) -> dict[str, Any]:
        return {**self.joints, "front": np.full((4, 5, 3), 7, np.uint8)}

    def send_action(self, action: dict[str, float]) -> dict[str, float]:
        sent = {k: float(np.clip(v, self.joints[k] - 5.0, self.joints[k] + 5.0)) for k, v in action.items()}
        self.joints.update(sent)
        return sent


def test_named_features_become_vectors_and_the_sent_action_comes_back() -> None:
    robot = LeRobotRobot(FakeFollower(), name="follower")
    assert robot.observation_features == {"state": (2,), "images.front": (4, 5, 3)}
    assert robot.action_features == {"action": (2,)}
    with pytest.raises(RobotError, match="follower: not connected"):
        robot.get_observation()
    with robot:
        observation = robot.get_observation()
        np.testing.assert_array_equal(observation["state"], [0.0, 10.0])
        assert observation["images.front"].shape == (4, 5, 3)
        np.testing.assert_array_equal(robot.send_action(np.array([2.0, 30.0])), [2.0, 15.0])  # LeRobot clipped it
        with pytest.raises(RobotError, match="2 finite numbers"):
            robot.send_action(np.array([np.nan, 0.0]))


inside = pytest.mark.skipif(
    os.environ.get("VLA_RECOVER_INSIDE_LEROBOT") != "1", reason="runs inside .venv-lerobot (test_lerobot_adapter.py)"
)


@inside
def test_inside_lerobot_follower_is_built_by_lerobot_and_fails_cleanly_without_hardware() -> None:
    robot = LeRobotRobot.from_lerobot("so101_follower", port="/dev/ttyNOSUCHPORT", max_relative_target=5.0)
    assert robot.observation_features == {"state": (6,)} and robot.action_keys[0] == "shoulder_pan.pos"
    with pytest.raises(RobotError, match="cannot connect"):
        robot.connect()
    with pytest.raises(ValueError, match="no robot 'so999_follower'"):
        LeRobotRobot.from_lerobot("so999_follower", port="/dev/null")
