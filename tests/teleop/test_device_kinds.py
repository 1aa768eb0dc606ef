"""Teleop devices by kind: one registry names every device, and a bad kind or setting is refused naming it."""

from __future__ import annotations

import numpy as np
import pytest

from vla_recover.config import NestedConfigError
from vla_recover.registry import UnknownNameError
from vla_recover.teleop.devices import DeviceDisconnected, RemoteDevice, SimExpertDevice
from vla_recover.teleop.kinds import DEVICES, make_device


def test_every_device_kind_is_registered() -> None:
    assert DEVICES.names() == ["gamepad", "keyboard", "leader_arm", "remote", "scripted", "sim_expert", "spacemouse"]


def test_a_device_is_built_by_kind_with_its_settings() -> None:
    assert isinstance(make_device("remote", {"timeout_ticks": 3}), RemoteDevice)
    assert make_device("sim_expert").uses_sim_expert and isinstance(make_device("sim_expert"), SimExpertDevice)
    scripted = make_device("scripted", {"actions": [[0.5, 0, 0, 0, 1]], "disconnect_after": 1})
    np.testing.assert_allclose(scripted.read({}), [0.5, 0, 0, 0, 1])
    with pytest.raises(DeviceDisconnected):
        scripted.read({})


@pytest.mark.parametrize(
    ("kind", "settings", "error", "message"),
    [
        ("joystick", {}, UnknownNameError, "unknown teleop device 'joystick'; valid choices: gamepad, keyboard"),
        ("remote", {"timeout_ticks": 0}, NestedConfigError, r"device\.timeout_ticks"),
        ("remote", {"speed": 1.0}, NestedConfigError, r"device\.speed"),
        ("gamepad:xbox", {}, ValueError, r"only lerobot:<type> takes a ':<type>'"),
        ("lerobot:so101_leader", {}, NestedConfigError, r"device\.port"),
    ],
)
def test_a_bad_kind_or_setting_is_refused_naming_it(
    kind: str, settings: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make_device(kind, settings)


def test_a_lerobot_leader_arm_without_lerobot_says_how_to_install_it() -> None:
    try:
        import lerobot  # noqa: F401
    except ImportError:
        with pytest.raises(DeviceDisconnected, match="install_lerobot_venv"):
            make_device("lerobot:so101_leader", {"port": "/dev/null"})
    else:
        pytest.skip("LeRobot is installed here: its own venv's tests drive the leader arm")
