"""Simulated operators: a floor operator and a teleoperator with realistic time costs.

They act only through the fleet's operator API (the same calls the console makes), so a simulated shift exercises
exactly what a human one does. Each keeps a ``busy_until`` on the fleet's clock: an operator in the middle of an
action (a reset, a correction) cannot start another, and the time is charged to the role in operator-seconds.
"""

from __future__ import annotations

from typing import Any, Protocol

from vla_recover.curves import fell, is_failing, progress_lost, stalled
from vla_recover.teleop.kinds import make_device

__all__ = ["FleetAPI", "SimFloorOperator", "SimTeleoperator"]

REGAIN_MARGIN = 0.01  # progress_regained: progress must pass the best before the takeover by this much


class FleetAPI(Protocol):
    """What a simulated operator needs from a fleet (vla_recover.fleet.FleetManager provides it)."""

    slots: dict[str, Any]
    ledger: Any
    phases: tuple[str, ...]
    dt: float
    failure_progress_drop: float  # ground truth: progress this far below its best is a failure

    def now(self) -> float: ...
    def request_takeover(self, robot: str, operator: str, reason: str = "") -> None: ...
    def grant_takeover(self, robot: str, operator: str, device: Any) -> Any: ...
    def renew_lease(self, robot: str, token: str) -> Any: ...
    def rewind(self, robot: str, token: str, steps: int | None = None) -> int: ...
    def release_takeover(self, robot: str, token: str) -> None: ...
    def reset(self, robot: str, operator: str, seconds: float = 0.0) -> None: ...
    def confirm_reset(self, robot: str, operator: str) -> None: ...


class SimFloorOperator:
    """Watches every robot; asks for a takeover when a failure is seen (after a reaction delay); resets robots.

    What it sees is ground truth (an injected failure, progress falling or stalling) or, with the ``critic``
    detector, the fleet critic's ratings of each robot's progress: a failure predicted from what the robot saw;
    ``critic_or_ground_truth`` is a person watching the fleet with the critic's alerts beside it. The ``gate``
    detector is the fleet's recovery gate (``vla_recover.recovery``) judging from the robot's state that it needs
    correction; ``gate_or_ground_truth`` the gate's alerts beside a person watching.
    At the console it sees every robot, even while a request it made keeps it busy; while it resets a robot
    (physical resets) it is at that robot and sees nothing, and a failure that began meanwhile is seen when it is
    back. When free, it asks for a takeover of the robot it saw failing first (once its reaction time has passed,
    and if the robot is failing still), else resets a finished robot (physical resets; automatic ones need no
    operator).
    """

    role = "floor"

    def __init__(self, config: Any, name: str = "floor-1") -> None:
        self.config, self.name = config, name
        self.busy_until = 0.0  # making a request or resetting: no new action before then
        self.away_until = 0.0  # resetting a robot: away from the console, seeing nothing, before then
        self._noticed: dict[str, float] = {}  # robot → when the failure became visible to this operator
        self._injected: set[str] = set()  # robots noticed for an injected failure (seen on the step it fired)

    def act(self, fleet: FleetAPI) -> None:
        now = fleet.now()
        for robot, slot in fleet.slots.items():
            if slot.state != "autonomous":
                self._noticed.pop(robot, None)
                self._injected.discard(robot)
                continue
            if now >= self.away_until and robot not in self._noticed and self._failing(fleet, slot):
                self._noticed[robot] = now
                if slot.info.get("failure"):  # an injected failure shows on one step: it stays seen
                    self._injected.add(robot)
        if now < self.busy_until:
            return
        # a failing robot first: its attempt can still be saved; a finished one only waits
        for robot, seen in sorted(self._noticed.items(), key=lambda item: item[1]):
            if now - seen >= self.config.reaction_s:
                del self._noticed[robot]
                injected = robot in self._injected
                self._injected.discard(robot)
                if not injected and not self._failing(fleet, fleet.slots[robot]):
                    continue  # it recovered while the operator was reacting: nothing to ask for
                fleet.request_takeover(robot, self.name, "failure seen")
                self._spend(fleet, self.config.request_cost_s)
                return
        for robot, slot in fleet.slots.items():  # an arm home and waiting: its scene is a person's to reset
            if slot.awaiting_reset:
                fleet.confirm_reset(robot, self.name)
                # with physical resets its reset time was spent when it reset the robot; else it goes there now
                self._spend(fleet, self.config.reset_s if self.config.resets == "automatic" else 0.0, away=True)
                return
        if self.config.resets == "physical":
            for robot, slot in fleet.slots.items():
                if slot.state == "episode_done":
                    fleet.reset(robot, self.name, self.config.reset_s)
                    self._spend(fleet, self.config.reset_s, away=True)
                    return

    def _spend(self, fleet: FleetAPI, seconds: float, away: bool = False) -> None:
        self.busy_until = fleet.now() + seconds
        if away:
            self.away_until = self.busy_until
        fleet.ledger.charge(self.role, seconds)

    def _failing(self, fleet: FleetAPI, slot: Any) -> bool:
        detector = self.config.detector
        if detector.startswith("critic") and self._critic_sees_trouble(slot.branch_critic):
            return True
        if detector.startswith("gate") and slot.gate_raised:
            return True
        progress = slot.branch_progress
        if detector in ("critic", "gate") or not progress:
            return False
        watching = ("ground_truth", "both", "critic_or_ground_truth", "gate_or_ground_truth")
        if detector in watching and is_failing(slot.info, progress, fleet.failure_progress_drop):
            return True
        if detector in ("stall", "both") and len(progress) > self.config.stall_steps:
            recent = progress[-self.config.stall_steps :]
            if max(recent) <= progress[-self.config.stall_steps - 1] + 1e-3 and progress[-1] < 1.0:
                return True
        return False

    def _critic_sees_trouble(self, ratings: list[float]) -> bool:
        """The critic's smoothed rating fell ``critic_drop`` below its best, or gained too little for too long."""
        smooth = self.config.critic_smooth_steps
        return fell(ratings, self.config.critic_drop, smooth) or stalled(
            ratings, self.config.stall_steps, self.config.critic_stall_gain, smooth
        )


