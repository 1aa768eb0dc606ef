"""Sim workers as Ray actors (``backend: ray``), so one fleet can span the machines of a Ray cluster.

Same requests and replies as the process backend (the actor wraps the same `SimWorkerCore`); a dead actor surfaces
as `WorkerDied`, so the fleet's fault handling is unchanged. Actors are spread over the cluster's nodes (Ray's SPREAD
strategy), so a lost node faults only the robots it ran: their episodes so far are committed as aborted, and each
robot restarts in a new actor on a node that is still there. An actor paints its robot's view for the console as a
worker process does, after its reply (`vla_recover.fleet.views`), where it shares the fleet's view folder: on the
console's machine, or on another with that folder on a shared filesystem (elsewhere it finds no view wanted and
paints nothing). Needs the ``ray`` extra.
"""

from __future__ import annotations

import time
from typing import Any

from vla_recover.fleet.worker import SimWorkerCore, SimWorkerSpec, Worker, WorkerDied

__all__ = ["RayWorkerHandle", "init_ray"]


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend ray needs Ray: pip install 'vla-recover[ray]'") from exc
    return ray


def init_ray(address: str | None) -> None:
    """Join the cluster at ``address`` ("auto" for the one `ray start` last started here), or, without one, start a
    private local Ray (Ray's own default would join that last cluster, even one that has since died)."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False, configure_logging=False)


class _SimWorkerActor:
    def __init__(self, spec: SimWorkerSpec, robot: str) -> None:
        self.core = SimWorkerCore(spec, robot)

    def handle(self, request: tuple[Any, ...]) -> Any:
        return self.core.handle(request)

    def paint(self) -> None:
        self.core.paint()

    def node(self) -> str:
        return str(_ray().get_runtime_context().get_node_id())


class RayWorkerHandle(Worker):
    """The fleet's end of one Ray actor."""

    simulated = True

    def __init__(self, spec: SimWorkerSpec, name: str, robot: str = "") -> None:
        """``name``: the actor's, in logs and errors; ``robot``: the robot it simulates (its view's name)."""
        self.spec, self.name, self.robot = spec, name, robot
        self._actor: Any = None
        self._pending: Any = None
        self.start()

    def start(self) -> None:
        ray = _ray()
        actor = ray.remote(num_cpus=0.5, max_restarts=0, scheduling_strategy="SPREAD")(_SimWorkerActor)
        self._actor = actor.remote(self.spec, self.robot)
        self._pending = None

    @property
    def pid(self) -> int:
        return int(self.call("pid"))

    def node(self, timeout: float = 30.0) -> str:
        """The id of the Ray node the actor runs on."""
        return str(_ray().get(self._actor.node.remote(), timeout=timeout))

    def send(self, *request: Any) -> None:
        if self._actor is None:
            raise WorkerDied(f"{self.name}: closed")
        self._pending = self._actor.handle.remote(request)
        if self.spec.views and self.robot:  # after the reply, in the actor's order: the fleet does not wait for it
            self._actor.paint.remote()

    def _reply(self, timeout: float) -> Any:
        ray = _ray()
        try:
            return ray.get(self._pending, timeout=timeout)
        except ray.exceptions.GetTimeoutError as exc:
            raise WorkerDied(f"{self.name}: no reply within {timeout} s") from exc
        except ray.exceptions.RayActorError as exc:
            raise WorkerDied(f"{self.name}: actor died ({type(exc).__name__})") from exc
        finally:
            self._pending = None

    def close(self, graceful: bool = True) -> None:
        if self._actor is not None:
            _ray().kill(self._actor)
            self._actor = None

    def kill(self) -> None:
        """Kill the actor and return once it is gone (Ray kills asynchronously; a drill needs it dead now)."""
        ray = _ray()
        ray.kill(self._actor, no_restart=True)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            try:
                ray.get(self._actor.handle.remote(("pid",)), timeout=5.0)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                return
            time.sleep(0.05)
