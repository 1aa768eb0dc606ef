"""Sim workers: one process per robot slot, driven over a pipe by the fleet manager.

A worker owns its env and the task's scripted expert (the simulated teleoperator's hands) and keeps the exact sim
state of its last ``rewind_capacity`` steps, so a rewind is a local restore rather than a state shipped over the
pipe every step. Requests are sent to every worker before any reply is read, so workers step in parallel.

Protocol (request → reply): ``("reset", seed)`` → ``(obs, info)``; ``("step", action | None)`` →
``(obs, info, terminated, truncated, action)`` where ``None`` asks the expert for the action and the reply carries
the action taken; ``("rewind_to", step)`` → ``(obs, info)``; ``("close",)``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
from collections import OrderedDict
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

__all__ = ["SimWorkerSpec", "WorkerDied", "WorkerHandle"]


class WorkerDied(RuntimeError):
    """The worker process is gone (killed, crashed) or stopped answering."""


@dataclass(frozen=True)
class SimWorkerSpec:
    task: str
    task_config: dict[str, Any]
    expert_config: dict[str, Any]
    rewind_capacity: int = 200


def _serve(connection: Connection, spec: SimWorkerSpec) -> None:
    import torch

    from vla_recover.envs import make_expert, make_task

    torch.set_num_threads(1)
    env = make_task(spec.task, spec.task_config)
    expert = make_expert(spec.task, env, spec.expert_config)
    history: OrderedDict[int, Any] = OrderedDict()  # step → exact sim state before that step
    step = 0
    try:
        while True:
            request = connection.recv()
            kind = request[0]
            if kind == "close":
                break
            if kind == "reset":
                seed = int(request[1])
                obs, info = env.reset(seed=seed)
                expert.reset(seed + 1)
                history.clear()
                step = 0
                connection.send((obs, info))
            elif kind == "step":
                history[step] = env.unwrapped.get_state()
                while len(history) > spec.rewind_capacity:
                    history.popitem(last=False)
                action = expert() if request[1] is None else request[1]
                obs, _, terminated, truncated, info = env.step(action)
                step += 1
                connection.send((obs, info, terminated, truncated, np.asarray(action, np.float32)))
            elif kind == "rewind_to":
                target = int(request[1])
                if target not in history:
                    connection.send(ValueError(f"rewind: step {target} is not among the last {len(history)} kept"))
                    continue
                obs, info = env.unwrapped.set_state(history[target])
                for later in [s for s in history if s >= target]:
                    del history[later]
                step = target
                connection.send((obs, info))
            else:
                connection.send(ValueError(f"worker request: unknown kind {kind!r}"))
    except (EOFError, KeyboardInterrupt):
        pass
    finally:
        env.close()


class WorkerHandle:
    """The manager's end of one worker: start, request, reply, restart after a death."""

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

    def receive(self, timeout: float = 60.0) -> Any:
        assert self._connection is not None
        try:
            if not self._connection.poll(timeout):
                raise WorkerDied(f"{self.name}: no reply within {timeout} s")
            reply = self._connection.recv()
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
            raise WorkerDied(f"{self.name}: {exc or 'pipe closed'}") from exc
        if isinstance(reply, Exception):
            raise reply
        return reply

    def call(self, *request: Any) -> Any:
        self.send(*request)
        return self.receive()

    def restart(self) -> None:
        self.close(graceful=False)
        self.start()

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
        """SIGKILL the worker (tests and fault drills)."""
        os.kill(self.pid, 9)
