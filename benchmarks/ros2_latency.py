"""ROS 2 policy node latency on loopback: a fake arm process publishes JointState (and a camera) at 30 Hz over DDS,
the node answers with JointTrajectory commands.

Per policy (a small diffusion policy, DDIM 10 steps, and a flow policy, 4 Euler steps; state-only, 6 joints):
observation-to-command latency p50 / p99 (from a joint state's stamp to the first command planned from it, read
from the node's diagnostics as a ROS 2 peer would), inference p50 / p99, and the sustained command rate the arm
receives. Goal: flow p99 under one control period (33.3 ms at 30 Hz).

The fleet row: the stand-in arm (LiftCube on the graph, vla_recover.ros2.standin) in its own process as a fleet's
`ros2` robot, driven by the flow policy. Observation-to-command p50 / p99 as the arm sees it (from publishing the
observation after a step to the arrival of the next command), and, halfway through, its joint-state stream stalled
for a second: the time from its last observation to the first hold command it receives, against the safety
filter's watchdog deadline. Goals: p99 under one 30 Hz period; the hold within one control period of the deadline.
Last line: one JSON object.

    python benchmarks/ros2_latency.py [--seconds 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import itertools
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


def make_policy(name: str, directory: Path, state: int = 6, action: int = 6) -> Path:
    from vla_recover.policies import build_policy
    from vla_recover.policies.common.checkpoint import save_policy

    config = {"down_dims": [64, 128, 256]} | ({"inference_steps": 10} if name == "diffusion" else {})
    policy = build_policy(name, config, {"obs.state": (state,)}, action)
    rng = np.random.default_rng(0)
    policy.fit_normalizer(
        {"obs.state": rng.uniform(-1, 1, (64, state)), "action": rng.uniform(-0.2, 0.2, (64, action))}
    )
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


def standin_arm(config: str, stop: Any, results: Any) -> None:
    """The stand-in arm until ``stop`` is set; then its trace (observations published, commands received)."""
    from vla_recover.ros2.standin import StandInArm
    from vla_recover.ros2.transport import DdsTransport

    arm = StandInArm("LiftCube", "/bench_arm")
    arm.start(DdsTransport(config=config))
    arm.run(stop=stop)
    results.put(list(arm.trace))
    arm.close()


def trace_latencies(trace: list[tuple[Any, ...]], stall_at: float, watchdog_s: float) -> dict[str, Any]:
    """Observation-to-command from the arm's trace, and how soon after a stalled stream the arm was held."""
    answered, last_step = [], None
    for kind, at, *_ in trace:
        if kind == "step":
            last_step = at
        elif kind == "idle":
            last_step = None  # no step to answer: the fleet was resetting the arm or not sending
        elif last_step is not None:  # the first command after a step's observation
            answered.append(at - last_step)
            last_step = None
    published = [at for kind, at, *_ in trace if kind in ("step", "idle")]
    gaps = [(a, b) for a, b in itertools.pairwise(published) if a >= stall_at - 0.1 and b - a > 0.5]
    last_seen = gaps[0][0]
    hold = next(at for kind, at, *rest in trace if kind == "command" and at > last_seen and rest[0] == 0.0)
    return {
        "obs_to_command_ms": percentiles(answered),
        "steps": len(answered),
        "stall_to_hold_ms": round((hold - last_seen) * 1e3, 1),
        "hold_after_watchdog_deadline_ms": round((hold - last_seen - watchdog_s) * 1e3, 1),
    }


def measure_fleet(policy_dir: Path | None, seconds: float, work: Path) -> dict[str, Any]:
    """The stand-in arm as a fleet's robot, driven by the policy at ``policy_dir`` (None: a constant action, so the
    figures are the transport's and the fleet's alone)."""
    from vla_recover.config import validate_config
    from vla_recover.fleet import FleetConfig, FleetManager
    from vla_recover.ros2.standin import StandInArm
    from vla_recover.ros2.transport import DdsTransport

    probe = StandInArm("LiftCube", "/bench_arm")
    arm = probe.robot_entry("bench_arm")
    probe.close()
    watchdog_s, control_hz = 0.2, probe.control_hz
    arm.update(operator_resets=False, dds_config=str(LOOPBACK), connect_timeout_s=60)
    arm["safety"]["watchdog_s"] = watchdog_s
    config = validate_config(FleetConfig, {
        "task": "LiftCube", "robots": [arm], "episodes": 10_000, "store": str(work / "store"),
        "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False},
        **({"policy": str(policy_dir)} if policy_dir else {"constant_action": [0.1, 0.0, 0.0, 0.0, -1.0]}),
    })  # fmt: skip
    context = mp.get_context("spawn")
    results, stop = context.Queue(), context.Event()
    standin = context.Process(target=standin_arm, args=(str(LOOPBACK), stop, results))
    standin.start()
    fault = DdsTransport(config=LOOPBACK)
    try:
        fleet = FleetManager(config)  # connects once the stand-in publishes
        inject = fault.publisher("/bench_arm/fault", idl.String)
        fleet.start()
        start, stall_at = time.monotonic(), None
        slot, horizon = fleet.slots["bench_arm"], fleet.slot_context.probe["horizon"]
        try:
            while time.monotonic() - start < seconds or stall_at is None:
                fleet.tick()
                # stalled mid-episode: while it homes, the arm is its driver's, and the fleet waits for it
                mid_episode = str(slot.state) == "autonomous" and 5 <= len(slot.branch_rows) <= horizon - 50
                if stall_at is None and time.monotonic() - start > seconds / 2 and mid_episode:
                    stall_at = time.monotonic()
                    inject(idl.String(json.dumps({"kind": "stall", "seconds": 1.0})))
        finally:
            fleet.close()
        stop.set()
        trace = results.get(timeout=60)
    finally:
        stop.set()
        standin.join(20)
        fault.close()
    assert stall_at is not None
    return {"control_hz": control_hz, "watchdog_s": watchdog_s, **trace_latencies(trace, stall_at, watchdog_s)}


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
        fleet_policy = make_policy("flow", Path(tmp) / "fleet", state=19, action=5)
        for row, policy in (("fleet_constant_action", None), ("fleet", fleet_policy)):
            results[row] = measure_fleet(policy, args.seconds, Path(tmp) / row)
            print(f"{row}: {results[row]}", flush=True)
    results["flow_p99_under_one_period"] = results["flow"]["obs_to_command_ms"]["p99"] < 1000 / 30
    fleet = results["fleet"]
    results["fleet_p99_under_one_period"] = fleet["obs_to_command_ms"]["p99"] < 1000 / 30
    results["fleet_hold_within_one_period"] = fleet["hold_after_watchdog_deadline_ms"] <= 1000 / fleet["control_hz"]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
