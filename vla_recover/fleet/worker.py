"""Sim workers: one process per robot slot, driven over a pipe by the fleet manager.

A worker owns its env and the task's scripted expert (the simulated teleoperator's hands) and keeps the exact sim
state of its last ``rewind_capacity`` steps, so a rewind is a local restore rather than a state shipped over the
pipe every step. Requests are sent to every worker before any reply is read, so workers step in parallel.

Protocol (request → reply): ``("reset", seed)`` → ``(obs, info)``; ``("step", action | None)`` →
``(obs, info, terminated, truncated, action)`` where ``None`` asks the expert for the action and the reply carries
the action taken; ``("rewind_to", step)`` → ``(obs, info)``; ``("close",)``.
"""

from __future__ import annotations

import abc
import contextlib
import multiprocessing as mp
import os
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

__all__ = ["SimWorkerCore", "SimWorkerSpec", "Worker", "WorkerDied", "WorkerHandle"]


class Worker(abc.ABC):
    """What the fleet needs from a worker, whatever runs it (a process, a Ray actor, a robot).

    Requests are sent to every worker before any reply is read; a reply that is an exception instance is raised
    here, in the fleet; a worker that cannot answer raises `WorkerDied`.
    """

    name: str

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

    def receive(self, timeout: float = 120.0) -> Any:
        reply = self._reply(timeout)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def call(self, *request: Any) -> Any:
        self.send(*request)
        return self.receive()

    def restart(self) -> None:
        self.close(graceful=False)
        self.start()


class WorkerDied(RuntimeError):
    """The worker process is gone (killed, crashed) or stopped answering."""


@dataclass(frozen=True)
class SimWorkerSpec:
    task: str
    task_config: dict[str, Any]
    expert_config: dict[str, Any]
    rewind_capacity: int = 200


class SimWorkerCore:
    """What a worker does with one request, whatever carries the requests (a pipe, a Ray actor call)."""

    def __init__(self, spec: SimWorkerSpec) -> None:
        import torch

        from vla_recover.envs import make_expert, make_task

        torch.set_num_threads(1)
        self.spec = spec
        self.env = make_task(spec.task, spec.task_config)
        self.expert = make_expert(spec.task, self.env, spec.expert_config)
        self.history: OrderedDict[int, Any] = OrderedDict()  # step → exact sim state before that step
        self.step = 0

    def handle(self, request: tuple[Any, ...]) -> Any:
        """The reply to ``request``; an exception instance (not raised) when the request is wrong."""
        kind = request[0]
        if kind == "reset":
            seed = int(request[1])
            obs, info = self.env.reset(seed=seed)
            self.expert.reset(seed + 1)
            self.history.clear()
            self.step = 0
            return obs, info
        if kind == "step":
            self.history[self.step] = self.env.unwrapped.get_state()
            while len(self.history) > self.spec.rewind_capacity:
                self.history.popitem(last=False)
            action = self.expert() if request[1] is None else request[1]
            obs, _, terminated, truncated, info = self.env.step(action)
            self.step += 1
            return obs, info, terminated, truncated, np.asarray(action, np.float32)
        if kind == "rewind_to":
            target = int(request[1])
            if target not in self.history:
                return ValueError(f"rewind: step {target} is not among the last {len(self.history)} kept")
            obs, info = self.env.unwrapped.set_state(self.history[target])
            for later in [s for s in self.history if s >= target]:
                del self.history[later]
            self.step = target
            return obs, info
        if kind == "pid":
            return os.getpid()
        return ValueError(f"worker request: unknown kind {kind!r}")

    def close(self) -> None:
        self.env.close()


def _serve(connection: Connection, spec: SimWorkerSpec) -> None:
    core = SimWorkerCore(spec)
    try:
        while True:
            request = connection.recv()
            if request[0] == "close":
                break
            connection.send(core.handle(request))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        core.close()


class WorkerHandle(Worker):
    """The manager's end of one worker process: start, request, reply, restart after a death."""

    def __init__(self, spec: SimWorkerSpec, name: str) -> None:
        self.spec, self.name = spec, name
        self._context = mp.get_context("spawn")
        self.process: Any = None
        self._connection: Connection | None = None
        self.start()

    def start(self) -> None:
        parent, child = self._context.Pipe()
        self.process = self._context.Process(target=_serve, args=(child, self.spec), name=self.name, daemon=True)
        self.process.start()
        child.close()
        self._connection = parent

    @property
    def pid(self) -> int:
        return int(self.process.pid)

    def send(self, *request: Any) -> None:
        assert self._connection is not None
        try:
            self._connection.send(request)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
            raise WorkerDied(f"{self.name}: {exc}") from exc

    def _reply(self, timeout: float) -> Any:
        assert self._connection is not None
        try:
            if not self._connection.poll(timeout):
                raise WorkerDied(f"{self.name}: no reply within {timeout} s")
            return self._connection.recv()
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
            raise WorkerDied(f"{self.name}: {exc or 'pipe closed'}") from exc

    def close(self, graceful: bool = True) -> None:
        if self._connection is not None:
            if graceful and self.process.is_alive():
                with contextlib.suppress(OSError):
                    self._connection.send(("close",))
            self._connection.close()
            self._connection = None
        if self.process is not None:
            self.process.join(timeout=5 if graceful else 0.5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)

    def kill(self) -> None:
        os.kill(self.pid, 9)
