"""Sim workers: one process per robot slot, driven over a pipe by the fleet manager.

A worker owns its env and the task's scripted expert (the simulated teleoperator's hands) and can restore the exact
sim state of any of its last ``rewind_capacity`` steps, so a rewind is local rather than a state shipped over the
pipe every step. Requests are sent to every worker before any reply is read, so workers step in parallel.

A process can host several slots' sims (`WorkerProcess`); a tick's requests to it are one message, a list of
``(slot index, request)``, answered by a list of ``(slot index, reply)``.

Protocol (request → reply): ``("reset", seed)`` → ``(obs, info)``; ``("step", action | None)`` →
``(obs, info, terminated, truncated, action)``, its info cut to ``STEP_INFO``, where ``None`` asks the expert for the
action and the reply carries the action taken (``EPISODE_OVER`` once the episode has ended: a step that ran ahead
past the end is not taken); ``("rewind_to", step)`` → ``(obs, info)``; ``("recoverable", step | None)`` → whether the
scripted expert, started from the exact state at that step (None: now), completes the task before the episode's
horizon (run in a scratch sim, so the robot's own is untouched); ``("preview", step, width, height)`` → a JPEG of the
front camera at the exact state before that step (a rewind's preview, rendered in the scratch sim); ``("close",)``.
"""

from __future__ import annotations

import abc
import contextlib
import multiprocessing as mp
import os
import time
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from vla_recover.fleet.views import ViewPainter, paint

__all__ = [
    "EPISODE_OVER",
    "SimWorkerCore",
    "SimWorkerSpec",
    "Worker",
    "WorkerCrashLoop",
    "WorkerDied",
    "WorkerHandle",
    "WorkerProcess",
]


class Worker(abc.ABC):
    """What the fleet needs from a worker, whatever runs it (a process, a Ray actor, a robot).

    Requests are sent to every worker before any reply is read; a reply that is an exception instance is raised
    here, in the fleet; a worker that cannot answer raises `WorkerDied`.
    """

    name: str
    runs_ahead = False  # whether requests may queue up: replies then come back in order, one per request
    simulated = False  # a sim, which answers ``recoverable`` probes (SimWorkerCore)
    safety_filtered = False  # a robot behind its safety filter, which checks every command it is sent
    operator_resets = False  # a person resets the robot's scene and confirms it (`OperatorAPI.confirm_reset`)

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def send(self, *request: Any) -> None: ...

    @abc.abstractmethod
    def _reply(self, timeout: float) -> Any: ...

    @abc.abstractmethod
    def close(self, graceful: bool = True) -> None: ...

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop the worker without warning (tests and fault drills)."""

    def estop(self, who: str, reason: str) -> None:  # noqa: B027 - a sim has no latch: the fleet stops sending
        """Latch the robot's own e-stop, where it has one (a hardware slot's safety filter)."""

    def clear_estop(self, who: str) -> None:  # noqa: B027
        """Clear that latch; logged by the filter with who cleared it."""

    def flush(self) -> None:
        """Send what ``send`` queued, for workers that batch requests; the fleet calls it after each round of sends."""
        return None

    def receive(self, timeout: float = 120.0) -> Any:
        reply = self._reply(timeout)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def call(self, *request: Any) -> Any:
        self.send(*request)
        self.flush()
        return self.receive()

    def restart(self) -> None:
        self.close(graceful=False)
        self.start()


class WorkerDied(RuntimeError):
    """The worker process is gone (killed, crashed) or stopped answering."""


class WorkerCrashLoop(RuntimeError):
    """A robot's worker died ``FleetConfig.max_consecutive_faults`` times in a row: restarting it again would loop."""


@dataclass(frozen=True)
class SimWorkerSpec:
    task: str
    task_config: dict[str, Any]
    expert_config: dict[str, Any]
    rewind_capacity: int = 200
    views: str | None = None  # the fleet's view folder (vla_recover.fleet.views); None: no views are painted


# what the fleet reads of a step's info (the instruction and the failure log only change at a reset)
STEP_INFO = ("phase_index", "progress", "is_success", "failure")
# the reply to a step sent after the episode ended (the fleet drops those steps; the sim does not take them)
EPISODE_OVER = "episode over"


