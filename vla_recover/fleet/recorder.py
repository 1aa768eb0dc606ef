"""What the fleet writes to the store: events as they happen, finished attempts in batches.

Episodes are written a batch at a time (one write per array key), every ``store_every_s`` seconds, as soon as every
robot has one waiting, and when the fleet closes, so storage costs the control loop one write per batch rather
than one per episode.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from vla_recover.data import EpisodeData, EpisodeStore

__all__ = ["FleetRecorder"]


class FleetRecorder:
    def __init__(self, store: str | Path, store_every_s: float, batch_size: int) -> None:
        self.store = EpisodeStore(store, mode="a")
        self.store_every_s = store_every_s
        self.batch_size = batch_size
        self._unstored: list[EpisodeData] = []
        self._oldest_unstored = 0.0

    def event(self, kind: str, actor: str, payload: dict[str, Any], robot: str | None, sim_time: float) -> None:
        with self.store.index.transaction():
            self.store.index.insert_event(kind, actor, {**payload, "sim_time": round(sim_time, 3)}, robot=robot)

    def finished(self, episodes: list[EpisodeData]) -> None:
        """Queue a finished attempt's episodes for the next batch."""
        if not self._unstored:
            self._oldest_unstored = time.monotonic()
        self._unstored += episodes

    def flush(self, force: bool = False) -> None:
        """Write the queued episodes if the batch is due (or ``force``)."""
        if not self._unstored:
            return
        due = time.monotonic() - self._oldest_unstored >= self.store_every_s or len(self._unstored) >= self.batch_size
        if force or due:
            batch, self._unstored = self._unstored, []
            self.store.append_episodes(batch)

    def close(self) -> None:
        try:
            self.flush(force=True)
        finally:
            self.store.close()
