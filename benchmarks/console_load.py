"""Console under load: a real `vla-recover console` serving a sim fleet ticking at its control rate, with
browser-like WebSocket clients receiving state at 10 Hz and polling the REST API.

Measured: the server process's CPU (fleet control loop + web server, as a fraction of one core) with no client
and with the clients; the state updates' interval at the clients (p50 / p99: does the page stay live?); the
latency of ``GET /api/fleet`` under that load; and, where Chromium is installed, how long the real fleet page
takes to render each update. The sim workers are separate processes and not counted.

``--views`` adds what people watching the robots cost: the fleet run by a policy (randomly initialised, of the
quickstart's architecture: configs/loop/quickstart.yaml's base_train) and measured twice in one sitting, with nobody
watching and with the clients watching over their WebSockets (every robot's 128 x 96 thumbnail; one client, a
teleoperator driving the first robot with commands at 20 Hz, its 320 x 240 view): the fleet's real-time factor both
ways, and the driven view's frame rate and frame age (from painting to arrival at the client). ``--constant`` runs
the fleet on a constant action instead, to tell the views' cost from the policy's. Goals: >= 10 frames/s, p99 age
< 200 ms, real-time factor >= 0.95. Last line: one JSON object.

    python benchmarks/console_load.py [--robots 12] [--clients 4] [--seconds 10]
    python benchmarks/console_load.py --views --robots 8 --clients 4 [--constant]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.serving.launch import free_port

ROOT = Path(__file__).resolve().parents[1]
PASSWORD = "benchmark password"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_console(
    tmp: Path, robots: int, policy: Path | None = None, horizon: int = 200
) -> tuple[subprocess.Popen[bytes], str]:
    store = tmp / "store"
    add = [sys.executable, "-m", "vla_recover.cli.main", "console", "user", "add", "viewer", "--role", "viewer",
           "--store", str(store), "--password-stdin"]  # fmt: skip
    subprocess.run(add, input=(PASSWORD + "\n").encode(), check=True, cwd=ROOT, capture_output=True)
    add[6:9] = ["driver", "--role", "teleop"]  # drives a robot in --views
    subprocess.run(add, input=(PASSWORD + "\n").encode(), check=True, cwd=ROOT, capture_output=True)
    fleet = tmp / "fleet.yaml"
    fleet.write_text(
        f"task: LiftCube\nrobots: {robots}\nrobots_per_process: {max(1, robots // 2)}\nepisodes: 100000\n"
        f"store: {store}\ntask_config: {{horizon: {horizon}}}\n"
        + (f"policy: {policy}\n" if policy is not None else "constant_action: [0.2, 0, 0, 0, -1]\n")
        + "floor_operator: {enabled: false}\nteleoperator: {enabled: false}\n"
    )
    port = free_port()
    command = [sys.executable, "-m", "vla_recover.cli.main", "console", "--fleet", str(fleet), "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)  # fmt: skip
    return process, f"127.0.0.1:{port}"


def log_in(address: str, user: str = "viewer") -> tuple[Any, str]:
    import httpx2 as httpx

    client = httpx.Client(base_url=f"http://{address}", timeout=10.0)
    deadline = time.monotonic() + 120
    while True:
        try:
            response = client.post("/api/login", json={"username": user, "password": PASSWORD})
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    response.raise_for_status()
    client.headers["X-CSRF-Token"] = response.json()["csrf"]
    while client.get("/api/fleet").json()["sim_time"] == 0.0:  # wait for the sims to start stepping
        time.sleep(0.2)
    return client, str(client.cookies["vla_session"])


def websocket_client(
    address: str,
    session: str,
    seconds: float,
    intervals: list[float],
    views: dict[str, str] | None = None,
    frames: list[tuple[str, float, float]] | None = None,
    drive: str | None = None,
) -> None:
    """A page's socket: state updates (their intervals into ``intervals``) and, watching ``views``, the frames that
    arrive as ``(robot, arrival, painted)`` wall-clock seconds into ``frames``; driving ``drive`` (held by the
    session's user), a command every 50 ms as the teleop page sends them."""
    from websockets.sync.client import connect

    headers = {"Cookie": f"vla_session={session}", "Origin": f"http://{address}"}
    with connect(f"ws://{address}/ws", additional_headers=headers, max_size=None) as ws:
        if views:
            ws.send(json.dumps({"type": "views", "views": views}))
        last, end, command_due = None, time.monotonic() + seconds, time.monotonic()
        while time.monotonic() < end:
            if drive is not None and time.monotonic() >= command_due:
                ws.send(json.dumps({"type": "command", "robot": drive, "action": [0.0, 0.0, 0.0, 0.0, -1.0]}))
                command_due += 0.05
            try:
                message = ws.recv(timeout=0.01 if drive is not None else 5)
            except TimeoutError:
                continue
            if isinstance(message, bytes):  # a view's frame: a JSON header line, then the JPEG
                header = json.loads(message.split(b"\n", 1)[0])
                if frames is not None:
                    frames.append((header["robot"], time.time(), header["painted"]))
                continue
            if json.loads(message)["type"] != "fleet":
                continue
            now = time.monotonic()
            if last is not None:
                intervals.append(now - last)
            last = now


def watched_window(
    address: str, sessions: tuple[str, str], client: Any, clients: int, seconds: float, robots: list[str] | None
) -> dict[str, Any]:
    """The fleet's real-time factor over ``seconds`` with ``clients`` sockets open, the first (the driver's session)
    driving the first robot; watching every robot's thumbnail and (the driver) the driven robot's large view when
    ``robots`` is given; and the large view's frames."""
    intervals: list[float] = []
    frames: list[tuple[str, float, float]] = []
    views = [
        ({r: "thumb" for r in robots} | ({robots[0]: "large"} if i == 0 else {})) if robots else None
        for i in range(clients)
    ]
    large_frames: list[tuple[str, float, float]] = []  # the frames of the client watching the large view
    driven = client.get("/api/fleet").json()["robots"][0]["robot"]
    threads = [
        threading.Thread(
            target=websocket_client,
            args=(address, sessions[i == 0], seconds + 3, intervals, v, large_frames if i == 0 else frames),
            kwargs={"drive": driven if i == 0 else None},
        )
        for i, v in enumerate(views)
    ]
    for thread in threads:
        thread.start()
    time.sleep(2.0)  # the views are asked for and painted
    sim_start, wall = client.get("/api/fleet").json()["sim_time"], time.monotonic()
    time.sleep(seconds)
    realtime = (client.get("/api/fleet").json()["sim_time"] - sim_start) / (time.monotonic() - wall)
    for thread in threads:
        thread.join()
    row: dict[str, Any] = {"realtime": realtime}
    if robots:
        large = sorted((arrival, painted) for robot, arrival, painted in large_frames if robot == robots[0])
        large = [(a, p) for a, p in large if a - large[0][0] >= 2.0]  # after the first two seconds, as measured
        span = large[-1][0] - large[0][0]
        row["large_fps"] = (len(large) - 1) / span
        row["large_age_s"] = [a - p for a, p in large]
        thumbs = [frame for frame in frames if frame[0] != robots[0]]  # the other clients', of the other robots
        row["thumb_frames_per_robot_s"] = len(thumbs) / (len(robots) - 1) / (seconds + 1.0) / max(1, clients - 1)
    return row


def views_rows(address: str, session: str, client: Any, clients: int, seconds: float, rounds: int) -> dict[str, Any]:
    """Watched and unwatched windows, alternated ``rounds`` times in one sitting, the first robot driven throughout
    by a teleoperator sending commands at 20 Hz."""
    robots = [r["robot"] for r in client.get("/api/fleet").json()["robots"]]
    driver, driver_session = log_in(address, "driver")
    while driver.post(f"/api/robots/{robots[0]}/takeover", json={}).status_code != 200:  # once it is autonomous
        time.sleep(0.1)
    sessions = (session, driver_session)
    unwatched, watched = [], []
    for index in range(rounds):
        unwatched.append(watched_window(address, sessions, client, clients, seconds, None))
        watched.append(watched_window(address, sessions, client, clients, seconds, robots))
        print(f"round {index + 1}: real-time factor {unwatched[-1]['realtime']:.3f} unwatched, "
              f"{watched[-1]['realtime']:.3f} watched; large view {watched[-1]['large_fps']:.1f} frames/s",
              file=sys.stderr)  # fmt: skip
    ages = np.concatenate([w["large_age_s"] for w in watched]) * 1e3
    return {
        "realtime_factor_no_views": round(float(np.mean([w["realtime"] for w in unwatched])), 3),
        "realtime_factor_views": round(float(np.mean([w["realtime"] for w in watched])), 3),
        "large_view_fps": round(float(np.mean([w["large_fps"] for w in watched])), 2),
        "large_view_age_ms_p50": round(float(np.percentile(ages, 50)), 1),
        "large_view_age_ms_p99": round(float(np.percentile(ages, 99)), 1),
        "thumbnail_fps_per_client": round(float(np.mean([w["thumb_frames_per_robot_s"] for w in watched])), 2),
        "goal_large_view_fps_at_least": 10.0,
        "goal_large_view_age_ms_p99_below": 200.0,
        "goal_realtime_factor_at_least": 0.95,
    }


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
    parser.add_argument("--views", action="store_true", help="the fleet run by a policy, watched and not")
    parser.add_argument("--rounds", type=int, default=2, help="with --views: watched / unwatched windows each")
    parser.add_argument("--constant", action="store_true", help="with --views: a constant action, not a policy")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if args.views:
            import yaml
            from fleet_throughput import small_policy

            recipe = yaml.safe_load((ROOT / "configs/loop/quickstart.yaml").read_text())["base_train"]
            policy = (
                None
                if args.constant
                else small_policy("LiftCube", Path(tmp) / "policy", recipe["policy"], recipe["policy_config"])
            )
            process, address = start_console(Path(tmp), args.robots, policy, horizon=4000)  # one long drive
            try:
                client, session = log_in(address)
                time.sleep(2.0)
                row = views_rows(address, session, client, args.clients, args.seconds, args.rounds)
            finally:
                os.killpg(process.pid, signal.SIGINT)
                process.wait(timeout=30)
            print(json.dumps({"benchmark": "console_load_views", "robots": args.robots, "clients": args.clients,
                              "driven_by": "constant action" if args.constant else f"{recipe['policy']} policy",
                              "seconds": args.seconds, "rounds": args.rounds, **row}))  # fmt: skip
            return
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
