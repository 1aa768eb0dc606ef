"""Takeover leases: who may drive which robot, for how long.

A lease is exclusive per robot and per operator (one robot at a time per teleoperator), expires unless renewed,
and is presented as an unguessable token with every teleop command. A command without a valid lease is refused
with a :class:`LeaseError` that says why; the fleet logs the refusal and the robot holds.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Lease", "LeaseError", "LeaseManager"]


class LeaseError(PermissionError):
    """A lease was refused, or a command came without a valid one."""


@dataclass(frozen=True)
class Lease:
    robot: str
    operator: str
    token: str
    expires: float  # on the manager's clock


class LeaseManager:
    """Grants, renews, checks and revokes leases on the clock it is given (wall or sim time)."""

    def __init__(self, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        if ttl <= 0:
            raise ValueError(f"lease ttl: must be > 0 seconds, got {ttl}")
        self.ttl = ttl
        self._clock = clock
        self._by_robot: dict[str, Lease] = {}

    def holder(self, robot: str) -> Lease | None:
        lease = self._by_robot.get(robot)
        if lease is not None and lease.expires <= self._clock():
            return None
        return lease

    def acquire(self, robot: str, operator: str) -> Lease:
        current = self.holder(robot)
        if current is not None and current.operator != operator:
            raise LeaseError(
                f"robot {robot}: held by {current.operator} for another {current.expires - self._clock():.1f} s"
            )
        for other in self._by_robot.values():
            if other.operator == operator and other.robot != robot and other.expires > self._clock():
                raise LeaseError(f"operator {operator}: already holds robot {other.robot}; release it first")
        lease = Lease(robot, operator, secrets.token_urlsafe(16), self._clock() + self.ttl)
        self._by_robot[robot] = lease
        return lease

    def check(self, robot: str, token: str | None) -> Lease:
        """The live lease on ``robot`` whose token is ``token``, or a LeaseError saying why not."""
        lease = self._by_robot.get(robot)
        if lease is None or token is None or not secrets.compare_digest(lease.token, token):
            raise LeaseError(f"robot {robot}: no valid lease for this command")
        if lease.expires <= self._clock():
            raise LeaseError(f"robot {robot}: the lease of {lease.operator} expired")
        return lease

    def renew(self, robot: str, token: str) -> Lease:
        lease = self.check(robot, token)
        renewed = Lease(lease.robot, lease.operator, lease.token, self._clock() + self.ttl)
        self._by_robot[robot] = renewed
        return renewed

    def release(self, robot: str, token: str) -> Lease:
        lease = self.check(robot, token)
        del self._by_robot[robot]
        return lease

    def revoke(self, robot: str) -> Lease | None:
        """Drop whatever lease ``robot`` has (e-stop, fault, episode end)."""
        return self._by_robot.pop(robot, None)

    def expired(self) -> list[Lease]:
        """Leases that ran out and have not been revoked yet."""
        now = self._clock()
        return [lease for lease in self._by_robot.values() if lease.expires <= now]
