"""A fleet across a Ray cluster of two nodes on this machine (``ray start`` head plus a second node): the robots are
spread over both, a whole node killed mid-run faults the robots it ran and only those, the rest go on, and no
committed episode is lost; an evaluation spreads its episodes over the same cluster."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleet.test_fleet import fleet_config, tick_until
from tests.train.test_evaluate import untrained_lift_policy
from vla_recover.data import EpisodeStore
from vla_recover.evaluate import evaluate_checkpoint
from vla_recover.fleet import FleetManager
from vla_recover.policies.common.checkpoint import save_policy
from vla_recover.serving.launch import free_port

ray = pytest.importorskip("ray")
RAY = str(Path(sys.executable).parent / "ray")
NODE_ENV = {
    # a lost node is noticed in about a second instead of Ray's default half minute
    "RAY_health_check_period_ms": "300",
    "RAY_health_check_failure_threshold": "3",
}  # the nodes run in this process's Ray token mode (tests/conftest.py), which the driver uses too


def _node(arguments: list[str], temp_dir: str) -> subprocess.Popen[bytes]:
    """A ``ray start --block`` in its own process group: killing the group takes down the whole node. Its sessions
    and the cluster's address file live in ``temp_dir``: a head killed with SIGKILL leaves its address file behind,
    where a later ``ray.init()`` on this machine would try to join the dead cluster."""
    command = [
        RAY, "start", "--block", "--num-cpus=2", "--object-store-memory=100000000", f"--temp-dir={temp_dir}",
        *arguments,
    ]  # fmt: skip
    env = {**os.environ, **NODE_ENV}
    return subprocess.Popen(
        command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc): a Ray node's raylet, agents and actor workers, which each lead a
    process group of their own."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


def _kill_node(node: subprocess.Popen[bytes]) -> None:
    """SIGKILL a node and everything it started, at once, as when its machine dies."""
    for pid in [node.pid, *_descendants(node.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    node.wait()


def _alive_nodes() -> int:
    return sum(node["Alive"] for node in ray.nodes())


@pytest.fixture
def two_nodes() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The cluster's address and the second node's process (the head also runs the fleet's driver)."""
    port, temp_dir = free_port(), tempfile.mkdtemp(prefix="ray")  # short: Ray's sockets live below it
    head = _node(["--head", f"--port={port}", "--include-dashboard=false", "--disable-usage-stats"], temp_dir)
    address = f"127.0.0.1:{port}"
    second = None
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
                break
            except ConnectionError:
                time.sleep(0.5)
        second = _node([f"--address={address}"], temp_dir)
        while _alive_nodes() < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _alive_nodes() == 2, "the second node did not join"
        yield address, second
    finally:
        ray.shutdown()
        for node in (second, head):
            if node is not None and node.poll() is None:
                _kill_node(node)
        shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.mark.slow  # two Ray nodes take most of a minute to start on two cores
def test_a_fleet_spread_over_two_nodes_loses_only_the_robots_of_a_node_that_dies(
    tmp_path: Path, two_nodes: tuple[str, subprocess.Popen[bytes]]
) -> None:
    address, second = two_nodes
    config = fleet_config(tmp_path, backend="ray", ray_address=address, robots=4, episodes=8)
    fleet = FleetManager(config)
    fleet.start()
    try:
        nodes = {name: slot.worker.node() for name, slot in fleet.slots.items()}
        head_node = ray.get_runtime_context().get_node_id()
        lost = sorted(name for name, node in nodes.items() if node != head_node)
        assert lost and len(lost) < len(nodes), f"the robots were not spread over both nodes: {nodes}"
        tick_until(fleet, lambda: all(len(fleet.slots[name].branch_rows) >= 10 for name in lost))
        with EpisodeStore(tmp_path / "store") as store:
            committed = {row.id: (row.robot, row.length) for row in store.episodes()}
        _kill_node(second)  # the whole node: its raylet and every actor on it
        tick_until(fleet, lambda: fleet.finished)
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:
        rows = store.episodes()
        faulted = {row.robot for row in rows if row.outcome == "aborted"}
        assert faulted == set(lost)  # the head node's robots never faulted
        assert {row.id: (row.robot, row.length) for row in rows if row.id in committed} == committed
        finished = [row.robot for row in rows if row.outcome != "aborted"]
        assert len(finished) >= 8 - len(lost) and set(lost) & set(finished)  # the lost robots came back on the head
        for robot in lost:
            assert any(event.kind == "fault" for event in store.events(robot=robot))


@pytest.mark.slow
def test_an_evaluation_spreads_its_episodes_over_the_cluster(
    tmp_path: Path, two_nodes: tuple[str, subprocess.Popen[bytes]]
) -> None:
    address, _ = two_nodes
    policy = save_policy(untrained_lift_policy("flow"), tmp_path / "policy")
    seeds = {"task_config": {"horizon": 20}, "batch": 2}
    local = evaluate_checkpoint(policy, "LiftCube", 6, 100_000, workers=1, **seeds)
    spread = evaluate_checkpoint(policy, "LiftCube", 6, 100_000, workers=3, ray_address=address, **seeds)
    assert spread["outcomes"] == local["outcomes"] and spread["seeds"] == local["seeds"]
    assert spread["mean_length"] == pytest.approx(local["mean_length"])