class SimTeleoperator:
    """Serves the takeover queue one robot at a time: take over, rewind, recover with the expert, hand back."""

    role = "teleop"

    def __init__(self, config: Any, name: str = "teleop-1") -> None:
        self.config, self.name = config, name
        self.robot: str | None = None
        self.token: str | None = None
        self.started = 0.0
        self.start_phase = 0
        self.steps = 0
        self.rewound = False
        self.streak = 0  # corrective steps the release rule has counted so far
        self.best_before = 0.0  # the attempt's best progress before the takeover
        self.free_at = 0.0  # handing the last robot back: no next takeover before then

    def act(self, fleet: FleetAPI) -> None:
        if self.robot is None:
            if fleet.now() >= self.free_at:
                self._take_next(fleet)
            return
        slot = fleet.slots[self.robot]
        if slot.state != "teleop" or slot.lease is None or slot.lease.token != self.token:
            self._finish(fleet, handed_back=False)  # the episode ended or the lease was lost
            return
        fleet.renew_lease(self.robot, self.token)  # type: ignore[arg-type]
        if fleet.now() - self.started < self.config.reaction_s:
            slot.hold = True
            return
        slot.hold = False
        if not self.rewound:
            self.rewound = True
            if self.config.rewind != "none":
                steps = self.config.rewind_steps if self.config.rewind == "steps" else None
                fleet.rewind(self.robot, self.token, steps)  # type: ignore[arg-type]
                self.start_phase = int(slot.info.get("phase_index", 0))
            return
        self.steps += 1
        if self._done(slot) or self.steps >= self.config.max_steps:
            fleet.release_takeover(self.robot, self.token)  # type: ignore[arg-type]
            self._finish(fleet, handed_back=True)

    def _done(self, slot: Any) -> bool:
        """The release rule (``TeleoperatorConfig.release``), read after each corrective step."""
        if slot.info.get("is_success"):
            return True
        rule = self.config.release
        phase = int(slot.info.get("phase_index", 0))
        if rule == "phase_advanced":
            return phase > self.start_phase
        if rule == "phase_held":
            self.streak = self.streak + 1 if phase > self.start_phase else 0
            return self.streak >= self.config.release_steps
        if rule == "progress_regained":
            if self.streak or float(slot.info.get("progress", 0.0)) > self.best_before + REGAIN_MARGIN:
                self.streak += 1
            return self.streak > self.config.release_steps
        return False  # success: only the task's success (above) or max_steps ends the correction

    def _take_next(self, fleet: FleetAPI) -> None:
        waiting = [(robot, slot) for robot, slot in fleet.slots.items() if slot.state == "takeover_requested"]
        if not waiting:
            return
        if self.config.allocation == "priority":  # Fleet-DAgger-style: the robot at most risk first
            robot, slot = min(waiting, key=lambda item: self._risk_rank(item[1]))
        else:
            robot, slot = min(waiting, key=lambda item: item[1].machine.since)
        self.best_before = max(slot.branch_progress, default=0.0)  # what the attempt had reached before
        lease = fleet.grant_takeover(robot, self.name, make_device("sim_expert"))
        slot.hold = self.config.reaction_s > 0  # the human's reaction starts now: the robot holds until it ends
        self.robot, self.token = robot, lease.token
        self.started, self.steps, self.rewound, self.streak = fleet.now(), 0, False, 0
        self.start_phase = int(slot.info.get("phase_index", 0))

    @staticmethod
    def _risk_rank(slot: Any) -> float:
        """Lower is served first: robots that lost the most progress, then those that waited longest."""
        return -progress_lost(slot.branch_progress) + 1e-6 * slot.machine.since

    def _finish(self, fleet: FleetAPI, handed_back: bool) -> None:
        handback = self.config.handback_s if handed_back else 0.0
        fleet.ledger.charge(self.role, fleet.now() - self.started + handback)
        self.free_at = fleet.now() + handback  # the hand-back is time on the clock, as the busy seconds say
        self.robot = self.token = None