class SimWorkerCore:
    """What a worker does with one request, whatever carries the requests (a pipe, a Ray actor call).

    Rewinds are exact: the sim state is saved every ``CHECKPOINT_EVERY`` steps with the actions since, and a rewind
    restores the checkpoint at or before the target and replays the actions up to it (MuJoCo is deterministic).
    Saving every step instead would cost about a tenth of a step's time on every step.
    """

    CHECKPOINT_EVERY = 10

    def __init__(self, spec: SimWorkerSpec, robot: str = "") -> None:
        import torch

        from vla_recover.envs import control_period, make_expert, make_task

        torch.set_num_threads(1)
        self.spec = spec
        self.env = make_task(spec.task, spec.task_config)
        self.expert = make_expert(spec.task, self.env, spec.expert_config)
        self.checkpoints: OrderedDict[int, Any] = OrderedDict()  # step → exact sim state before that step
        self.actions: dict[int, np.ndarray] = {}  # step → the action taken at it, back to the oldest checkpoint
        self.step = self.furthest_step = 0
        self.episode_over = False  # steps that ran ahead past the episode's end are answered without stepping
        self._scratch: tuple[Any, Any] | None = None  # (env, expert) for recoverability probes, made on first use
        self.painter = (
            ViewPainter(spec.views, robot, control_period(spec.task, spec.task_config))
            if spec.views and robot
            else None
        )
        self._moved = 0  # control steps since the view was last considered

    def handle(self, request: tuple[Any, ...]) -> Any:
        """The reply to ``request``; an exception instance (not raised) when the request is wrong."""
        if request[0] == "step":
            self._moved += 1
        elif request[0] in ("reset", "rewind_to"):  # a jump: shown at once
            self._moved += ViewPainter.JUMP
        return self._handle(request)

    def paint(self) -> None:
        """Paint the robot's view if it moved, someone watches and a frame is due: called after the replies are
        sent, so the fleet does not wait for it."""
        if self.painter is not None and self._moved:
            self.painter.after_steps(self.env, self._moved)
        self._moved = 0

    def _handle(self, request: tuple[Any, ...]) -> Any:
        kind = request[0]
        if kind == "reset":
            seed = int(request[1])
            obs, info = self.env.reset(seed=seed)
            self.expert.reset(seed + 1)
            self.checkpoints.clear()
            self.actions.clear()
            self.step = self.furthest_step = 0
            self.episode_over = False
            return obs, info
        if kind == "step" and self.episode_over:
            return EPISODE_OVER
        if kind == "step":
            if self.step % self.CHECKPOINT_EVERY == 0:
                self.checkpoints[self.step] = self.env.unwrapped.get_state()
                self._forget_beyond_capacity()
            action = np.asarray(self.expert() if request[1] is None else request[1], np.float32)
            obs, _, terminated, truncated, info = self.env.step(action)
            self.actions[self.step] = action
            self.step += 1
            self.furthest_step = max(self.furthest_step, self.step)
            self.episode_over = bool(terminated or truncated)
            return obs, {key: info[key] for key in STEP_INFO if key in info}, terminated, truncated, action
        if kind == "rewind_to":
            return self._rewind_to(int(request[1]))
        if kind == "recoverable":
            return self._recoverable(None if request[1] is None else int(request[1]))
        if kind == "preview":
            return self._preview(int(request[1]), int(request[2]), int(request[3]))
        if kind == "pid":
            return os.getpid()
        return ValueError(f"worker request: unknown kind {kind!r}")

    def _forget_beyond_capacity(self) -> None:
        """Keep what rewinding ``rewind_capacity`` steps back from the furthest step needs: the newest checkpoint at
        or before that. Measured from the furthest step, not the current one, so a rewind followed by another never
        asks for a state dropped before the first."""
        oldest_target = self.furthest_step - self.spec.rewind_capacity
        while len(self.checkpoints) > 1 and list(self.checkpoints)[1] <= oldest_target:
            self.checkpoints.popitem(last=False)
        first = next(iter(self.checkpoints))
        for step in [s for s in self.actions if s < first]:
            del self.actions[step]

    def _replay_to(self, sim: Any, target: int) -> None:
        """Put ``sim`` in the exact state before step ``target``: the checkpoint at or before it, then the actions."""
        base = max(step for step in self.checkpoints if step <= target)
        sim.set_state(self.checkpoints[base])
        for step in range(base, target):
            sim.step(self.actions[step])

    def _scratch_at(self, target: int | None, request: str) -> Any:
        """The scratch (env, expert), its sim put in the exact state before step ``target`` (None: now), or the
        ValueError for a step no longer kept."""
        oldest = min(self.checkpoints, default=self.step)
        if target is not None and not oldest <= target <= self.step:
            return ValueError(f"{request}: step {target} is not among the steps {oldest}..{self.step} kept")
        if self._scratch is None:
            from vla_recover.envs import make_expert, make_task

            env = make_task(self.spec.task, self.spec.task_config)
            env.reset(seed=0)
            self._scratch = (env, make_expert(self.spec.task, env, self.spec.expert_config))
        sim = self._scratch[0].unwrapped
        if target is None or target == self.step:
            sim.set_state(self.env.unwrapped.get_state())
        else:
            self._replay_to(sim, target)
            sim.set_state(sim.get_state())  # positions computed for the state itself, as after a rewind
        return self._scratch

    def _preview(self, target: int, width: int, height: int) -> Any:
        scratch = self._scratch_at(target, "preview")
        if isinstance(scratch, ValueError):
            return scratch
        frame = paint(scratch[0], width, height)
        return frame if frame is not None else ValueError(f"preview: task {self.spec.task} has no views to render")

    def _recoverable(self, target: int | None) -> Any:
        scratch = self._scratch_at(target, "recoverable")
        if isinstance(scratch, ValueError):
            return scratch
        env, expert = scratch
        sim = env.unwrapped
        expert.reset(self.step)
        while True:
            _, _, terminated, truncated, info = sim.step(expert())
            if terminated or truncated:
                return bool(info["is_success"])

    def _rewind_to(self, target: int) -> Any:
        oldest = max(0, self.furthest_step - self.spec.rewind_capacity)
        if not oldest <= target < self.step:
            return ValueError(f"rewind: step {target} is not among the last {self.step - oldest} kept")
        sim = self.env.unwrapped
        self._replay_to(sim, target)
        obs, info = sim.set_state(sim.get_state())  # the observation and info at the target, as after a restore
        for later in [s for s in self.checkpoints if s > target]:
            del self.checkpoints[later]
        for later in [s for s in self.actions if s >= target]:
            del self.actions[later]
        self.step = target
        self.episode_over = False
        return obs, info

    def close(self) -> None:
        self.env.close()
        if self._scratch is not None:
            self._scratch[0].close()


