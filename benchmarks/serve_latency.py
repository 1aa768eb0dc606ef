"""Policy-server latency on loopback: robots asking ``vla-recover serve`` for chunks at the control rate.

The server runs the quickstart's flow policy architecture (untrained: latency does not depend on the weights) in its
own process, as in production; each robot is a thread with its own kept-alive connection, asking:

- ``chunk``: for a chunk when its last one runs out (every ``action_exec`` control periods, phases spread at random),
  as the fleet and the robot node do. Goal: p99 under one control period (50 ms at 20 Hz).
- ``step``: for a chunk every control period (a stress mode: one request per robot per step).

A robot whose answer comes late asks again at once (its schedule does not pile up requests). Per mode: latency
percentiles, the share over one control period, requests and rows per forward. Last line: one JSON object.

    python benchmarks/serve_latency.py [--robots 12] [--seconds 20] [--modes chunk,step] [--threads 0]
                                       [--max-wait-ms 1.0] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.loop.config import LoopConfig
from vla_recover.policies import build_policy
from vla_recover.policies.common.checkpoint import save_policy
from vla_recover.serving.client import PolicyClient
from vla_recover.serving.launch import policy_server

STATE_DIM, ACTION_DIM = 19, 4  # LiftCube's, as the quickstart's policy reads and writes them
QUICKSTART_TRAIN = LoopConfig().base_train  # the embedded default's base policy: architecture and sampling steps


def quickstart_checkpoint(directory: Path) -> Path:
    policy = build_policy(
        QUICKSTART_TRAIN["policy"], QUICKSTART_TRAIN["policy_config"], {"obs.state": (STATE_DIM,)}, ACTION_DIM
    )
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs.state": rng.normal(size=(100, STATE_DIM)), "action": rng.uniform(-1, 1, (100, 4))})
    return save_policy(policy, directory / "policy")


def robot(url: str, token: str, index: int, period_s: float, until: float, out: list[tuple[float, int]]) -> None:
    """One robot: a request every ``period_s`` from a random phase, each latency and forward size into ``out``."""
    client = PolicyClient(url, token)
    rng = np.random.default_rng(index)
    window = {"obs.state": rng.normal(size=(1, 2, STATE_DIM)).astype(np.float32)}
    due = time.perf_counter() + rng.uniform(0, period_s)
    request = 0
    while due < until:
        time.sleep(max(0.0, due - time.perf_counter()))
        started = time.perf_counter()
        _, meta = client.chunks(window, [index * 1_000_003 + request])
        finished = time.perf_counter()
        out.append((finished - started, int(meta["batch"])))
        request += 1
        due = max(due + period_s, finished)  # late: ask again at once, without a backlog
    client.close()


def measure(url: str, token: str, args: argparse.Namespace, period_s: float) -> dict[str, Any]:
    results: list[list[tuple[float, int]]] = [[] for _ in range(args.robots)]
    until = time.perf_counter() + args.seconds
    threads = [
        threading.Thread(target=robot, args=(url, token, i, period_s, until, results[i])) for i in range(args.robots)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies = np.array([latency for rows in results for latency, _ in rows]) * 1000
    batches = np.array([batch for rows in results for _, batch in rows])
    control_ms = 1000 / args.rate_hz
    return {
        "requests": int(latencies.size),
        "requests_per_s": round(latencies.size / args.seconds, 1),
        "latency_ms": {
            name: round(float(np.percentile(latencies, q)), 2) for name, q in (("p50", 50), ("p90", 90), ("p99", 99))
        }
        | {"max": round(float(latencies.max()), 2)},
        "over_one_control_period": round(float((latencies > control_ms).mean()), 4),
        "mean_rows_per_forward": round(float(batches.mean()), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robots", type=int, default=12)
    parser.add_argument("--seconds", type=float, default=20.0, help="per mode")
    parser.add_argument("--rate-hz", type=float, default=20.0, help="the robots' control rate")
    parser.add_argument("--modes", default="chunk,step")
    parser.add_argument("--threads", type=int, default=0, help="the server's torch threads (0: its default)")
    parser.add_argument("--max-wait-ms", type=float, default=1.0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="serve_latency_") as scratch:
        policy = quickstart_checkpoint(Path(scratch))
        with policy_server(policy, args.device, args.threads, args.max_wait_ms) as (url, token):
            info = PolicyClient(url, token).info()
            warm = PolicyClient(url, token)
            for rows in (1, 2, 4, 8, 12):  # the first forwards of each size trace and warm up
                warm.chunks({"obs.state": np.zeros((rows, 2, STATE_DIM), np.float32)}, list(range(rows)))
            for mode in args.modes.split(","):
                steps = info["action_exec"] if mode == "chunk" else 1
                figures[mode] = measure(url, token, args, steps / args.rate_hz)
                print(f"{mode}: {figures[mode]}", flush=True)
    goal = figures.get("chunk", {}).get("latency_ms", {}).get("p99")
    print(json.dumps({
        "benchmark": "serve_latency", "robots": args.robots, "rate_hz": args.rate_hz, "seconds": args.seconds,
        "server_threads": info["cpu_threads"], "max_wait_ms": args.max_wait_ms, "device": args.device, **figures,
        "goal_chunk_p99_under_control_period": None if goal is None else goal < 1000 / args.rate_hz,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
