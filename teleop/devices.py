"""Teleoperation input devices behind one interface.

A device turns what a person does into an action for the task's action space (end-effector deltas
``[dx, dy, dz, dyaw, grip]`` in [-1, 1] for the MJCF tasks). ``read`` returns the action for this control tick, or
None when there is no input (the robot holds), and raises :class:`DeviceDisconnected` when the device is gone
(the fleet puts the robot in a safe hold within the same tick).
"""

from __future__ import annotations

import abc
import os
import select
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, ClassVar

import numpy as np

__all__ = ["DeviceDisconnected", "KeyboardDevice", "ScriptedDevice", "SimExpertDevice", "TeleopDevice"]


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
