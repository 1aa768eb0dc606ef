"""Takeover leases: exclusive, expiring, renewable; commands without a valid lease are refused."""

from __future__ import annotations

import pytest

from vla_recover.teleop.lease import LeaseError, LeaseManager


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_two_operators_contending_for_one_robot_get_exactly_one_lease() -> None:
    leases = LeaseManager(ttl=5.0, clock=Clock())
    alice = leases.acquire("r1", "alice")
    with pytest.raises(LeaseError, match="robot r1: held by alice"):
        leases.acquire("r1", "bob")
    assert leases.holder("r1") == alice


def test_expired_lease_rejects_commands_and_frees_the_robot() -> None:
    clock = Clock()
    leases = LeaseManager(ttl=5.0, clock=clock)
    lease = leases.acquire("r1", "alice")
    clock.t = 4.0
    leases.renew("r1", lease.token)
    clock.t = 8.9
    assert leases.check("r1", lease.token).operator == "alice"  # renewed at 4 s: good until 9 s
    clock.t = 9.0
    with pytest.raises(LeaseError, match="expired"):
        leases.check("r1", lease.token)
    assert [x.robot for x in leases.expired()] == ["r1"]
    assert leases.acquire("r1", "bob").operator == "bob"


def test_wrong_token_and_one_robot_per_operator() -> None:
    leases = LeaseManager(ttl=5.0, clock=Clock())
    leases.acquire("r1", "alice")
    with pytest.raises(LeaseError, match="no valid lease"):
        leases.check("r1", "forged")
    with pytest.raises(LeaseError, match="already holds robot r1"):
        leases.acquire("r2", "alice")


def test_bad_ttl_names_the_field() -> None:
    with pytest.raises(ValueError, match="lease ttl"):
        LeaseManager(ttl=0)
