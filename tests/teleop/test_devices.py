"""Input devices: the terminal keyboard through a real pseudo-terminal, and the scripted device."""

from __future__ import annotations

import os

import numpy as np
import pytest

from vla_recover.teleop.devices import (
    DeviceDisconnected,
    GamepadDevice,
    KeyboardDevice,
    ScriptedDevice,
    SpaceMouseDevice,
)


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


class FakeJoystick:
    def __init__(self) -> None:
        self.axes = [0.0, 0.0, 0.0, 0.0]
        self.buttons = [0, 0]

    def get_numaxes(self) -> int:
        return 4

    def get_axis(self, i: int) -> float:
        return self.axes[i]

    def get_button(self, i: int) -> int:
        return self.buttons[i]


def test_gamepad_maps_sticks_and_buttons_with_a_deadzone() -> None:
    stick = FakeJoystick()
    device = GamepadDevice(stick, deadzone=0.1)
    stick.axes = [0.05, -1.0, 0.0, -0.55]  # left stick pushed forward (and noise), right stick half up
    stick.buttons = [1, 0]
    np.testing.assert_allclose(device.read({}), [1.0, 0.0, 0.5, 0.0, 1.0])
    stick.axes, stick.buttons = [0.0] * 4, [0, 1]
    np.testing.assert_allclose(device.read({}), [0, 0, 0, 0, -1.0])


class FakeHID:
    def __init__(self, reports: list[list[int]]) -> None:
        self.reports = reports

    def read(self, size: int, timeout_ms: int) -> list[int]:
        if self.reports and self.reports[0] == ["unplugged"]:
            raise OSError("read error")
        return self.reports.pop(0) if self.reports else []


def test_spacemouse_decodes_hid_reports() -> None:
    full = [350 & 0xFF, 350 >> 8]
    minus_full = [(65536 - 350) & 0xFF, (65536 - 350) >> 8]
    reports = [[1, *full, *minus_full, 0, 0], [2, 0, 0, 0, 0, *full], [3, 1]]
    device = SpaceMouseDevice(FakeHID(reports))
    np.testing.assert_allclose(device.read({}), [1.0, -1.0, 0.0, -1.0, 1.0])
    device.hid.reports = [["unplugged"]]
    with pytest.raises(DeviceDisconnected, match="spacemouse"):
        device.read({})
