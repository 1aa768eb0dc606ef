"""`vla-recover console`: users from the command line, and the real server (uvicorn, a sim fleet) over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
from typer.testing import CliRunner

from vla_recover.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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


def test_the_console_serves_a_running_fleet(tmp_path: Path) -> None:
    store = tmp_path / "store"
    CliRunner().invoke(app, ["console", "user", "add", "vera", "--role", "viewer", "--store", str(store),
                             "--password-stdin"], input="a good password\n")  # fmt: skip
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        f"task: LiftCube\nrobots: 2\nepisodes: 100\nconstant_action: [0, 0, 0, 0, -1]\nstore: {store}\n"
        "floor_operator: {enabled: false}\nteleoperator: {enabled: false}\n"
    )
    port = free_port()
    command = [sys.executable, "-m", "vla_recover.cli.main", "console", "--fleet", str(fleet), "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              start_new_session=True)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=5.0) as client:
            deadline = time.monotonic() + 60
            while True:
                try:
                    assert client.get("/api/me").status_code == 401
                    break
                except httpx.TransportError:
                    assert server.poll() is None and time.monotonic() < deadline, "the console did not come up"
                    time.sleep(0.3)
            assert client.post("/api/login", json={"username": "vera", "password": "a good password"}).is_success
            while (first := client.get("/api/fleet").json())["sim_time"] == 0.0:  # the sims are still starting
                assert time.monotonic() < deadline, "the fleet never moved"
                time.sleep(0.2)
            time.sleep(1.0)
            later = client.get("/api/fleet").json()
            assert [r["robot"] for r in later["robots"]] == ["sim00", "sim01"]
            assert later["sim_time"] > first["sim_time"]  # the robots move, at the control rate
            assert later["sim_time"] - first["sim_time"] < 2.0
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=20)
