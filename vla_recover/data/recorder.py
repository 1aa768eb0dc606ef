"""One process owns the store and writes; every other process sends it steps and events.

Workers (fleet slots, collectors) hold a :class:`RecorderClient` and stream ``begin`` / ``steps`` / ``end``
messages through a bounded queue; the :class:`Recorder` buffers each open episode, and commits finished ones in
batches (one write per key, one SQLite transaction), at most ``flush_interval`` seconds after they end. An episode
whose worker dies before ``end`` is never committed.

Given ``seed_order``, the recorder commits episodes in that order of their ``info["seed"]``, holding each until
those before it have come: a store that several workers fill then has the same ids and layout on every run, so
seeded training on it is reproducible.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_recover.data.schema import EpisodeData, SchemaError
from vla_recover.data.store import EpisodeStore

__all__ = ["Recorder", "RecorderClient", "RecorderStats"]


@dataclass
class RecorderStats:
    episodes: int = 0
    steps: int = 0
    events: int = 0
    aborted: int = 0
    rejected: int = 0
    batches: int = 0
    committed_ids: list[int] = field(default_factory=list)


@dataclass
class _OpenEpisode:
    meta: dict[str, Any]
    chunks: dict[str, list[np.ndarray]] = field(default_factory=dict)


class RecorderClient:
    """Picklable handle that worker processes use to send data to the recorder."""

    def __init__(self, channel: Any, source: str) -> None:
        self._channel = channel
        self.source = source

    def _send(self, *message: Any) -> None:
        self._channel.put(message, timeout=60.0)

    def begin_episode(self, key: str, task: str, robot: str, instruction: str = "", **meta: Any) -> None:
        self._send("begin", f"{self.source}/{key}", {"task": task, "robot": robot, "instruction": instruction, **meta})

    def add_steps(self, key: str, steps: dict[str, np.ndarray]) -> None:
        """Steps of an open episode, each array (n, ...); may be sent one step or many at a time."""
        self._send("steps", f"{self.source}/{key}", steps)

    def end_episode(self, key: str, outcome: str, **meta: Any) -> None:
        self._send("end", f"{self.source}/{key}", {"outcome": outcome, **meta})

    def abort_episode(self, key: str) -> None:
        self._send("abort", f"{self.source}/{key}", None)

    def record_episode(self, episode: EpisodeData) -> None:
        """A complete episode in one message."""
        self._send("episode", None, episode)

    def event(self, kind: str, actor: str, payload: dict[str, Any], robot: str | None = None) -> None:
        self._send("event", None, {"kind": kind, "actor": actor, "payload": payload, "robot": robot})


class Recorder:
    """Runs in the process that owns ``store``: call :meth:`serve` (blocking) or :meth:`pump` in a loop."""

    def __init__(
        self,
        store: EpisodeStore,
        context: Any = None,
        max_queue: int = 4096,
        batch_episodes: int = 16,
        flush_interval: float = 0.5,
        seed_order: Sequence[int] | None = None,
    ) -> None:
        self.store = store
        self.channel = (context or mp.get_context("spawn")).Queue(maxsize=max_queue)
        self.batch_episodes = batch_episodes
        self.flush_interval = flush_interval
        self.stats = RecorderStats()
        self._open: dict[str, _OpenEpisode] = {}
        self._finished: list[EpisodeData] = []
        self._oldest_finished = 0.0
        self._seed_order = deque(seed_order) if seed_order is not None else None
        self._held: dict[int, EpisodeData] = {}

    def client(self, source: str) -> RecorderClient:
        return RecorderClient(self.channel, source)

    def pump(self, timeout: float = 0.1, max_messages: int = 10_000) -> int:
        """Handle waiting messages, waiting up to ``timeout`` for the first; flush when due. Returns the count."""
        handled = 0
        deadline = time.monotonic() + timeout
        while handled < max_messages:
            try:
                wait = max(0.0, deadline - time.monotonic()) if handled == 0 else 0.0
                message = self.channel.get(timeout=wait) if wait > 0 else self.channel.get_nowait()
            except queue.Empty:
                break
            self._handle(*message)
            handled += 1
        if self._finished and (
            len(self._finished) >= self.batch_episodes
            or time.monotonic() - self._oldest_finished >= self.flush_interval
        ):
            self.flush()
        return handled

    def flush(self) -> list[int]:
        if not self._finished:
            return []
        batch, self._finished = self._finished, []
        try:
            ids = self.store.append_episodes(batch)
        except SchemaError:
            batch, ids = self._append_one_by_one(batch)
        self.stats.episodes += len(ids)
        self.stats.steps += sum(e.length for e in batch)
        self.stats.batches += 1
        self.stats.committed_ids.extend(ids)
        return ids

    def _append_one_by_one(self, batch: list[EpisodeData]) -> tuple[list[EpisodeData], list[int]]:
        """A batch with a bad episode: commit the good ones, log each bad one with its reason."""
        kept, ids = [], []
        for episode in batch:
            try:
                ids.append(self.store.append_episode(episode))
                kept.append(episode)
            except SchemaError as exc:
                self.stats.rejected += 1
                self.store.append_event(
                    "episode_rejected", "recorder", {"reason": str(exc), "task": episode.task}, robot=episode.robot
                )
        return kept, ids

    def drain(self, idle: float = 0.2) -> None:
        """Handle everything until the queue stays empty for ``idle`` seconds, then commit."""
        while self.pump(timeout=idle):
            pass
        self.flush()

    def _handle(self, kind: str, key: str | None, body: Any) -> None:
        if kind == "episode":
            self._finish(body)
        elif kind == "begin":
            assert key is not None
            self._open[key] = _OpenEpisode(body)
        elif kind == "steps":
            episode = self._open.get(key or "")
            if episode is None:
                raise KeyError(f"steps for episode {key!r}, which was never begun")
            for name, value in body.items():
                episode.chunks.setdefault(name, []).append(np.asarray(value))
        elif kind == "end":
            episode = self._open.pop(key or "")
            meta = {**episode.meta, **body}
            steps = {name: np.concatenate(parts) for name, parts in episode.chunks.items()}
            self._finish(
                EpisodeData(
                    task=meta.pop("task"),
                    steps=steps,
                    robot=meta.pop("robot"),
                    instruction=meta.pop("instruction"),
                    outcome=meta.pop("outcome"),
                    actor=meta.pop("actor", "policy"),
                    policy_version=meta.pop("policy_version", ""),
                    phases=tuple(meta.pop("phases", ())),
                    info=meta,
                )
            )
        elif kind == "abort":
            self._open.pop(key or "", None)
            self.stats.aborted += 1
        elif kind == "event":
            self.store.append_event(body["kind"], body["actor"], body["payload"], robot=body["robot"])
            self.stats.events += 1
        else:
            raise ValueError(f"recorder message kind: got {kind!r}")

    def _finish(self, episode: EpisodeData) -> None:
        if self._seed_order is None:
            self._queue_for_commit(episode)
            return
        seed = episode.info.get("seed")
        if not isinstance(seed, int) or seed not in self._seed_order or seed in self._held:
            raise ValueError(f"episode info.seed: got {seed!r}; expected one of the recorder's seed_order, once")
        self._held[seed] = episode
        while self._seed_order and self._seed_order[0] in self._held:
            self._queue_for_commit(self._held.pop(self._seed_order.popleft()))

    def release_held(self) -> list[int]:
        """Commit the episodes still held for a seed that never came (its worker died), in seed order; their ids."""
        if self._seed_order is not None:
            released = [seed for seed in self._seed_order if seed in self._held]
            for seed in released:
                self._queue_for_commit(self._held.pop(seed))
            self._seed_order = deque(seed for seed in self._seed_order if seed not in released)
        return self.flush()

    def _queue_for_commit(self, episode: EpisodeData) -> None:
        if not self._finished:
            self._oldest_finished = time.monotonic()
        self._finished.append(episode)
