"""Fleet throughput: aggregate control steps/s for 1, 4 and 12 sim robots on this machine.

Rows per robot count: (a) ``limit``: the same env worker processes stepping a constant action with no fleet logic,
one process per robot, and ``limit_per_core``: laid out as one process per core; (b) ``fleet_constant`` and
``fleet_constant_per_core``: the fleet manager (state machines, recording, events, rewind checkpoints) with a
constant-action policy, in the same two layouts (``robots_per_process``), sims running up to ``run_ahead_steps``
(the config's default) planned steps ahead, and ``fleet_constant_lockstep``: the per-core layout in lockstep
(``run_ahead_steps: 1``); ``fleet_vs_limit`` is the better fleet layout over the better free-running one;
(c) ``fleet_policy_batched`` / ``fleet_policy_unbatched``: the fleet with a small diffusion policy, one forward per
tick for all robots vs one per robot; (d) ``async_vector_env``: gymnasium's AsyncVectorEnv on the same envs.
CPU per robot-step (per-core layout, median sample): ``cpu_us_limit_sim`` for the bare sims, ``cpu_us_fleet_manager``
and ``cpu_us_fleet_workers`` for the fleet; ``cpu_bound_vs_limit`` (sim over all the fleet spends) is what the fleet
could reach with every core busy, so it shows how much of the gap is overhead and how much is idle cores.
Last line: one JSON object.

    python benchmarks/fleet_throughput.py [--robots 1 4 12] [--seconds 8] [--task LiftCube] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ACTION = [0.0, 0.0, 0.0, 0.0, -1.0]


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _limit_worker(
    task: str, size: int, horizon: int, seconds: float, start: Any, counts: Any, cpu: Any, index: int
) -> None:
    from vla_recover.envs import make_task

    envs = [make_task(task, {"horizon": horizon}) for _ in range(size)]
    for offset, env in enumerate(envs):
        env.reset(seed=index * size + offset)
    action = np.asarray(ACTION)
    start.wait()
    cpu_start = time.process_time()
    steps, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for env in envs:
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                env.reset()
        steps += size
    counts[index] = steps
    cpu[index] = time.process_time() - cpu_start


def measure_limit(task: str, robots: int, per_process: int, horizon: int, seconds: float) -> tuple[float, float]:
    """Worker processes laid out as the fleet's (``per_process`` envs each) stepping as fast as they can:
    (steps/s, CPU µs per step)."""
    context = mp.get_context("spawn")
    start = context.Event()
    sizes = [min(per_process, robots - first) for first in range(0, robots, per_process)]
    counts, cpu = context.Array("l", len(sizes)), context.Array("d", len(sizes))
    processes = [
        context.Process(target=_limit_worker, args=(task, size, horizon, seconds, start, counts, cpu, i))
        for i, size in enumerate(sizes)
    ]
    for process in processes:
        process.start()
    time.sleep(3.0 + 0.3 * robots)  # let every worker import and build its envs
    start.set()
    for process in processes:
        process.join()
    steps = sum(counts[:])
    return steps / seconds, 1e6 * sum(cpu[:]) / max(1, steps)


def measure_fleet(
    task: str, robots: int, horizon: int, seconds: float, store: Path, **extra: Any
) -> tuple[float, float, float]:
    """(steps/s, manager CPU µs per robot-step, sim workers' CPU µs per robot-step) over the timed window."""
    from vla_recover.config import validate_config
    from vla_recover.fleet import FleetConfig, FleetManager

    raw = {
        "task": task, "robots": robots, "episodes": 10**6, "store": str(store), "task_config": {"horizon": horizon},
        "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False}, **extra,
    }  # fmt: skip
    if "policy" not in extra:
        raw["constant_action"] = ACTION
    fleet = FleetManager(validate_config(FleetConfig, raw))
    try:
        fleet.start()
        for _ in range(20):  # warm-up: workers answer, the policy runs once
            fleet.tick()
        pids = sorted({slot.worker.pid for slot in fleet.slots.values()})  # type: ignore[attr-defined]
        workers_cpu, manager_cpu = sum(_process_cpu_s(pid) for pid in pids), time.process_time()
        ticks, begin = fleet.ticks, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            fleet.tick()
        elapsed, steps = time.perf_counter() - begin, (fleet.ticks - ticks) * robots
        workers_cpu = sum(_process_cpu_s(pid) for pid in pids) - workers_cpu
        return steps / elapsed, 1e6 * (time.process_time() - manager_cpu) / steps, 1e6 * workers_cpu / steps
    finally:
        fleet.close()


def measure_async_vector_env(task: str, robots: int, horizon: int, seconds: float) -> float:
    import gymnasium as gym

    from vla_recover.envs import make_task

    envs = gym.vector.AsyncVectorEnv(
        [lambda: make_task(task, {"horizon": horizon}) for _ in range(robots)], context="spawn"
    )
    try:
        envs.reset(seed=0)
        actions = np.tile(ACTION, (robots, 1))
        for _ in range(10):
            envs.step(actions)
        steps, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            envs.step(actions)
            steps += robots
        return steps / (time.perf_counter() - begin)
    finally:
        envs.close()


def small_policy(task: str, directory: Path) -> Path:
    """A randomly initialised state-only diffusion policy for ``task``, as big as the quality-bar recipe."""
    from vla_recover.envs import make_task
    from vla_recover.policies import build_policy
    from vla_recover.policies.common.checkpoint import save_policy

    env = make_task(task)
    state_dim, action_dim = env.observation_space["state"].shape[0], env.action_space.shape[0]
    env.close()
    policy = build_policy("diffusion", {"down_dims": [64, 128, 256]}, {"obs.state": (state_dim,)}, action_dim)
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs.state": rng.normal(size=(64, state_dim)), "action": rng.uniform(-1, 1, (64, 5))})
    return save_policy(policy, directory)


def constant_action_row(task: str, n: int, grouped: int, horizon: int, seconds: float, tmp: Path) -> dict[str, float]:
    """The free-running limit and the fleet with a constant action, in both layouts, measured back to back; with the
    CPU each spends per robot-step in the per-core layout (``cpu_us_*``)."""
    limit, _ = measure_limit(task, n, 1, horizon, seconds)
    fleet, _, _ = measure_fleet(task, n, horizon, seconds, tmp / "c")
    limit_per_core, limit_cpu = measure_limit(task, n, grouped, horizon, seconds)
    per_core, manager_cpu, workers_cpu = measure_fleet(task, n, horizon, seconds, tmp / "g", robots_per_process=grouped)
    lockstep, _, _ = measure_fleet(task, n, horizon, seconds, tmp / "l", robots_per_process=grouped, run_ahead_steps=1)
    return {
        "limit": limit,
        "fleet_constant": fleet,
        "limit_per_core": limit_per_core,
        "fleet_constant_per_core": per_core,
        "fleet_constant_lockstep": lockstep,
        "cpu_us_limit_sim": limit_cpu,
        "cpu_us_fleet_manager": manager_cpu,
        "cpu_us_fleet_workers": workers_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 4, 12])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--task", default="LiftCube")
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument(
        "--repeats", type=int, default=3,
        help="constant-action rows are measured this many times, interleaved, and the best kept: on a shared "
        "2-core machine one 8 s sample of the same setup varies by a third",
    )  # fmt: skip
    args = parser.parse_args()

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        policy = small_policy(args.task, Path(tmp) / "policy")
        for n in args.robots:
            grouped = max(1, math.ceil(n / (os.cpu_count() or 1)))  # one worker process per core
            samples = [
                constant_action_row(args.task, n, grouped, args.horizon, args.seconds, Path(tmp) / f"{n}_{i}")
                for i in range(args.repeats)
            ]
            measured: dict[str, float] = {}
            for key in samples[0]:  # throughputs: the best sample; CPU per step: the median sample
                values = [sample[key] for sample in samples]
                measured[key] = float(np.median(values)) if key.startswith("cpu_us") else max(values)
            measured |= {
                "fleet_policy_batched": measure_fleet(
                    args.task, n, args.horizon, args.seconds, Path(tmp) / f"b{n}", policy=str(policy),
                    robots_per_process=grouped,
                )[0],
                "fleet_policy_unbatched": measure_fleet(
                    args.task, n, args.horizon, args.seconds, Path(tmp) / f"u{n}", policy=str(policy),
                    robots_per_process=grouped, batched_inference=False,
                )[0],
                "async_vector_env": measure_async_vector_env(args.task, n, args.horizon, args.seconds),
            }  # fmt: skip
            row: dict[str, Any] = {k: round(v, 1) for k, v in measured.items()}
            row["robots_per_process"] = grouped
            # strict: the best fleet layout against the best free-running layout
            best_fleet = max(row["fleet_constant"], row["fleet_constant_per_core"])
            row["fleet_vs_limit"] = round(best_fleet / max(row["limit"], row["limit_per_core"]), 3)
            row["run_ahead_vs_lockstep"] = round(row["fleet_constant_per_core"] / row["fleet_constant_lockstep"], 2)
            row["batched_vs_unbatched"] = round(row["fleet_policy_batched"] / row["fleet_policy_unbatched"], 2)
            # with every core busy, the fleet can reach at most the sim's CPU per step over all it spends per step
            spent = row["cpu_us_fleet_manager"] + row["cpu_us_fleet_workers"]
            row["cpu_bound_vs_limit"] = round(row["cpu_us_limit_sim"] / spent, 3) if spent else None
            print(f"{n} robots: {row}", flush=True)
            results[str(n)] = row
    print(json.dumps({"benchmark": "fleet_throughput", "task": args.task, "steps_per_s": results}))


if __name__ == "__main__":
    main()
