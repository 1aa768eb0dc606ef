"""The fleet's operator API: what the console and the simulated operators call (takeovers, leases, rewinds, resets,
e-stops, pauses). Each call runs between two control ticks and is an event in the store under the operator's name.

`FleetManager` is this API plus the control tick (`vla_recover.fleet.manager`); the few tick-loop steps a call needs
(landing a robot's steps in flight, rating them, restarting its history, ending its attempt) are declared here and
defined there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from vla_recover.fleet.accounting import EffortLedger
from vla_recover.fleet.actions import ActionGate
from vla_recover.fleet.config import FleetConfig
from vla_recover.fleet.failures import FailureWatch
from vla_recover.fleet.slot import Slot
from vla_recover.fleet.states import SlotState
from vla_recover.fleet.worker import WorkerDied
from vla_recover.teleop.devices import RemoteDevice, TeleopDevice
from vla_recover.teleop.lease import Lease, LeaseError, LeaseManager

__all__ = ["OperatorAPI"]

S = SlotState


class OperatorAPI(ABC):
    config: FleetConfig
    slots: dict[str, Slot]
    leases: LeaseManager
    ledger: EffortLedger
    gate: ActionGate
    failure_watch: FailureWatch

    @abstractmethod
    def now(self) -> float: ...

    @abstractmethod
    def event(self, kind: str, actor: str, payload: dict[str, Any], robot: str | None = None) -> None: ...

    @abstractmethod
    def _drain(self, slot: Slot) -> int: ...

    @abstractmethod
    def _rate_new_steps(self) -> None: ...

    @abstractmethod
    def _last_in_distribution(self, slot: Slot) -> int: ...

    @abstractmethod
    def _refill_history(self, slot: Slot) -> None: ...

    @abstractmethod
    def _fault(self, slot: Slot, reason: str) -> None: ...

    @abstractmethod
    def _end_attempt(self, slot: Slot, outcome: str, reason: str = "") -> None: ...

    def slot(self, robot: str) -> Slot:
        try:
            return self.slots[robot]
        except KeyError:
            raise KeyError(f"robot: no robot {robot!r} in this fleet ({', '.join(self.slots)})") from None

    def request_takeover(self, robot: str, operator: str, reason: str = "") -> None:
        slot = self.slot(robot)
        slot.machine.to(S.TAKEOVER_REQUESTED, reason)
        self.failure_watch.requested(slot, self.now())
        self.event("takeover_requested", operator, {"reason": reason}, robot)

    def grant_takeover(self, robot: str, operator: str, device: TeleopDevice) -> Lease:
        """Give ``operator`` an exclusive lease on ``robot``; its device drives the robot from the next tick."""
        slot = self.slot(robot)
        try:
            if slot.state not in (S.TAKEOVER_REQUESTED, S.AUTONOMOUS):
                holder = f" (held by {slot.lease.operator})" if slot.lease is not None else ""
                raise LeaseError(f"robot {robot}: cannot take over in state {slot.state}{holder}")
            lease = self.leases.acquire(robot, operator)
        except LeaseError as refusal:
            self.event("takeover_refused", operator, {"reason": str(refusal)}, robot)
            raise
        slot.machine.to(S.TELEOP, f"granted to {operator}")
        slot.lease, slot.device, slot.hold = lease, device, False
        slot.plan.clear()
        self.failure_watch.granted(slot, self.now())
        self.ledger.interventions += 1
        self.event("takeover_granted", operator, {"operator": operator, "device": device.name}, robot)
        return lease

    def command(self, robot: str, token: str, action: Any) -> None:
        """A teleop command from outside (console, network) for the robot's `RemoteDevice`; needs the lease."""
        slot = self.slot(robot)
        self._checked_lease(slot, token)
        if not isinstance(slot.device, RemoteDevice):
            raise LeaseError(f"robot {robot}: driven by {getattr(slot.device, 'name', 'nothing')}, not remote commands")
        try:  # refused now, so the sender hears why; the robot holds as it would without a command
            checked = self.gate.checked(action)
        except ValueError as problem:
            self.gate.reject(slot, "human", problem)
            raise
        slot.device.push(checked)

    def renew_lease(self, robot: str, token: str) -> Lease:
        lease = self.leases.renew(robot, token)
        self.slot(robot).lease = lease
        return lease

    def rewind(self, robot: str, token: str, steps: int | None = None) -> int:
        """Restore the robot to ``steps`` back, or (None) to its last in-distribution state; returns steps undone."""
        slot = self.slot(robot)
        lease = self._checked_lease(slot, token)
        self._drain(slot)
        if slot.state is not S.TELEOP:  # the steps still in flight ended the attempt
            return 0
        here, target = len(slot.branch_rows), self._rewind_target(slot, steps)
        if target >= here or slot.attempt is None:
            return 0
        slot.machine.to(S.REWINDING, f"{here - target} steps")
        try:
            obs, info = slot.worker.call("rewind_to", target)
        except WorkerDied as exc:
            self._fault(slot, str(exc))
            return 0
        slot.attempt.add_rewind(list(reversed(slot.branch_rows[target:])))
        slot.cut_branch(target)
        slot.obs, slot.info = obs, info
        self._refill_history(slot)  # the robot jumped back: its history starts again there, as in training windows
        slot.machine.to(S.TELEOP, "rewound")
        self.ledger.rewinds += 1
        self.event("rewind", lease.operator, {"steps": here - target, "to_step": target}, robot)
        return here - target

    def rewind_preview(self, robot: str, token: str, steps: int | None, width: int = 320, height: int = 240) -> bytes:
        """A JPEG of where ``rewind(robot, token, steps)`` would land, rendered off to the side (the robot does not
        move); a ValueError where the robot has no views (a real arm)."""
        slot = self.slot(robot)
        self._checked_lease(slot, token)
        self._drain(slot)
        if not slot.worker.simulated:
            raise ValueError(f"preview: {robot} is not simulated; its own cameras show where it is")
        return bytes(slot.worker.call("preview", self._rewind_target(slot, steps), width, height))

    def _rewind_target(self, slot: Slot, steps: int | None) -> int:
        """The step a rewind of ``steps`` (None: to the last in-distribution state) goes back to, within reach."""
        self._rate_new_steps()
        here = len(slot.branch_rows)
        target = here - steps if steps is not None else self._last_in_distribution(slot)
        return max(slot.oldest_rewind_target(self.config.rewind_capacity), min(target, here))

    def release_takeover(self, robot: str, token: str) -> None:
        """Hand the robot back to the policy, which plans its next chunk from the observation now. Its observation
        history runs on through the hand-back, as a training window anchored there reads it (`WindowSampler`)."""
        slot = self.slot(robot)
        lease = self._checked_lease(slot, token)
        self.leases.release(robot, token)
        slot.lease, slot.device, slot.hold, slot.handback_step = None, None, False, len(slot.branch_rows)
        slot.plan.clear()
        slot.machine.to(S.AUTONOMOUS, f"released by {lease.operator}")
        self.event("takeover_released", lease.operator, {}, robot)

    def reset(self, robot: str, operator: str, seconds: float = 0.0) -> None:
        slot = self.slot(robot)
        slot.machine.to(S.RESETTING, f"by {operator}")
        slot.busy_until, slot.awaiting_reset = self.now() + seconds, False
        self.event("reset", operator, {"seconds": seconds}, robot)

    def confirm_reset(self, robot: str, operator: str) -> None:
        """The floor operator has reset the scene of a robot that is home and waiting for it (a real arm's reset is
        a person's task); the robot is ready for its next episode."""
        slot = self.slot(robot)
        if not slot.awaiting_reset:
            why = "homing" if slot.state is S.RESETTING else f"in state {slot.state}"
            raise LeaseError(f"robot {robot}: no reset to confirm ({why})")
        slot.awaiting_reset = False
        slot.machine.to(S.IDLE, f"reset confirmed by {operator}")
        self.event("reset_confirmed", operator, {}, robot)

    def estop(self, operator: str, robot: str | None = None) -> None:
        """Stop one robot or (None) all of them now; e-stop wins over every state and lease."""
        for slot in [self.slot(robot)] if robot else list(self.slots.values()):
            if slot.state is S.ESTOPPED:
                continue
            self._end_attempt(slot, "aborted", reason="estop")
            self._drop_lease(slot)
            slot.awaiting_reset = False
            slot.machine.to(S.ESTOPPED, f"by {operator}")
            slot.worker.estop(operator, "fleet e-stop")  # a hardware slot's filter latches and holds the arm
            self.event("estop", operator, {}, slot.robot)

    def clear_estop(self, robot: str, operator: str) -> None:
        slot = self.slot(robot)
        slot.machine.to(S.IDLE, f"cleared by {operator}")
        slot.worker.clear_estop(operator)
        slot.needs_reset = True
        self.event("estop_cleared", operator, {}, robot)

    def pause(self, robot: str, operator: str) -> None:
        self.slot(robot).paused = True
        self.event("pause", operator, {}, robot)

    def resume(self, robot: str, operator: str) -> None:
        self.slot(robot).paused = False
        self.event("resume", operator, {}, robot)

    # -- leases ---------------------------------------------------------------------------------------------------
    def _checked_lease(self, slot: Slot, token: str) -> Lease:
        try:
            return self.leases.check(slot.robot, token)
        except LeaseError as refusal:
            self.event("command_refused", "fleet", {"reason": str(refusal)}, slot.robot)
            raise

    def _lease_lost(self, slot: Slot, reason: str) -> None:
        """Lease expiry or device loss: the robot holds still until someone takes it over again."""
        self.leases.revoke(slot.robot)
        slot.lease, slot.device, slot.hold = None, None, True
        self.event("lease_lost", "fleet", {"reason": reason}, slot.robot)

    def _drop_lease(self, slot: Slot) -> None:
        if slot.lease is not None:
            self.leases.revoke(slot.robot)
        slot.lease, slot.device, slot.hold = None, None, False
