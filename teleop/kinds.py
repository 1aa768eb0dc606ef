"""Teleoperation devices by kind: ``DEVICES`` maps each kind to its config class and its device, so a config (or the
console) names a device the way it names a task or a policy.

Kinds: ``keyboard``, ``gamepad``, ``spacemouse``, ``leader_arm`` (a LeRobot leader arm, also written
``lerobot:<type>``, where LeRobot is installed), ``remote`` (commands pushed from the console or a network client),
``scripted`` (a fixed sequence of actions) and ``sim_expert`` (the sim worker's scripted expert: the simulated
teleoperator's hands). A new kind is a `TeleopDevice` subclass, its config class, and one ``DEVICES.register`` line.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from vla_recover.config import FrozenConfig, validate_nested
from vla_recover.registry import Registry
from vla_recover.teleop.devices import LeaderArmDevice, ScriptedDevice, TeleopDevice

__all__ = ["DEVICES", "DeviceConfig", "make_device"]


class DeviceConfig(FrozenConfig):
    """A device with no settings of its own."""


class KeyboardConfig(DeviceConfig):
    speed: float = Field(default=0.6, gt=0.0, le=1.0, description="action magnitude of one key press")


class GamepadConfig(DeviceConfig):
    deadzone: float = Field(default=0.1, ge=0.0, lt=1.0, description="stick travel ignored around the centre")
    speed: float = Field(default=1.0, gt=0.0, le=1.0, description="action magnitude at full stick")


class SpaceMouseConfig(DeviceConfig):
    speed: float = Field(default=1.0, gt=0.0, le=1.0, description="action magnitude at full deflection")


class LeaderArmConfig(DeviceConfig):
    type: str = Field(description="LeRobot's teleoperator type (lerobot:<type>), e.g. so101_leader")
    port: str = Field(description="the leader arm's serial port, e.g. /dev/ttyACM1")
    scale: float = Field(default=1.0, gt=0.0, le=100.0, description="joint motion to action")


class RemoteConfig(DeviceConfig):
    timeout_ticks: int = Field(
        default=40, ge=1, le=100_000, description="ticks without a pushed command before the device counts as lost"
    )


class ScriptedConfig(DeviceConfig):
    actions: list[list[float]] = Field(min_length=1, description="the actions to play, one a tick; then no input")
    disconnect_after: int | None = Field(default=None, ge=0, description="reads before it disconnects (drills)")


def _leader_arm(type: str, port: str, scale: float) -> LeaderArmDevice:
    return LeaderArmDevice.from_lerobot(type, port, scale)


def _scripted(actions: list[list[float]], disconnect_after: int | None) -> ScriptedDevice:
    return ScriptedDevice(actions, disconnect_after)


DEVICES: Registry[DeviceConfig] = Registry("teleop device")
DEVICES.register("keyboard", KeyboardConfig, "vla_recover.teleop.devices:KeyboardDevice", "a terminal's keys")
DEVICES.register("gamepad", GamepadConfig, "vla_recover.teleop.devices:GamepadDevice", "an SDL gamepad (pygame)")
DEVICES.register("spacemouse", SpaceMouseConfig, "vla_recover.teleop.devices:SpaceMouseDevice", "3Dconnexion")
DEVICES.register("leader_arm", LeaderArmConfig, "vla_recover.teleop.kinds:_leader_arm", "a LeRobot leader arm")
DEVICES.register("remote", RemoteConfig, "vla_recover.teleop.devices:RemoteDevice", "the console's commands")
DEVICES.register("scripted", ScriptedConfig, "vla_recover.teleop.kinds:_scripted", "a fixed action sequence")
DEVICES.register("sim_expert", DeviceConfig, "vla_recover.teleop.devices:SimExpertDevice", "the sim's expert")


def make_device(kind: str, settings: dict[str, Any] | None = None) -> TeleopDevice:
    """The device of ``kind`` (``lerobot:<type>`` is a leader arm of that type) with ``settings``, checked by its
    config class: an unknown kind's error lists the known ones, a bad setting names ``device.<field>``."""
    fields = dict(settings or {})
    name, _, variant = kind.partition(":")
    if name == "lerobot" and variant:
        name, fields = "leader_arm", {**fields, "type": variant}
    elif variant:
        raise ValueError(f"device: got {kind!r}; only lerobot:<type> takes a ':<type>'")
    entry = DEVICES.get(name)
    config = validate_nested(entry.config_cls, fields, "device")
    device: TeleopDevice = entry.load()(**config.model_dump())
    return device
