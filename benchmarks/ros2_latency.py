"""ROS 2 policy node latency on loopback: a fake arm process publishes JointState (and a camera) at 30 Hz over DDS,
the node answers with JointTrajectory commands.

Per policy (a small diffusion policy, DDIM 10 steps, and a flow policy, 4 Euler steps; state-only, 6 joints):
observation-to-command latency p50 / p99 (from a joint state's stamp to the first command planned from it, read
from the node's diagnostics as a ROS 2 peer would), inference p50 / p99, and the sustained command rate the arm
receives. Goal: flow p99 under one control period (33.3 ms at 30 Hz). Last line: one JSON object.

    python benchmarks/ros2_latency.py [--seconds 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.ros2 import idl

LOOPBACK = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "ros2" / "cyclonedds-loopback.xml"
JOINTS = [f"j{i}" for i in range(6)]


def fake_arm(config: str, seconds: float, results: Any) -> None:
    from vla_recover.ros2.transport import DdsTransport

    transport = DdsTransport(config=config)
    position = np.zeros(6)
    received: list[float] = []
    diagnostics: list[dict[str, str]] = []

    def on_command(message: idl.JointTrajectory) -> None:
        position[:] = message.points[0].positions
        received.append(time.monotonic())

    transport.subscribe("/joint_trajectory", idl.JointTrajectory, on_command)
    transport.subscribe("/diagnostics", idl.DiagnosticArray,
                        lambda m: diagnostics.append({kv.key: kv.value for kv in m.status[0].values}))  # fmt: skip
    publish = transport.publisher("/joint_states", idl.JointState, profile="sensor_data")
    start = time.monotonic()
    tick = start
    while time.monotonic() - start < seconds:
        publish(idl.JointState(idl.Header(idl.Time.from_ns(time.time_ns()), ""), JOINTS, list(position), [], []))
        tick += 1 / 30
        time.sleep(max(0.0, tick - time.monotonic()))
    time.sleep(1.5)  # the last diagnostics
    steady = [t for t in received if t > start + 2.0]  # after warm-up
    rate = (len(steady) - 1) / (steady[-1] - steady[0]) if len(steady) > 1 else 0.0
    results.put({"command_rate_hz": round(rate, 1), "commands": len(received), "diagnostics": diagnostics[-1:]})
    transport.close()


def make_policy(name: str, directory: Path) -> Path:
    from vla_recover.policies import build_policy
    from vla_recover.policies.common.checkpoint import save_policy

    config = {"down_dims": [64, 128, 256]} | ({"inference_steps": 10} if name == "diffusion" else {})
    policy = build_policy(name, config, {"obs.state": (6,)}, 6)
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs.state": rng.uniform(-1, 1, (64, 6)), "action": rng.uniform(-0.2, 0.2, (64, 6))})
    return save_policy(policy, directory / name)


def percentiles(seconds: Any) -> dict[str, float]:
    ms = np.asarray(seconds) * 1e3
    return {"p50": round(float(np.percentile(ms, 50)), 1), "p99": round(float(np.percentile(ms, 99)), 1)}


def measure(policy_dir: Path, seconds: float, threads: int) -> dict[str, Any]:
    import torch

    from vla_recover.config import validate_config
    from vla_recover.fleet.inference import PolicyChunks
    from vla_recover.ros2.node import NodeConfig, PolicyNode
    from vla_recover.ros2.transport import DdsTransport

    config = validate_config(NodeConfig, {
        "joint_names": JOINTS, "control_hz": 30, "diagnostics_period_s": 1.0,
        "safety": {"command": "joint_position", "low": [-1.0] * 6, "high": [1.0] * 6, "max_velocity": 3.0,
                   "watchdog_s": 0.2},
    })  # fmt: skip
    source = PolicyChunks(policy_dir)
    torch.set_num_threads(threads)
    node = PolicyNode(config, source, DdsTransport(config=LOOPBACK))
    context = mp.get_context("spawn")
    results = context.Queue()
    arm = context.Process(target=fake_arm, args=(str(LOOPBACK), seconds, results))
    node.start()
    arm.start()
    try:
        arm_result = results.get(timeout=seconds + 60)
        arm.join(10)
    finally:
        node.stop()
    return {
        "obs_to_command_ms": percentiles(node.obs_to_command),
        "inference_ms": percentiles(node.latencies),
        "command_rate_hz": arm_result["command_rate_hz"],
        "chunks": int(node.counts["chunks"]),
        "skipped_stale_actions": int(node.counts["skipped_stale_actions"]),
        "diagnostics_seen_by_the_arm": bool(arm_result["diagnostics"]),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=1, help="torch threads for inference")
    args = parser.parse_args()
    results: dict[str, Any] = {"benchmark": "ros2_latency", "control_hz": 30, "threads": args.threads}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("flow", "diffusion"):
            results[name] = measure(make_policy(name, Path(tmp)), args.seconds, args.threads)
            print(f"{name}: {results[name]}", flush=True)
    results["flow_p99_under_one_period"] = results["flow"]["obs_to_command_ms"]["p99"] < 1000 / 30
    print(json.dumps(results))


if __name__ == "__main__":
    main()
