"""The robot slot's state machine, as an explicit transition table.

::

    idle → autonomous → takeover_requested → teleop (⇄ rewinding) → autonomous … → episode_done → resetting → idle

plus ``fault`` (the worker died or the robot reported an error) and ``estopped`` (reachable from every state, left
only by an explicit clear, back to ``idle``). Anything not in the table raises :class:`IllegalTransition` naming
both states; every legal transition is reported to a listener, which the fleet turns into a ``slot_state`` event.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable

__all__ = ["TRANSITIONS", "IllegalTransition", "SlotMachine", "SlotState"]


class SlotState(enum.StrEnum):
    IDLE = "idle"
    AUTONOMOUS = "autonomous"
    TAKEOVER_REQUESTED = "takeover_requested"
    TELEOP = "teleop"
    REWINDING = "rewinding"
    EPISODE_DONE = "episode_done"
    RESETTING = "resetting"
    FAULT = "fault"
    ESTOPPED = "estopped"


S = SlotState
TRANSITIONS: dict[SlotState, frozenset[SlotState]] = {
    S.IDLE: frozenset({S.AUTONOMOUS, S.TELEOP, S.RESETTING, S.FAULT}),
    S.AUTONOMOUS: frozenset({S.TAKEOVER_REQUESTED, S.TELEOP, S.EPISODE_DONE, S.FAULT}),
    S.TAKEOVER_REQUESTED: frozenset({S.TELEOP, S.AUTONOMOUS, S.EPISODE_DONE, S.FAULT}),
    S.TELEOP: frozenset({S.REWINDING, S.AUTONOMOUS, S.EPISODE_DONE, S.FAULT}),
    S.REWINDING: frozenset({S.TELEOP, S.FAULT}),
    S.EPISODE_DONE: frozenset({S.RESETTING, S.FAULT}),
    S.RESETTING: frozenset({S.IDLE, S.FAULT}),
    S.FAULT: frozenset({S.RESETTING}),
    S.ESTOPPED: frozenset({S.IDLE}),
}
# e-stop always wins: every state may enter it
for _state in SlotState:
    if _state is not S.ESTOPPED:
        TRANSITIONS[_state] = TRANSITIONS[_state] | {S.ESTOPPED}

# states in which a robot may move, and who moves it
MOVING = frozenset({S.AUTONOMOUS, S.TAKEOVER_REQUESTED, S.TELEOP})


class IllegalTransition(RuntimeError):
    def __init__(self, robot: str, current: SlotState, target: SlotState) -> None:
        allowed = ", ".join(sorted(TRANSITIONS[current]))
        super().__init__(f"robot {robot}: no transition {current} → {target} (from {current}: {allowed})")
        self.current, self.target = current, target


Listener = Callable[[str, SlotState, SlotState, str], None]  # robot, old, new, reason


class SlotMachine:
    """One robot's state, changed only through :meth:`to`."""

    def __init__(self, robot: str, listener: Listener | None = None) -> None:
        self.robot = robot
        self.state = SlotState.IDLE
        self.since = time.monotonic()
        self._listener = listener

    def can(self, target: SlotState) -> bool:
        return target in TRANSITIONS[self.state]

    def to(self, target: SlotState, reason: str = "") -> None:
        if target not in TRANSITIONS[self.state]:
            raise IllegalTransition(self.robot, self.state, target)
        old, self.state, self.since = self.state, target, time.monotonic()
        if self._listener is not None:
            self._listener(self.robot, old, target, reason)
