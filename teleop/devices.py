"""Teleoperation input devices behind one interface.

A device turns what a person does into an action for the task's action space (end-effector deltas
``[dx, dy, dz, dyaw, grip]`` in [-1, 1] for the MJCF tasks). ``read`` returns the action for this control tick, or
None when there is no input (the robot holds), and raises :class:`DeviceDisconnected` when the device is gone
(the fleet puts the robot in a safe hold within the same tick).
"""

from __future__ import annotations

import abc
import contextlib
import os
import select
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import numpy as np

__all__ = [
    "DeviceDisconnected",
    "GamepadDevice",
    "KeyboardDevice",
    "LeaderArmDevice",
    "RemoteDevice",
    "ScriptedDevice",
    "SimExpertDevice",
    "SpaceMouseDevice",
    "TeleopDevice",
]


class DeviceDisconnected(ConnectionError):
    """The input device went away (unplugged, closed, timed out)."""


class TeleopDevice(abc.ABC):
    name: str = "device"
    uses_sim_expert = False  # True: the sim worker's scripted expert produces the action

    @abc.abstractmethod
    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        """The action for this tick, None for no input; raises DeviceDisconnected."""

    def close(self) -> None:  # noqa: B027 - most devices hold nothing
        pass


class SimExpertDevice(TeleopDevice):
    """The simulated teleoperator's hands: the task's scripted expert inside the sim worker acts."""

    name = "sim_expert"
    uses_sim_expert = True

    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        raise RuntimeError("SimExpertDevice is resolved by the sim worker; read() is never called on it")


class RemoteDevice(TeleopDevice):
    """Commands pushed from elsewhere (a web console, a network client) through the fleet's ``command`` call.

    Each pushed command is used once; with none pending the robot holds. ``timeout_ticks`` reads without a command
    count as a lost connection.
    """

    name = "remote"

    def __init__(self, timeout_ticks: int = 40) -> None:
        self.timeout_ticks = timeout_ticks
        self._pending: np.ndarray | None = None
        self._idle = 0

    def push(self, action: np.ndarray) -> None:
        self._pending = np.asarray(action, dtype=np.float64)

    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        action, self._pending = self._pending, None
        self._idle = 0 if action is not None else self._idle + 1
        if self._idle > self.timeout_ticks:
            raise DeviceDisconnected(f"remote: no command for {self.timeout_ticks} ticks")
        return action


class ScriptedDevice(TeleopDevice):
    """Plays actions from a sequence or a function of the observation; disconnects when told to (tests)."""

    name = "scripted"

    def __init__(
        self,
        actions: Iterable[np.ndarray | None] | Callable[[dict[str, np.ndarray]], np.ndarray | None],
        disconnect_after: int | None = None,
    ) -> None:
        self._source: Callable[[dict[str, np.ndarray]], np.ndarray | None]
        if callable(actions):
            self._source = actions
        else:
            iterator: Iterator[np.ndarray | None] = iter(actions)
            self._source = lambda _obs: next(iterator, None)
        self.disconnect_after = disconnect_after
        self.reads = 0

    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        if self.disconnect_after is not None and self.reads >= self.disconnect_after:
            raise DeviceDisconnected("scripted device: disconnected on purpose")
        self.reads += 1
        action = self._source(observation)
        return None if action is None else np.asarray(action, dtype=np.float64)


