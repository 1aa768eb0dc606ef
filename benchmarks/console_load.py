"""Console under load: a real `vla-recover console` serving a 12-robot sim fleet ticking at its control rate, with
browser-like WebSocket clients receiving state at 10 Hz and polling the REST API.

Measured: the server process's CPU (fleet control loop + web server, as a fraction of one core) with no client
and with the clients; the state updates' interval at the clients (p50 / p99: does the page stay live?); the
latency of ``GET /api/fleet`` under that load; and, where Chromium is installed, how long the real fleet page
takes to render each update. The sim workers are separate processes and not counted.
Last line: one JSON object.

    python benchmarks/console_load.py [--robots 12] [--clients 4] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "benchmark password"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_console(tmp: Path, robots: int) -> tuple[subprocess.Popen[bytes], str]:
    store = tmp / "store"
    add = [sys.executable, "-m", "vla_recover.cli.main", "console", "user", "add", "viewer", "--role", "viewer",
           "--store", str(store), "--password-stdin"]  # fmt: skip
    subprocess.run(add, input=(PASSWORD + "\n").encode(), check=True, cwd=ROOT, capture_output=True)
    fleet = tmp / "fleet.yaml"
    fleet.write_text(
        f"task: LiftCube\nrobots: {robots}\nrobots_per_process: {max(1, robots // 2)}\nepisodes: 100000\n"
        f"store: {store}\nconstant_action: [0.2, 0, 0, 0, -1]\ntask_config: {{horizon: 200}}\n"
        "floor_operator: {enabled: false}\nteleoperator: {enabled: false}\n"
    )
    port = free_port()
    command = [sys.executable, "-m", "vla_recover.cli.main", "console", "--fleet", str(fleet), "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    return process, f"127.0.0.1:{port}"


def log_in(address: str) -> tuple[Any, str]:
    import httpx2 as httpx

    client = httpx.Client(base_url=f"http://{address}", timeout=10.0)
    deadline = time.monotonic() + 120
    while True:
        try:
            response = client.post("/api/login", json={"username": "viewer", "password": PASSWORD})
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    response.raise_for_status()
    while client.get("/api/fleet").json()["sim_time"] == 0.0:  # wait for the sims to start stepping
        time.sleep(0.2)
    return client, str(client.cookies["vla_session"])


def websocket_client(address: str, session: str, seconds: float, intervals: list[float]) -> None:
    from websockets.sync.client import connect

    headers = {"Cookie": f"vla_session={session}", "Origin": f"http://{address}"}
    with connect(f"ws://{address}/ws", additional_headers=headers) as ws:
        last, end = None, time.monotonic() + seconds
        while time.monotonic() < end:
            json.loads(ws.recv(timeout=5))
            now = time.monotonic()
            if last is not None:
                intervals.append(now - last)
            last = now


def page_render_ms(address: str, seconds: float) -> dict[str, float] | None:
    """A logged-in fleet page in headless Chromium: how long each state update takes to render (None: no browser)."""
    import shutil

    if shutil.which("chromedriver") is None or shutil.which("chromium") is None:
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")  # type: ignore[assignment]
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    try:
        driver.get(f"http://{address}/")
        time.sleep(1.0)
        driver.find_element(By.NAME, "username").send_keys("viewer")
        driver.find_element(By.NAME, "password").send_keys(PASSWORD)
        driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
        time.sleep(seconds)
        times = np.asarray(driver.execute_script("return window.renderTimes"), dtype=float)
    finally:
        driver.quit()
    return {
        "page_updates_per_s": round(len(times) / seconds, 1),
        "page_render_ms_p50": round(float(np.percentile(times, 50)), 2),
        "page_render_ms_max": round(float(times.max()), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robots", type=int, default=12)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        process, address = start_console(Path(tmp), args.robots)
        try:
            client, session = log_in(address)
            time.sleep(2.0)
            cpu, wall = cpu_seconds(process.pid), time.monotonic()
            time.sleep(args.seconds)
            idle_cpu = (cpu_seconds(process.pid) - cpu) / (time.monotonic() - wall)

            intervals: list[float] = []
            clients = [
                threading.Thread(target=websocket_client, args=(address, session, args.seconds + 1, intervals))
                for _ in range(args.clients)
            ]
            for thread in clients:
                thread.start()
            time.sleep(1.0)
            cpu, wall, latencies = cpu_seconds(process.pid), time.monotonic(), []
            sim_start = client.get("/api/fleet").json()["sim_time"]
            while time.monotonic() - wall < args.seconds:
                started = time.perf_counter()
                client.get("/api/fleet").raise_for_status()
                latencies.append(time.perf_counter() - started)
                time.sleep(0.5)
            elapsed = time.monotonic() - wall
            loaded_cpu = (cpu_seconds(process.pid) - cpu) / elapsed
            realtime = (client.get("/api/fleet").json()["sim_time"] - sim_start) / elapsed
            for thread in clients:
                thread.join()
            page = page_render_ms(address, args.seconds)
        finally:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=30)

    result: dict[str, Any] = {
        "benchmark": "console_load",
        "robots": args.robots,
        "clients": args.clients,
        "sim_seconds_per_wall_second": round(realtime, 3),  # 1.0: the fleet keeps its control rate
        "server_cpu_core_fraction_no_clients": round(idle_cpu, 3),
        "server_cpu_core_fraction_with_clients": round(loaded_cpu, 3),
        "state_interval_ms_p50": round(float(np.percentile(intervals, 50)) * 1e3, 1),
        "state_interval_ms_p99": round(float(np.percentile(intervals, 99)) * 1e3, 1),
        "api_fleet_latency_ms_p50": round(float(np.percentile(latencies, 50)) * 1e3, 1),
        "api_fleet_latency_ms_p99": round(float(np.percentile(latencies, 99)) * 1e3, 1),
        "goal_server_cpu_below": 0.2,
        **(page or {"page": "no chromium / chromedriver: page render time not measured"}),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
