"""`vla-recover console`: users from the command line, and the real server (uvicorn, a sim fleet) over HTTP."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
import yaml
from typer.testing import CliRunner

from vla_recover.cli.main import app
from vla_recover.serving.launch import free_port

ROOT = Path(__file__).resolve().parents[2]


def test_user_add_and_list(tmp_path: Path) -> None:
    runner = CliRunner()
    added = runner.invoke(app, ["console", "user", "add", "fred", "--role", "floor", "--store", str(tmp_path),
                                "--password-stdin", "--token"], input="a good password\n")  # fmt: skip
    assert added.exit_code == 0, added.output
    assert "added fred (floor)" in added.output and len(added.output.strip().splitlines()[-1]) > 30  # the token
    again = runner.invoke(app, ["console", "user", "add", "fred", "--role", "floor", "--store", str(tmp_path),
                                "--password-stdin"], input="a good password\n")  # fmt: skip
    assert again.exit_code == 2 and "user 'fred' exists" in again.output
    bad = runner.invoke(app, ["console", "user", "add", "cy", "--role", "boss", "--store", str(tmp_path),
                              "--password-stdin"], input="a good password\n")  # fmt: skip
    assert bad.exit_code == 2 and "role: 'boss'" in bad.output
    listed = runner.invoke(app, ["console", "user", "list", "--store", str(tmp_path)])
    assert listed.output.split() == ["fred", "floor"]
    empty = runner.invoke(app, ["console", "--store", str(tmp_path / "elsewhere")])
    assert empty.exit_code == 2 and "no console users" in empty.output


@contextlib.contextmanager
def serving(fleet: Path, store: Path) -> Iterator[httpx.Client]:
    """`vla-recover console --fleet` in its own process, and a client signed in as a viewer."""
    CliRunner().invoke(app, ["console", "user", "add", "vera", "--role", "viewer", "--store", str(store),
                             "--password-stdin"], input="a good password\n")  # fmt: skip
    port = free_port()
    command = [sys.executable, "-m", "vla_recover.cli.main", "console", "--fleet", str(fleet), "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5.0) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    assert client.get("/api/me").status_code == 401
                    break
                except httpx.TransportError:
                    assert server.poll() is None and time.monotonic() < deadline, "the console did not come up"
                    time.sleep(0.3)
            assert client.post("/api/login", json={"username": "vera", "password": "a good password"}).is_success
            yield client
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=20)


@pytest.mark.slow  # a console process with a fleet of worker processes: 18 s on two cores
def test_the_console_serves_a_running_fleet(tmp_path: Path) -> None:
    store = tmp_path / "store"
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"task: LiftCube\nrobots: 2\nepisodes: 100\nconstant_action: [0, 0, 0, 0, -1]\nstore: {store}\n"
        "floor_operator: {enabled: false}\nteleoperator: {enabled: false}\n"
    )
    with serving(fleet, store) as client:
        deadline = time.monotonic() + 60
        while (first := client.get("/api/fleet").json())["sim_time"] == 0.0:  # the sims are still starting
            assert time.monotonic() < deadline, "the fleet never moved"
            time.sleep(0.2)
        time.sleep(1.0)
        later = client.get("/api/fleet").json()
        assert [r["robot"] for r in later["robots"]] == ["sim00", "sim01"]
        assert later["sim_time"] > first["sim_time"]  # the robots move, at the control rate
        assert later["sim_time"] - first["sim_time"] < 2.0


@pytest.mark.slow  # a console, a fleet and a stand-in arm process on one DDS graph: 15 s on two cores
def test_the_console_serves_the_fleet_of_sim_fake_and_ros2_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cyclonedds")
    from tests.ros2.test_standin import start_standin, stop

    monkeypatch.setenv("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 232)))  # the console inherits it
    config = yaml.safe_load((ROOT / "configs" / "fleet" / "mixed_arms.yaml").read_text())
    fleet, store = tmp_path / "fleet.yaml", tmp_path / "store"
    fleet.write_text(yaml.safe_dump({**config, "store": str(store), "episodes": 1000}))
    standin, _ = start_standin("/arm_left")
    try:
        with serving(fleet, store) as client:
            deadline = time.monotonic() + 60
            while (shown := client.get("/api/fleet").json()).get("sim_time", 0.0) < 2.0:
                assert time.monotonic() < deadline, f"the fleet never moved: {shown}"
                time.sleep(0.3)
            cards = {card["robot"]: card for card in shown["robots"]}
            assert list(cards) == ["sim00", "sim01", "bench_arm", "arm_left"]
            assert cards["arm_left"]["progress"] is None  # an arm reports no progress (no NaN in the JSON)
            # the simulated floor operator set the arm's scene up; it runs the policy like the others
            while client.get("/api/fleet").json()["robots"][3]["state"] not in ("autonomous", "episode_done"):
                assert time.monotonic() < deadline, "the arm never started"
                time.sleep(0.3)
    finally:
        stop(standin)