class KeyboardDevice(TeleopDevice):
    """Terminal keyboard: w/s ±x, a/d ±y, r/f ±z, q/e ±yaw, space toggles the gripper, Esc disconnects.

    Reads keys without blocking from a TTY in cbreak mode; each key press moves for one tick at ``speed``.
    """

    name = "keyboard"
    KEYS: ClassVar[dict[str, tuple[int, float]]] = {
        "w": (0, 1.0), "s": (0, -1.0), "a": (1, 1.0), "d": (1, -1.0),
        "r": (2, 1.0), "f": (2, -1.0), "q": (3, 1.0), "e": (3, -1.0),
    }  # fmt: skip

    def __init__(self, speed: float = 0.6, stream: Any = None) -> None:
        import termios
        import tty

        self.stream = stream or sys.stdin
        if not self.stream.isatty():
            raise DeviceDisconnected("keyboard: stdin is not a terminal")
        self.speed = speed
        self.grip = -1.0
        self._fd = self.stream.fileno()
        self._saved = termios.tcgetattr(self._fd)
        tty.setcbreak(self._fd)

    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        pressed = ""
        while select.select([self._fd], [], [], 0.0)[0]:
            chunk = os.read(self._fd, 32).decode(errors="ignore")
            if not chunk:
                raise DeviceDisconnected("keyboard: end of input")
            pressed += chunk
        if "\x1b" in pressed:
            raise DeviceDisconnected("keyboard: Esc pressed")
        if not pressed:
            return None
        action = np.zeros(5)
        for key in pressed.lower():
            if key in self.KEYS:
                axis, sign = self.KEYS[key]
                action[axis] = sign * self.speed
            elif key == " ":
                self.grip = -self.grip
        action[4] = self.grip
        return action

    def close(self) -> None:
        import termios

        termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)


def _deadzone(value: float, zone: float) -> float:
    """0 inside ``zone``, then rescaled so full deflection is still 1."""
    if abs(value) <= zone:
        return 0.0
    return float(np.sign(value) * (abs(value) - zone) / (1.0 - zone))


class GamepadDevice(TeleopDevice):
    """An SDL gamepad through pygame: left stick x/y, right stick z/yaw, A closes and B opens the gripper.

    ``joystick`` is anything with ``get_axis(i)``, ``get_button(i)`` and ``get_numaxes()`` (pygame's Joystick);
    by default the first gamepad pygame finds (``pip install 'vla-recover[teleop]'``).
    """

    name = "gamepad"

    def __init__(self, joystick: Any = None, deadzone: float = 0.1, speed: float = 1.0) -> None:
        self._pygame: Any = None
        if joystick is None:
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
            try:
                import pygame
            except ImportError as exc:
                raise DeviceDisconnected("gamepad: needs pygame (pip install 'vla-recover[teleop]')") from exc
            pygame.init()
            pygame.joystick.init()
            if pygame.joystick.get_count() == 0:
                raise DeviceDisconnected("gamepad: none connected")
            joystick = pygame.joystick.Joystick(0)
            self._pygame = pygame
        if joystick.get_numaxes() < 4:
            raise DeviceDisconnected(f"gamepad: needs 4 axes, this one has {joystick.get_numaxes()}")
        self.joystick, self.deadzone, self.speed = joystick, deadzone, speed
        self.grip = -1.0

    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        if self._pygame is not None:
            for event in self._pygame.event.get(self._pygame.JOYDEVICEREMOVED):
                raise DeviceDisconnected(f"gamepad: removed ({event})")
        axes = [_deadzone(float(self.joystick.get_axis(i)), self.deadzone) for i in range(4)]
        if self.joystick.get_button(0):
            self.grip = 1.0
        elif self.joystick.get_button(1):
            self.grip = -1.0
        # sticks report down and right as positive: forward on the left stick is +x, up on the right stick is +z
        action = np.array([-axes[1], -axes[0], -axes[3], -axes[2], 0.0]) * self.speed
        action[4] = self.grip
        return action


