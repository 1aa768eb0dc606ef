"""Input devices: the terminal keyboard through a real pseudo-terminal, and the scripted device."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vla_recover.teleop.devices import DeviceDisconnected, KeyboardDevice, ScriptedDevice


def test_keyboard_maps_keys_to_end_effector_deltas_through_a_pty() -> None:
    master, slave = os.openpty()
    with os.fdopen(slave, "r") as stream:
        device = KeyboardDevice(speed=0.5, stream=stream)
        try:
            assert device.read({}) is None  # no key: no command, the robot holds
            os.write(master, b"w")
            np.testing.assert_allclose(device.read({}), [0.5, 0, 0, 0, -1.0])
            os.write(master, b"d ")  # -y and toggle the gripper closed
            np.testing.assert_allclose(device.read({}), [0, -0.5, 0, 0, 1.0])
            os.write(master, b"\x1b")
            with pytest.raises(DeviceDisconnected, match="Esc"):
                device.read({})
        finally:
            device.close()
    os.close(master)


def test_keyboard_refuses_a_non_terminal(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with open(tmp_path / "not_a_tty", "w+") as stream, pytest.raises(DeviceDisconnected, match="not a terminal"):
        KeyboardDevice(stream=stream)


def test_scripted_device_plays_then_disconnects() -> None:
    device = ScriptedDevice([np.ones(5), None], disconnect_after=2)
    np.testing.assert_array_equal(device.read({}), np.ones(5))
    assert device.read({}) is None
    with pytest.raises(DeviceDisconnected):
        device.read({})