def _serve(connection: Connection, spec: SimWorkerSpec, robots: list[str], waited_s: Any, waiting_since: Any) -> None:
    cores = [SimWorkerCore(spec, robot) for robot in robots]
    try:
        while True:
            waiting_since.value = since = time.monotonic()
            batch = connection.recv()
            waiting_since.value = 0.0  # before the total grows: a reader in between undercounts, never counts twice
            waited_s.value += time.monotonic() - since
            if batch is None:
                break
            connection.send([(index, cores[index].handle(request)) for index, request in batch])
            for core in cores:
                core.paint()
    except (EOFError, BrokenPipeError, KeyboardInterrupt):  # the manager is gone, or closed with steps in flight
        pass
    finally:
        for core in cores:
            core.close()


class WorkerProcess:
    """One OS process hosting the sims of ``size`` slots; their requests of one tick travel as one message.

    More slots per process means fewer messages and context switches per tick (throughput on few cores); one slot
    per process isolates robots (a crash takes down only its own). ``generation`` counts restarts, so a slot can
    tell that its sim was replaced under it. ``waited_s``: seconds the process has spent waiting for requests.
    """

    def __init__(self, spec: SimWorkerSpec, size: int, name: str, robots: list[str] | None = None) -> None:
        self.spec, self.size, self.name = spec, size, name
        self.robots = robots or [""] * size  # the robots its slots serve (named: their views are painted)
        self._context = mp.get_context("spawn")
        # seconds waited so far, and since when it has been waiting now (0: busy); written by the process only
        self._waited_s = self._context.Value("d", 0.0, lock=False)
        self._waiting_since = self._context.Value("d", 0.0, lock=False)
        self.process: Any = None
        self.generation = 0
        self._connection: Connection | None = None
        self._pending: list[tuple[int, tuple[Any, ...]]] = []
        self._replies: dict[int, deque[Any]] = defaultdict(deque)  # per slot, in request order
        self._open_slots = size
        self.start()

    def start(self) -> None:
        parent, child = self._context.Pipe()
        self.process = self._context.Process(
            target=_serve,
            args=(child, self.spec, self.robots, self._waited_s, self._waiting_since),
            name=self.name,
            daemon=True,
        )
        self.process.start()
        child.close()
        self._connection = parent
        self._pending.clear()
        self._replies.clear()

    @property
    def waited_s(self) -> float:
        since = self._waiting_since.value
        return float(self._waited_s.value) + (time.monotonic() - since if since else 0.0)

    def queue(self, index: int, request: tuple[Any, ...]) -> None:
        self._pending.append((index, request))

    def flush(self) -> None:
        """Send the queued requests as one message."""
        if not self._pending:
            return
        assert self._connection is not None
        batch, self._pending = self._pending, []
        try:
            self._connection.send(batch)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
            raise WorkerDied(f"{self.name}: {exc}") from exc

    def reply(self, index: int, timeout: float) -> Any:
        self.flush()
        while not self._replies[index]:
            assert self._connection is not None
            try:
                if not self._connection.poll(timeout):
                    raise WorkerDied(f"{self.name}: no reply within {timeout} s")
                for slot, reply in self._connection.recv():
                    self._replies[slot].append(reply)
            except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
                raise WorkerDied(f"{self.name}: {exc or 'pipe closed'}") from exc
        return self._replies[index].popleft()

    def restart(self) -> None:
        self.stop(graceful=False)
        self.generation += 1
        self.start()

    def release(self, graceful: bool) -> None:
        """One slot is done with this process; the last one to leave stops it."""
        self._open_slots -= 1
        if self._open_slots <= 0:
            self.stop(graceful)

    def stop(self, graceful: bool = True) -> None:
        if self._connection is not None:
            if graceful and self.process.is_alive():
                with contextlib.suppress(OSError):
                    self._connection.send(None)
            self._connection.close()
            self._connection = None
        if self.process is not None:
            self.process.join(timeout=5 if graceful else 0.5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)