class SpaceMouseDevice(TeleopDevice):
    """A 3Dconnexion SpaceMouse over HID: translation → xyz, twist → yaw, left button closes, right opens.

    ``hid_device`` is anything with ``read(size, timeout_ms) -> list[int]`` (hidapi's device); by default the first
    3Dconnexion device hidapi finds (``pip install 'vla-recover[teleop]'``).
    """

    name = "spacemouse"
    VENDOR_ID = 0x256F
    FULL_SCALE = 350.0  # counts at full deflection

    def __init__(self, hid_device: Any = None, speed: float = 1.0) -> None:
        if hid_device is None:
            try:
                import hid
            except ImportError as exc:
                raise DeviceDisconnected("spacemouse: needs hidapi (pip install 'vla-recover[teleop]')") from exc
            found = [d for d in hid.enumerate() if d["vendor_id"] == self.VENDOR_ID]
            if not found:
                raise DeviceDisconnected("spacemouse: no 3Dconnexion device found")
            hid_device = hid.device()
            hid_device.open(found[0]["vendor_id"], found[0]["product_id"])
        self.hid, self.speed = hid_device, speed
        self.motion = np.zeros(6)
        self.grip = -1.0

    @staticmethod
    def _int16(low: int, high: int) -> float:
        value = low | (high << 8)
        return float(value - 65536 if value >= 32768 else value)

    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        while True:
            try:
                report = self.hid.read(13, 0)
            except OSError as exc:
                raise DeviceDisconnected(f"spacemouse: {exc}") from exc
            if not report:
                break
            if report[0] == 1 and len(report) >= 7:  # translation x, y, z (and rotation on newer models)
                self.motion[:3] = [self._int16(report[i], report[i + 1]) for i in (1, 3, 5)]
                if len(report) >= 13:
                    self.motion[3:] = [self._int16(report[i], report[i + 1]) for i in (7, 9, 11)]
            elif report[0] == 2 and len(report) >= 7:
                self.motion[3:] = [self._int16(report[i], report[i + 1]) for i in (1, 3, 5)]
            elif report[0] == 3 and len(report) >= 2:
                if report[1] & 1:
                    self.grip = 1.0
                elif report[1] & 2:
                    self.grip = -1.0
        scaled = np.clip(self.motion / self.FULL_SCALE, -1.0, 1.0) * self.speed
        # device axes: x right, y toward the user, z down; yaw is the twist about z
        return np.array([-scaled[1], -scaled[0], -scaled[2], -scaled[5], self.grip])


class LeaderArmDevice(TeleopDevice):
    """A LeRobot leader arm (SO-100/SO-101, Koch, …): its joint motion drives the follower as joint deltas.

    ``teleoperator`` is a LeRobot ``Teleoperator`` (or anything with ``action_features``, ``connect()``,
    ``get_action() -> {joint: position}`` and ``disconnect()``); :meth:`from_lerobot` builds one through LeRobot's
    own config registry, where LeRobot is installed. Each read returns ``scale * (joints now - joints before)``,
    clipped to [-1, 1], in the order of ``action_features``.
    """

    name = "leader_arm"

    def __init__(self, teleoperator: Any, scale: float = 1.0, connect: bool = True) -> None:
        self.teleoperator, self.scale = teleoperator, scale
        self.joints = list(teleoperator.action_features)  # known before connecting, as in LeRobot
        self._previous: np.ndarray | None = None
        if connect:
            self.connect()

    @classmethod
    def from_lerobot(cls, kind: str, port: str, scale: float = 1.0, connect: bool = True) -> LeaderArmDevice:
        from vla_recover.hardware.lerobot_robot import lerobot_config_class

        try:
            from lerobot.teleoperators.config import TeleoperatorConfig
            from lerobot.teleoperators.utils import make_teleoperator_from_config
        except ImportError as exc:
            raise DeviceDisconnected("leader arm: needs LeRobot (bash scripts/install_lerobot_venv.sh)") from exc
        config_cls = lerobot_config_class("lerobot.teleoperators", TeleoperatorConfig, kind, "teleoperator")
        try:
            teleoperator = make_teleoperator_from_config(config_cls(port=port))
        except ImportError as exc:  # the arm's motor SDK (feetech, dynamixel) is a LeRobot extra
            raise DeviceDisconnected(f"leader arm {kind}: LeRobot lacks its motor SDK ({exc})") from exc
        return cls(teleoperator, scale, connect)

    def connect(self) -> None:
        try:
            self.teleoperator.connect()
        except Exception as exc:  # LeRobot raises serial, OS and its own connection errors
            raise DeviceDisconnected(f"leader arm: cannot connect ({type(exc).__name__}: {exc})") from exc

    def read(self, observation: dict[str, np.ndarray]) -> np.ndarray | None:
        try:
            positions = self.teleoperator.get_action()
        except Exception as exc:
            raise DeviceDisconnected(f"leader arm: {type(exc).__name__}: {exc}") from exc
        joints = np.array([float(positions[name]) for name in self.joints])
        previous, self._previous = self._previous, joints
        if previous is None:
            return None  # the first reading only sets the reference
        return np.clip((joints - previous) * self.scale, -1.0, 1.0)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a device that is already gone is not an error
            self.teleoperator.disconnect()
