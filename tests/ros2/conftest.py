"""Every DDS test on a domain of its own, so that nothing else on the host (another test run, a leftover
publisher) shares its topics; spawned helper processes inherit the environment."""

from __future__ import annotations

import random

import pytest


@pytest.fixture(autouse=True)
def own_ros_domain(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 232)))
