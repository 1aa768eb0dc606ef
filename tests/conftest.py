from __future__ import annotations

import os

import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
# Ray's token authentication, one mode for the whole run: Ray turns it on in a process that starts a local cluster
# and keeps it on there, and a driver in token mode is refused by nodes in the other (and the other way round). The
# tests' clusters are on loopback; set RAY_AUTH_MODE=token (and a token) to run them with it.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: pass --runslow to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
