"""One robot slot of the fleet: its state machine, its worker, what is in flight, and the attempt it records."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_recover.execution import INITIAL_GRIP
from vla_recover.fleet.episode import AttemptBuffer
from vla_recover.fleet.failures import Failure
from vla_recover.fleet.states import SlotMachine, SlotState
from vla_recover.fleet.worker import Worker
from vla_recover.teleop.devices import TeleopDevice
from vla_recover.teleop.lease import Lease

__all__ = ["Slot"]


@dataclass
class Slot:
    robot: str
    machine: SlotMachine
    worker: Worker
    history: deque[dict[str, np.ndarray]]
    plan: deque[np.ndarray] = field(default_factory=deque)
    # requests in flight, oldest first: ("step", action, actor, control), ("reset", seed), ("probe", failure, field)
    # or None for a reply to drop
    pending: deque[tuple[Any, ...] | None] = field(default_factory=deque)
    obs: dict[str, np.ndarray] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    attempt: AttemptBuffer | None = None
    branch_rows: list[int] = field(default_factory=list)  # attempt row of each env step on the current branch
    branch_progress: list[float] = field(default_factory=list)  # ground truth after each step of the branch
    branch_critic: list[float] = field(default_factory=list)  # the critic's rating of each step's observation
    branch_gate: list[float] = field(default_factory=list)  # the recovery gate's P(needs correction) of each step
    gate_raised: bool = False  # the gate's verdict on the branch so far
    critic_done: float = 0.0  # an arm: the critic's highest P(done) on this branch (FleetConfig.critic_done_threshold)
    furthest_step: int = 0  # the most steps any branch of this attempt reached (before rewinds cut them)
    handback_step: int = 0  # the branch's length when a human last handed the robot back
    device: TeleopDevice | None = None
    lease: Lease | None = None
    hold: bool = False  # a teleop robot with no valid command holds still
    paused: bool = False
    needs_reset: bool = True
    busy_until: float = 0.0  # end of the current reset
    awaiting_reset: bool = False  # homed, waiting for a person to reset the scene and confirm it
    grip: float = INITIAL_GRIP  # last gripper command, kept while holding
    failure: Failure | None = None  # the ground-truth failure of this attempt not yet taken over (sim only)
    faults_in_a_row: int = 0  # worker deaths since this robot last finished an episode

    @property
    def state(self) -> SlotState:
        return self.machine.state

    @property
    def waiting_for_human(self) -> bool:
        """In the takeover or reset queue, or taken over and holding for want of a command."""
        state = self.machine.state
        return (
            state in (SlotState.TAKEOVER_REQUESTED, SlotState.EPISODE_DONE)
            or (state is SlotState.TELEOP and self.hold)
            or self.awaiting_reset
        )

    @property
    def steps_in_flight(self) -> int:
        return sum(1 for entry in self.pending if entry is not None and entry[0] == "step")

    @property
    def reset_in_flight(self) -> bool:
        return any(entry is not None and entry[0] == "reset" for entry in self.pending)

    def new_branch(self) -> None:
        """Forget the branch bookkeeping: a fresh attempt starts with no steps."""
        self.branch_rows, self.branch_progress, self.branch_critic, self.branch_gate = [], [], [], []
        self.gate_raised, self.critic_done = False, 0.0
        self.furthest_step = self.handback_step = 0

    def cut_branch(self, step: int) -> None:
        """Drop the branch from ``step`` on (a rewind went back to before it)."""
        self.furthest_step = max(self.furthest_step, len(self.branch_rows))
        del self.branch_rows[step:], self.branch_progress[step:], self.branch_critic[step:], self.branch_gate[step:]
        self.gate_raised = False

    def oldest_rewind_target(self, capacity: int) -> int:
        """The earliest step a rewind may reach: ``capacity`` back from the furthest step of the attempt, as the
        sim worker keeps its checkpoints (after a rewind, the states it dropped further back stay dropped), and
        never before a human's handed-back correction. Undoing that would throw the correction away, and a
        deterministic policy and expert replayed from the same state would fail and be rewound there forever."""
        return max(0, max(self.furthest_step, len(self.branch_rows)) - capacity, self.handback_step)
