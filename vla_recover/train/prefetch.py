"""Batches drawn ahead by a background thread while the device computes, in the order a single thread draws them.

The window sampler gathers from the store's arrays in numpy, which releases the GIL for its copies, so the next
batches are ready (and, for CUDA, in pinned memory) when a step ends. Each batch carries the sampler's random state
from after it was drawn, so a checkpoint saves the state of the first batch not yet trained on and a resumed run
draws the same batches as an uninterrupted one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Prefetcher"]

Batch = TypeVar("Batch")


class Prefetcher(Generic[Batch]):
    """``draw()`` run ``depth`` batches ahead on a daemon thread; ``depth=0`` draws in line. ``state()`` reads the
    sampler's random state and ``restore(state)`` sets it."""

    def __init__(
        self, draw: Callable[[], Batch], state: Callable[[], Any], restore: Callable[[Any], None], depth: int
    ) -> None:
        self._draw, self._read_state, self._restore, self.depth = draw, state, restore, depth
        self._queue: queue.Queue[tuple[Batch, Any] | BaseException] = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._state_after_last: Any = None  # the sampler's state right after the batch last handed out was drawn

    def next(self) -> Batch:
        if self.depth == 0:
            return self._draw()
        if self._thread is None:
            self._state_after_last = self._read_state()  # what close() rewinds to before anything is handed out
            self._thread = threading.Thread(target=self._fill, name="batch-prefetch", daemon=True)
            self._thread.start()
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        batch, self._state_after_last = item
        return batch

    def state(self) -> Any:
        """The sampler's state as if nothing had been drawn ahead (what a checkpoint saves): draws are sequential,
        so the state after the last batch handed out is the state before the next."""
        if self.depth == 0 or self._thread is None:
            return self._read_state()
        return self._state_after_last

    def _fill(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self._draw()
                item: tuple[Batch, Any] | BaseException = (batch, self._read_state())
            except BaseException as exc:  # handed to the training thread, which raises it
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def close(self) -> None:
        """Stop the thread, drop what it drew ahead and rewind the sampler to the first batch not handed out, so the
        next ``next()`` (or ``state()``) carries on as if nothing had been drawn ahead."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
            self._restore(self._state_after_last)
        while not self._queue.empty():
            self._queue.get_nowait()
        self._stop.clear()
