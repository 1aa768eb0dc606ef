"""What the fleet writes to the store: events as they happen, finished attempts in batches, off the control loop.

Writes run on a thread of their own, in the order the fleet asked for them, so the control loop never waits on the
disk: a tick that ends twelve attempts costs it a few list appends, not the tens of milliseconds that turning them
into episodes and writing them takes (the sims, running ahead, keep stepping meanwhile). Episodes are written a
batch at a time (one write per array key), every ``store_every_s`` seconds and when the fleet closes. Batches
are made by time alone because a write's cost is mostly zarr's per-chunk work, not the bytes: 48 LiftCube episodes
cost twice what 12 do, so on a busy machine bigger batches leave the sims more CPU. A write that fails is raised in
the control loop at its next call here (and at every one after); what was stored before it stays stored, and what
was queued after it is still written. `sync` waits until everything asked for is written; `call` runs a function
on the store between writes, for readers and writers outside the fleet (the console).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from vla_recover.data import EpisodeData, EpisodeStore

__all__ = ["FleetRecorder"]

EpisodeMaker = Callable[[], list[EpisodeData]]  # turns a finished attempt into its episodes, on the writer thread


class FleetRecorder:
    def __init__(self, store: str | Path, store_every_s: float) -> None:
        self.store = EpisodeStore(store, mode="a")
        self.store_every_s = store_every_s
        self._unstored: list[EpisodeMaker] = []
        self._oldest_unstored = 0.0
        self._jobs: queue.Queue[tuple[str, Any] | None] = queue.Queue()
        self._failure: BaseException | None = None
        self._writer = threading.Thread(target=self._write_jobs, name="fleet-store-writer", daemon=True)
        self._writer.start()

    # -- asked for by the control loop --------------------------------------------------------------------------------
    def event(self, kind: str, actor: str, payload: dict[str, Any], robot: str | None, sim_time: float) -> None:
        self._raise_failure()
        self._jobs.put(("event", (kind, actor, {**payload, "sim_time": round(sim_time, 3)}, robot, time.time())))

    def finished(self, make_episodes: EpisodeMaker) -> None:
        """Queue a finished attempt for the next batch; ``make_episodes`` builds its episodes when it is written."""
        self._raise_failure()
        if not self._unstored:
            self._oldest_unstored = time.monotonic()
        self._unstored.append(make_episodes)

    def flush(self, force: bool = False) -> None:
        """Hand the queued attempts to the writer if the batch is due (or ``force``)."""
        self._raise_failure()
        if not self._unstored:
            return
        if force or time.monotonic() - self._oldest_unstored >= self.store_every_s:
            self._hand_over()

    def sync(self) -> None:
        """Wait until everything asked for so far is in the store (raises a write that failed)."""
        self._jobs.join()
        self._raise_failure()

    def call(self, function: Callable[[EpisodeStore], Any]) -> Any:
        """``function(store)`` on the writer thread, after the writes asked for before it; its result or exception."""
        self._raise_failure()
        answer: Future[Any] = Future()
        self._jobs.put(("call", (function, answer)))
        return answer.result()

    def close(self) -> None:
        """Write what is queued, stop the writer, close the store; then raise a write that failed."""
        self._hand_over()
        self._jobs.put(None)
        self._writer.join()
        self.store.close()
        self._raise_failure()

    def _hand_over(self) -> None:
        if self._unstored:
            batch, self._unstored = self._unstored, []
            self._jobs.put(("episodes", batch))

    def _raise_failure(self) -> None:
        """Raise the first write that failed, at every call from then on: the fleet stops rather than record on
        around a hole."""
        if self._failure is not None:
            raise RuntimeError(f"fleet store {self.store.path}: a write failed: {self._failure}") from self._failure

    # -- the writer thread --------------------------------------------------------------------------------------------
    def _write_jobs(self) -> None:
        while True:
            jobs = [self._jobs.get()]
            while not self._jobs.empty():  # take what else is waiting (this thread is the only reader)
                jobs.append(self._jobs.get_nowait())
            try:
                self._write([job for job in jobs if job is not None])
            except BaseException as exc:  # each write is guarded; this keeps the thread (and `sync`) alive regardless
                self._failure = self._failure or exc
            finally:
                for _ in jobs:
                    self._jobs.task_done()
            if None in jobs:
                return

    def _write(self, jobs: list[tuple[str, Any]]) -> None:
        """The jobs in order; a run of events is one transaction."""
        for kind, run in itertools.groupby(jobs, key=lambda job: job[0]):
            contents = [content for _, content in run]
            if kind == "event":
                self._guarded(self._write_events, contents)
            elif kind == "episodes":
                for batch in contents:
                    self._guarded(self._write_episodes, batch)
            else:
                for function, answer in contents:
                    try:
                        answer.set_result(function(self.store))
                    except Exception as exc:  # the caller's to handle
                        answer.set_exception(exc)

    def _guarded(self, write: Callable[[Any], None], content: Any) -> None:
        try:
            write(content)
        except Exception as exc:  # raised in the control loop at its next call; later writes still go on
            self._failure = self._failure or exc

    def _write_events(self, events: list[Any]) -> None:
        self.store.append_events(
            [(kind, actor, payload, robot, None, wall_time) for kind, actor, payload, robot, wall_time in events]
        )

    def _write_episodes(self, makers: list[EpisodeMaker]) -> None:
        self.store.append_episodes([episode for make in makers for episode in make()])
