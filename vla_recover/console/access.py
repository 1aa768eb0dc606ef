"""Who may do what in the console, and how often: roles per action, per-user rate limits, the API's error."""

from __future__ import annotations

import threading
import time

from starlette.exceptions import HTTPException

__all__ = ["PERMISSIONS", "ROBOT_ACTIONS", "ApiError", "RateLimiter"]

FLOOR_ACTIONS = ("request_takeover", "reset", "confirm_reset", "pause", "resume", "clear_estop")
TELEOP_ACTIONS = ("takeover", "release", "rewind", "command")
ROBOT_ACTIONS = (*FLOOR_ACTIONS, "estop", *TELEOP_ACTIONS)
PERMISSIONS: dict[str, frozenset[str]] = {
    "view": frozenset({"viewer", "floor", "teleop", "admin"}),
    **{a: frozenset({"floor", "admin"}) for a in (*FLOOR_ACTIONS, "relabel")},
    "estop": frozenset({"floor", "teleop", "admin"}),
    **{a: frozenset({"teleop", "admin"}) for a in TELEOP_ACTIONS},
}


class ApiError(HTTPException):
    pass


class RateLimiter:
    """A token bucket per user: ``rate`` actions a second, bursts of ``burst``."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, who: str) -> bool:
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(who, (float(self.burst), now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            allowed = tokens >= 1.0
            self._buckets[who] = (tokens - 1.0 if allowed else tokens, now)
        return allowed