class WorkerHandle(Worker):
    """The manager's end of one slot's sim: slot ``index`` of a `WorkerProcess` (its own process by default)."""

    runs_ahead = True
    simulated = True

    def __init__(self, spec: SimWorkerSpec, name: str, process: WorkerProcess | None = None, index: int = 0) -> None:
        self.spec, self.name = spec, name
        self.host = process or WorkerProcess(spec, 1, name)
        self.index = index
        self._generation = self.host.generation

    def start(self) -> None:
        if self.host.process is None:
            self.host.start()

    @property
    def pid(self) -> int:
        return int(self.host.process.pid)

    def _current(self) -> None:
        if self._generation != self.host.generation:
            raise WorkerDied(f"{self.name}: its process {self.host.name} was restarted")

    def send(self, *request: Any) -> None:
        self._current()
        self.host.queue(self.index, request)

    def flush(self) -> None:
        self.host.flush()

    def _reply(self, timeout: float) -> Any:
        self._current()
        return self.host.reply(self.index, timeout)

    def restart(self) -> None:
        """A fresh sim for this slot: restarts the process unless a neighbour's failure already did."""
        if self._generation == self.host.generation:
            self.host.restart()
        self._generation = self.host.generation

    def close(self, graceful: bool = True) -> None:
        self.host.release(graceful)

    def kill(self) -> None:
        os.kill(self.pid, 9)
