"""The LeRobot leader-arm device: joint deltas from any LeRobot-style teleoperator; built by LeRobot where present."""

from __future__ import annotations

import os
from typing import Any, ClassVar

import numpy as np
import pytest

from vla_recover.teleop.devices import DeviceDisconnected, LeaderArmDevice


class FakeLeader:
    action_features: ClassVar[dict[str, type]] = {"shoulder.pos": float, "elbow.pos": float}

    def __init__(self) -> None:
        self.positions = {"shoulder.pos": 0.0, "elbow.pos": 0.0}
        self.connected = False

    def connect(self) -> None:
        self.connected = True

    def get_action(self) -> dict[str, Any]:
        if not self.connected:
            raise ConnectionError("serial port closed")
        return dict(self.positions)

    def disconnect(self) -> None:
        self.connected = False


def test_leader_joint_motion_becomes_clipped_deltas() -> None:
    leader = FakeLeader()
    device = LeaderArmDevice(leader, scale=0.5)
    assert device.read({}) is None  # the first reading is the reference
    leader.positions = {"shoulder.pos": 1.0, "elbow.pos": -10.0}
    np.testing.assert_allclose(device.read({}), [0.5, -1.0])
    leader.disconnect()
    with pytest.raises(DeviceDisconnected, match="serial port closed"):
        device.read({})


inside = pytest.mark.skipif(
    os.environ.get("VLA_RECOVER_INSIDE_LEROBOT") != "1", reason="runs inside .venv-lerobot (test_lerobot_adapter.py)"
)


@inside
def test_inside_lerobot_leader_arm_is_built_by_lerobot_and_fails_cleanly_without_hardware() -> None:
    device = LeaderArmDevice.from_lerobot("so101_leader", port="/dev/ttyNOSUCHPORT", connect=False)
    assert device.joints[0] == "shoulder_pan.pos" and len(device.joints) == 6
    with pytest.raises(DeviceDisconnected, match="cannot connect"):
        device.connect()
    with pytest.raises(ValueError, match="no teleoperator 'so999_leader'"):
        LeaderArmDevice.from_lerobot("so999_leader", port="/dev/null")
