"""Fleet throughput: aggregate control steps/s for 1, 4 and 12 sim robots on this machine.

Rows per robot count: (a) ``limit``: the same env worker processes stepping a constant action with no fleet logic;
(b) ``fleet_constant``: the fleet manager (state machines, recording, events) with a constant-action policy;
(c) ``fleet_policy_batched`` / ``fleet_policy_unbatched``: the fleet with a small diffusion policy, one forward per
tick for all robots vs one per robot; (d) ``async_vector_env``: gymnasium's AsyncVectorEnv on the same envs.
Last line: one JSON object.

    python benchmarks/fleet_throughput.py [--robots 1 4 12] [--seconds 8] [--task LiftCube]
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

ACTION = [0.0, 0.0, 0.0, 0.0, -1.0]


def _limit_worker(task: str, horizon: int, seconds: float, start: Any, counts: Any, index: int) -> None:
    from vla_recover.envs import make_task

    env = make_task(task, {"horizon": horizon})
    env.reset(seed=index)
    action = np.asarray(ACTION)
    start.wait()
    steps, deadline = 0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        _, _, terminated, truncated, _ = env.step(action)
        steps += 1
        if terminated or truncated:
            env.reset()
    counts[index] = steps


def measure_limit(task: str, robots: int, horizon: int, seconds: float) -> float:
    context = mp.get_context("spawn")
    start = context.Event()
    counts = context.Array("l", robots)
    processes = [
        context.Process(target=_limit_worker, args=(task, horizon, seconds, start, counts, i)) for i in range(robots)
    ]
    for process in processes:
        process.start()
    time.sleep(3.0 + 0.3 * robots)  # let every worker import and build its env
    start.set()
    for process in processes:
        process.join()
    return sum(counts) / seconds


def measure_fleet(task: str, robots: int, horizon: int, seconds: float, store: Path, **extra: Any) -> float:
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
        ticks, begin = fleet.ticks, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            fleet.tick()
        return (fleet.ticks - ticks) * robots / (time.perf_counter() - begin)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 4, 12])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--task", default="LiftCube")
    parser.add_argument("--horizon", type=int, default=200)
    args = parser.parse_args()

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        policy = small_policy(args.task, Path(tmp) / "policy")
        for n in args.robots:
            row = {
                "limit": measure_limit(args.task, n, args.horizon, args.seconds),
                "fleet_constant": measure_fleet(args.task, n, args.horizon, args.seconds, Path(tmp) / f"c{n}"),
                "fleet_policy_batched": measure_fleet(
                    args.task, n, args.horizon, args.seconds, Path(tmp) / f"b{n}", policy=str(policy)
                ),
                "fleet_policy_unbatched": measure_fleet(
                    args.task,
                    n,
                    args.horizon,
                    args.seconds,
                    Path(tmp) / f"u{n}",
                    policy=str(policy),
                    batched_inference=False,
                ),
                "async_vector_env": measure_async_vector_env(args.task, n, args.horizon, args.seconds),
            }
            row = {k: round(v, 1) for k, v in row.items()}
            row["fleet_vs_limit"] = round(row["fleet_constant"] / row["limit"], 3)
            row["batched_vs_unbatched"] = round(row["fleet_policy_batched"] / row["fleet_policy_unbatched"], 2)
            print(f"{n} robots: {row}", flush=True)
            results[str(n)] = row
    print(json.dumps({"benchmark": "fleet_throughput", "task": args.task, "steps_per_s": results}))


if __name__ == "__main__":
    main()
