"""The fleet manager: N robot slots, one batched policy forward per control tick, an operator API, recording.

Each control tick: expired leases put their robots in hold; simulated operators act through the same API a
console uses; every autonomous robot whose action chunk ran out gets a new one from a single batched forward;
every moving robot is stepped (all workers in parallel); steps are recorded into the robot's attempt; finished
attempts are stored with their supervision segments. A policy runs exactly as evaluation runs it
(`vla_recover.execution`). Requests travel without blocking the tick: a sim may run up to ``run_ahead_steps``
actions of its current chunk ahead of what the manager has recorded, and a reset is sent with a tick's steps and
lands with their replies. The clock is sim time (``ticks * control period``), so
operator costs and waiting times are measured in the same seconds as the robots' work.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.curves import last_in_distribution
from vla_recover.data import EpisodeStore
from vla_recover.data.schema import UNCHOSEN_ACTORS
from vla_recover.envs import TASKS, control_period, resolve_task_name
from vla_recover.execution import INITIAL_GRIP, chunk_seed
from vla_recover.fleet.accounting import EffortLedger
from vla_recover.fleet.actions import ActionGate
from vla_recover.fleet.backends import SlotContext
from vla_recover.fleet.config import FleetConfig
from vla_recover.fleet.episode import AttemptBuffer
from vla_recover.fleet.failures import Failure, FailureWatch, failure_report
from vla_recover.fleet.inference import ChunkSource, chunk_source
from vla_recover.fleet.operator_api import OperatorAPI
from vla_recover.fleet.progress import CriticRater, GateRater
from vla_recover.fleet.recorder import FleetRecorder
from vla_recover.fleet.robots import ROBOTS, slot_names
from vla_recover.fleet.slot import Slot
from vla_recover.fleet.states import MOVING, SlotMachine, SlotState
from vla_recover.fleet.views import ViewBoard
from vla_recover.fleet.worker import SimWorkerSpec, Worker, WorkerCrashLoop, WorkerDied
from vla_recover.teleop.devices import DeviceDisconnected
from vla_recover.teleop.lease import LeaseManager

__all__ = ["FleetManager"]

S = SlotState


class FleetManager(OperatorAPI):
    """The control tick over N robot slots, with the operator API (`vla_recover.fleet.operator_api`) on top."""

    def __init__(self, config: FleetConfig, source: ChunkSource | None = None, views: str | Path | None = None) -> None:
        self.config = config
        self.task = resolve_task_name(config.task)
        task_cls = TASKS.get(self.task).load()
        self.phases: tuple[str, ...] = tuple(task_cls.PHASES)
        self.dt = control_period(self.task, config.task_config)
        self.action_dim = int(task_cls.GRIPPER_INDEX) + 1  # every task's action ends with its gripper command
        self.ticks = 0
        self.ledger = EffortLedger()
        self.gate = ActionGate(self.action_dim, config.policy_action_tolerance, self.ledger, self.event)
        self.leases = LeaseManager(config.lease_ttl_s, clock=self.now)
        self.source: ChunkSource = source or chunk_source(config)
        self.autonomous_actor: str = getattr(self.source, "actor", "policy")  # "guided" for a guided source
        recorded = [f"obs.{key}" for key in self.source.obs_keys]
        self.critic = (
            CriticRater(config.critic, recorded, config.critic_done_threshold, config.device)
            if config.critic is not None
            else None
        )
        self.gate_rater = GateRater(config.gate, recorded) if config.gate is not None else None
        self.recorder = FleetRecorder(config.store, config.store_every_s)
        self._episodes_started = 0
        self._next_seed = config.seed
        self._crash_loop: WorkerCrashLoop | None = None  # once a robot's worker keeps dying, every tick raises it
        self.views = ViewBoard(views) if views is not None else None  # sim robots' views for people watching
        spec = SimWorkerSpec(
            self.task,
            dict(config.task_config),
            dict(config.teleoperator.expert),
            config.rewind_capacity,
            str(views) if views is not None else None,
        )
        self.slots: dict[str, Slot] = {}
        self.slot_context = SlotContext(config, self.task, self.dt, spec, self.action_dim)
        self._safety_logged_at = 0.0
        try:
            robots = config.robot_configs()
            for robot_config, names in zip(robots, slot_names(robots), strict=True):
                build = ROBOTS.get(robot_config.kind).load()
                for name, worker in zip(names, build(robot_config, names, self.slot_context), strict=True):
                    self._add_slot(name, worker)
        except BaseException:
            self.close()  # the slots started so far, and the recorder
            raise
        self.failure_progress_drop = config.failure_progress_drop
        self.failure_watch = FailureWatch(config.failure_progress_drop, self._probe)  # sim robots only
        self.operators: list[Any] = []  # ticked before the robots; see vla_recover.teleop.operators
        self.auto_reset = True  # finished robots reset themselves unless an operator takes that job

    def _add_slot(self, robot: str, worker: Worker) -> None:
        self.slots[robot] = Slot(
            robot, SlotMachine(robot, self._on_transition), worker, deque(maxlen=self.source.obs_horizon)
        )

    # -- clock, events ----------------------------------------------------------------------------------------
    @property
    def store(self) -> EpisodeStore:
        """The store with every write asked for so far done; between ticks (a console uses ``recorder.call``)."""
        self.recorder.sync()
        return self.recorder.store

    def now(self) -> float:
        return self.ticks * self.dt

    def event(self, kind: str, actor: str, payload: dict[str, Any], robot: str | None = None) -> None:
        self.recorder.event(kind, actor, payload, robot, self.now())

    def _on_transition(self, robot: str, old: SlotState, new: SlotState, reason: str) -> None:
        self.event("slot_state", "fleet", {"state": str(new), "from": str(old), "reason": reason}, robot)

    @property
    def finished(self) -> bool:
        done = sum(self.ledger.episodes.values()) >= self.config.episodes
        out_of_time = self.config.sim_seconds is not None and self.now() >= self.config.sim_seconds
        budget = self.config.operator_budget_s
        out_of_budget = budget is not None and sum(self.ledger.operator_s.values()) >= budget
        return done or out_of_time or out_of_budget

    # -- the control loop -----------------------------------------------------------------------------------------
    def start(self) -> None:
        for slot in self.slots.values():
            self._begin_reset(slot, "start")

    def run(self, progress: Any = None) -> dict[str, Any]:
        """Tick until the episode count or sim-time budget is reached; returns the run summary."""
        started = time.perf_counter()
        self.start()
        try:
            while not self.finished:
                self.tick()
                if progress is not None:
                    progress(self)
        finally:
            self.close()
        return self.summary(time.perf_counter() - started)

    def tick(self) -> None:
        if self._crash_loop is not None:
            raise self._crash_loop
        for lease in self.leases.expired():
            self._lease_lost(self.slot(lease.robot), f"the lease of {lease.operator} expired")
        for operator in self.operators:
            operator.act(self)
        self._finish_resets()
        self._plan_chunks()
        for slot in self.slots.values():
            self._dispatch(slot)
        for worker in {id(s.worker): s.worker for s in self.slots.values() if s.pending}.values():
            with contextlib.suppress(WorkerDied):  # each of its slots finds out on receive
                worker.flush()
        for slot in self.slots.values():
            if slot.pending:
                self._consume(slot)
        self._rate_new_steps()
        self._end_done_attempts()
        for slot in self.slots.values():
            self.ledger.robot_s += self.dt
            self.ledger.robot_waiting_s += self.dt if slot.waiting_for_human else 0.0
        self._log_safety()
        self.recorder.flush()
        self.ticks += 1

    def _end_done_attempts(self) -> None:
        """An arm whose step the critic's done head judged done ends its episode as a success (its only success
        detector; without one a person labels the outcome in the console)."""
        threshold = self.config.critic_done_threshold
        if threshold is None:
            return
        for slot in self.slots.values():
            if slot.state in (S.AUTONOMOUS, S.TELEOP) and slot.critic_done >= threshold:
                self.event("outcome_detected", "critic", {"p_done": round(slot.critic_done, 4)}, slot.robot)
                self._end_attempt(slot, "success", reason="the critic's done head")

    def _log_safety(self, every_s: float = 1.0) -> None:
        """One ``safety_interventions`` event per robot whose filter stepped in, at most once a sim-second: per kind
        (clipped, rejected, watchdog_hold, estop, ...) the count and the first and last reason."""
        if self.now() - self._safety_logged_at < every_s:
            return
        self._safety_logged_at = self.now()
        for robot, kinds in self.slot_context.safety.take().items():
            self.event("safety_interventions", "safety", {"interventions": kinds}, robot)
            # the arms' filters check their commands: their clips and rejections are the fleet's, counted once
            self.ledger.clipped_actions += kinds.get("clipped", {}).get("count", 0)
            self.ledger.rejected_actions += kinds.get("rejected", {}).get("count", 0)

    def _dispatch(self, slot: Slot) -> None:
        """Send this tick's step, and let a sim run ahead on actions the policy has already planned.

        A robot executes its chunk while the manager records what came back, as an arm runs its trajectory while the
        next one is computed: up to ``run_ahead_steps`` steps are in flight, topped up once half of them have landed.
        Only planned policy actions run ahead; a teleop command waits until the steps in flight have landed, so it is
        read from the latest observation.
        """
        if slot.state not in MOVING or slot.paused or slot.obs is None:
            return
        try:
            if not slot.steps_in_flight:
                action, actor = self._next_action(slot)
                slot.worker.send("step", action)
                slot.pending.append(("step", action, actor, self._control(slot)))
            depth = self.config.run_ahead_steps if slot.worker.runs_ahead else 1
            if slot.steps_in_flight > depth - depth // 2:
                return  # topped up in bursts of depth // 2: a worker gets several steps per message (fewer
                # wake-ups), and the burst before is still in flight, so the next is queued before that one is done
            while slot.steps_in_flight < depth and slot.plan and slot.state is not S.TELEOP:
                action = slot.plan.popleft()
                slot.worker.send("step", action)
                slot.pending.append(("step", action, self.autonomous_actor, "autonomous"))
        except WorkerDied as exc:
            self._fault(slot, str(exc))

    def _consume(self, slot: Slot) -> None:
        """The reply to the slot's oldest request in flight: a step is recorded (or dropped when its attempt is
        already over), a reset makes the slot idle; probes answered before it are filed on the way."""
        entry = slot.pending.popleft()
        try:
            reply = slot.worker.receive()
        except WorkerDied as exc:
            self._fault(slot, str(exc))
            return
        except ValueError as problem:  # a probe the worker could not answer: its field stays unknown
            if entry is None or entry[0] != "probe":
                raise
            self.event("probe_failed", "fleet", {"reason": str(problem)}, slot.robot)
            reply = None
        if entry is not None and entry[0] == "probe":
            setattr(entry[1], entry[2], None if reply is None else bool(reply))
            if slot.pending:
                self._consume(slot)  # a probe costs no tick: the step behind it lands now
            return
        if entry is None:
            return
        if entry[0] == "reset":
            self._reset_done(slot, entry[1], *reply)
            return
        obs, info, terminated, truncated, taken = reply
        actor = "safety" if info.get("safety_replaced") and entry[2] not in UNCHOSEN_ACTORS else entry[2]
        self._record(slot, taken, actor, entry[3], obs, info)
        if slot.state in (S.AUTONOMOUS, S.TAKEOVER_REQUESTED) and slot.worker.simulated:
            self.failure_watch.stepped(slot, info, self.now())
        if terminated or truncated:
            self._end_attempt(slot, "success" if info.get("is_success") else "truncated")

    def land_in_flight(self) -> int:
        """Land every step still in flight on every robot (before a pause of the whole fleet, or at the end of a
        timed window); returns how many steps were recorded."""
        return sum(self._drain(slot) for slot in self.slots.values())

    def _drain(self, slot: Slot) -> int:
        """Land every step in flight, before a request that needs the sim where the manager thinks it is; returns
        how many steps were recorded (steps past the end of an attempt are dropped)."""
        recorded = sum(1 for entry in slot.pending if entry is not None and entry[0] == "step")
        while slot.pending:  # a fault empties it
            self._consume(slot)
        return recorded

    # -- internals ----------------------------------------------------------------------------------------------
    def _plan_chunks(self) -> None:
        """One forward for every autonomous robot whose chunk has run out and whose steps have all landed.

        As in evaluation (`vla_recover.execution`), a chunk is planned from the observation at the step where it
        starts executing, with that step's seed, and its first ``action_exec`` actions run; only the actions of a
        chunk already planned run ahead, so running ahead never plans from an older observation.
        """
        need = [
            s
            for s in self.slots.values()
            if s.state in (S.AUTONOMOUS, S.TAKEOVER_REQUESTED)
            and not s.plan
            and not s.steps_in_flight
            and not s.paused
            and s.obs
            and s.attempt is not None
        ]
        if not need:
            return
        groups = [need] if self.config.batched_inference else [[s] for s in need]
        for group in groups:
            attempts = [s.attempt for s in group if s.attempt is not None]
            chunks = self.source.predict(
                [s.history for s in group],
                [a.instruction for a in attempts],
                [chunk_seed(a.seed, len(s.branch_rows)) for s, a in zip(group, attempts, strict=True)],
            )
            for slot, chunk in zip(group, chunks, strict=True):
                slot.plan.extend(self.gate.chunk(slot, chunk[: self.source.action_exec]))

    @staticmethod
    def _control(slot: Slot) -> str:
        """Who is in control of the robot now: the segment kind of the step about to be sent."""
        return "intervention" if slot.state is S.TELEOP else "autonomous"

    def _next_action(self, slot: Slot) -> tuple[np.ndarray | None, str]:
        """(action or None for the sim expert, who chose it) for this tick. A hold (no chunk, no command, a rejected
        command, no lease) was chosen by no one: its actor is ``hold``, whoever is in control."""
        if slot.state is not S.TELEOP:
            return (slot.plan.popleft(), self.autonomous_actor) if slot.plan else (self.gate.hold(slot), "hold")
        if slot.hold or slot.device is None:
            return self.gate.hold(slot), "hold"
        if slot.device.uses_sim_expert:
            return None, "human"
        try:
            command = slot.device.read(slot.obs or {})
        except DeviceDisconnected as exc:
            self._lease_lost(slot, f"device {slot.device.name}: {exc}")
            return self.gate.hold(slot), "hold"
        if command is None:
            return self.gate.hold(slot), "hold"
        checked = self.gate.command(slot, command, "human")
        return (checked, "human") if checked is not None else (self.gate.hold(slot), "hold")

    def _record(
        self, slot: Slot, action: np.ndarray, actor: str, control: str, obs: dict[str, Any], info: dict[str, Any]
    ) -> None:
        assert slot.attempt is not None and slot.obs is not None
        slot.branch_rows.append(len(slot.attempt))
        slot.branch_progress.append(float(info.get("progress", 0.0)))
        slot.attempt.add(slot.obs, action, actor, info, control)
        self.ledger.count_step(actor)
        slot.grip = float(action[self.action_dim - 1]) if len(action) == self.action_dim else slot.grip
        slot.obs, slot.info = obs, info
        slot.history.append(obs)

    def _probe(self, slot: Slot, failure: Failure, field: str, step: int | None) -> None:
        """Ask the slot's sim (in order with its steps) whether the expert could still finish from ``step``."""
        if not (self.config.probe_recoverability and slot.worker.simulated):
            return
        try:
            slot.worker.send("recoverable", step)
        except WorkerDied:
            return  # the fault shows at the slot's next reply
        slot.pending.append(("probe", failure, field))

    def _refill_history(self, slot: Slot) -> None:
        """The history a policy sees at an attempt's first step or after a rewind: the observation now, repeated."""
        slot.plan.clear()
        slot.history.clear()
        slot.history.extend([slot.obs] * self.source.obs_horizon)  # type: ignore[list-item]

    def progress_curve(self, slot: Slot) -> list[float]:
        """What the fleet knows of the robot's progress on this branch: the critic's ratings, else ground truth."""
        return slot.branch_critic if self.critic is not None else slot.branch_progress

    def _last_in_distribution(self, slot: Slot) -> int:
        """The state to rewind to: where the critic rated the branch at its best (the state that step started
        from), or without a critic, where ground-truth progress was at its best (the state after that step)."""
        if self.critic is not None:
            smooth, tolerance = self.config.critic_smooth_steps, self.config.critic_tolerance
            return last_in_distribution(slot.branch_critic, tolerance, smooth) if slot.branch_critic else 0
        return last_in_distribution(slot.branch_progress) + 1 if slot.branch_progress else 0

    def _rate_new_steps(self) -> None:
        if self.critic is not None:
            self.critic.rate_new_steps(self.slots.values())
        if self.gate_rater is not None:
            self.gate_rater.rate_new_steps(self.slots.values())

    def _begin_reset(self, slot: Slot, reason: str, seconds: float = 0.0) -> None:
        slot.machine.to(S.RESETTING, reason)
        slot.busy_until = self.now() + seconds

    def _finish_resets(self) -> None:
        for slot in self.slots.values():
            if slot.state is S.EPISODE_DONE and self.auto_reset:
                self._begin_reset(slot, "automatic reset")
            if slot.state is S.IDLE and slot.needs_reset:
                self._begin_reset(slot, "reset before the next episode")
            underway = slot.reset_in_flight or slot.awaiting_reset
            if slot.state is S.RESETTING and slot.busy_until <= self.now() and not underway:
                self._send_reset(slot)
        ready = [s for s in self.slots.values() if s.state is S.IDLE and not s.needs_reset and s.attempt is not None]
        for slot in sorted(ready, key=lambda s: s.attempt.seed):  # type: ignore[union-attr]
            if self._episodes_started < self.config.episodes:  # the lowest seeds first: a run of N episodes
                self._start_attempt(slot)  # plays exactly the seeds seed … seed + N - 1

    def _send_reset(self, slot: Slot) -> None:
        """Queue the reset with this tick's requests; the slot is idle once the reply lands (`_reset_done`)."""
        seed = self._next_seed
        self._next_seed += 1
        try:
            slot.worker.send("reset", seed)
        except WorkerDied as exc:
            self._fault(slot, str(exc))
            return
        slot.pending.append(("reset", seed))

    def _reset_done(self, slot: Slot, seed: int, obs: dict[str, Any], info: dict[str, Any]) -> None:
        slot.obs, slot.info, slot.needs_reset = obs, info, False
        slot.attempt = AttemptBuffer(
            self.task, slot.robot, info.get("instruction", ""), seed, self.phases, self.source.obs_keys, self.dt,
            policy_version=self.source.version, failures=[] if slot.worker.simulated else None,
        )  # fmt: skip
        slot.new_branch()
        slot.grip = INITIAL_GRIP  # a reset opens the gripper: a hold before any command keeps it open
        if slot.worker.operator_resets:  # the arm is home; the scene is a person's to reset (confirm_reset)
            slot.awaiting_reset = True
            self.event("reset_awaiting_operator", "fleet", {}, slot.robot)
            return
        slot.machine.to(S.IDLE, "reset done")

    def _start_attempt(self, slot: Slot) -> None:
        assert slot.attempt is not None
        self._episodes_started += 1
        self._refill_history(slot)
        slot.machine.to(S.AUTONOMOUS, "episode start")
        self.event("episode_started", "fleet", {"task": self.task, "instruction": slot.attempt.instruction}, slot.robot)

    def _end_attempt(self, slot: Slot, outcome: str, reason: str = "") -> None:
        self.failure_watch.ended(slot, outcome)
        if outcome != "aborted":
            slot.faults_in_a_row = 0
        attempt, slot.attempt = slot.attempt, None
        slot.needs_reset = True
        slot.plan.clear()
        # steps still in flight land in no attempt; the answers to probes already asked are still filed
        slot.pending = deque(e if e is not None and e[0] == "probe" else None for e in slot.pending)
        if slot.machine.can(S.EPISODE_DONE):
            slot.machine.to(S.EPISODE_DONE, outcome)
        self._drop_lease(slot)
        if attempt is None or len(attempt) == 0:
            return
        tags = dict(self.config.episode_tags)  # the episodes are built later, on the recorder's thread
        self.recorder.finished(partial(attempt.episodes, outcome, reason, tags, self.config.emit_corrections))
        self.ledger.episodes[outcome] += 1

    def _fault(self, slot: Slot, reason: str) -> None:
        """The worker died: store what it did as ``aborted``, restart it, and reset the slot; a worker that keeps
        dying (``max_consecutive_faults``) ends the run instead."""
        if slot.state is S.FAULT:
            return
        self.event("fault", "fleet", {"reason": reason}, slot.robot)
        self._end_attempt(slot, "aborted", reason=reason)
        slot.machine.to(S.FAULT, reason)
        slot.pending.clear()  # the restarted worker answers nothing it was sent before
        slot.faults_in_a_row += 1
        if slot.faults_in_a_row >= self.config.max_consecutive_faults:
            # kept, so the next tick stops the fleet also where an operator's call (a rewind) met the death
            self._crash_loop = WorkerCrashLoop(
                f"robot {slot.robot}: its worker died {slot.faults_in_a_row} times in a row with no episode finished "
                f"in between (fleet max_consecutive_faults: {self.config.max_consecutive_faults}); last cause: {reason}"
            )
            raise self._crash_loop
        slot.worker.restart()
        slot.needs_reset, slot.awaiting_reset = True, False
        self._begin_reset(slot, "worker restarted")

    # -- reporting ----------------------------------------------------------------------------------------------
    def summary(self, wall_s: float) -> dict[str, Any]:
        return {
            "task": self.task,
            "robots": len(self.slots),
            "operators": len(self.operators),
            "sim_s": round(self.now(), 2),
            "wall_s": round(wall_s, 2),
            "control_steps_per_s": round(self.ticks * len(self.slots) / wall_s, 1) if wall_s else None,
            "critic": str(self.critic.directory) if self.critic is not None else None,
            **self.ledger.summary(self.operators_present_s(), len(self.operators), len(self.slots)),
            "failure_response": failure_report(self.failure_watch.failures),
        }

    def operators_present_s(self) -> dict[str, float]:
        """Role → the simulated operators' time on shift so far: each is present for the whole run (sim clock)."""
        present: dict[str, float] = {}
        for operator in self.operators:
            present[operator.role] = present.get(operator.role, 0.0) + self.now()
        return present

    def close(self) -> None:
        try:
            for slot in self.slots.values():
                slot.worker.close()
            self._log_safety(every_s=0.0)
        finally:
            self.recorder.close()
