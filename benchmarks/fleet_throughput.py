"""Fleet throughput: aggregate control steps/s for 1, 4 and 12 sim robots on this machine.

Rows per robot count: (a) ``limit``: the same env worker processes stepping a constant action with no fleet logic,
one process per robot, and ``limit_per_core``: laid out as one process per core; (b) ``fleet_constant`` and
``fleet_constant_per_core``: the fleet manager (state machines, recording, events, rewind checkpoints) with a
constant-action policy, in the same two layouts (``robots_per_process``), sims running up to ``run_ahead_steps``
(the config's default) planned steps ahead; ``fleet_constant_lockstep``: the per-core layout in lockstep
(``run_ahead_steps: 1``) and ``fleet_constant_run_ahead_max``: running a whole executed chunk ahead (bigger
messages, later takeovers); ``fleet_vs_limit`` is the better default fleet layout over the better free-running one,
``fleet_vs_limit_rounds`` its spread over rounds; (c) ``fleet_policy_batched`` / ``fleet_policy_unbatched``: the
fleet with a small diffusion policy, one forward per tick for all robots vs one per robot; (d) ``async_vector_env``:
gymnasium's AsyncVectorEnv on the same envs.

The setups of (a)-(c) stay up together and take turns, ``--rounds`` windows of ``--window`` seconds each, so the
load of a shared machine falls on all of them alike; a fleet's window ends by landing its steps in flight (timed).
``*_workers_waiting``: the share of the time the fleet's worker processes sat waiting for requests. CPU per
robot-step in the per-core layout: ``cpu_us_limit_sim`` for the bare sims, ``cpu_us_fleet_manager`` (the control
loop and the thread that writes the store) and ``cpu_us_fleet_workers`` for the fleet;
``fleet_constant_per_core_unstored`` and ``cpu_us_fleet_unstored_manager``: a diagnostic, the same fleet dropping
its finished attempts instead of storing them, so the difference is what writing episodes costs;
``cpu_bound_vs_limit`` (sim over all the fleet spends) is what the fleet could reach with every core busy, so it
shows how much of the gap is overhead and how much is idle cores.
``--spare-core N`` adds ``spare_core``: N robots in one worker process against N bare sims in one process, so the
manager has a core the sims do not use (on two cores: what a machine with a core beyond the sims' would give).
Last line: one JSON object.

    python benchmarks/fleet_throughput.py [--robots 1 4 12] [--rounds 4] [--window 2] [--task LiftCube]
                                          [--spare-core 6]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing as mp
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ACTION = [0.0, 0.0, 0.0, 0.0, -1.0]
RUN_AHEAD_MAX = 8  # the constant source executes 8 actions of each chunk: only one chunk's actions run ahead


def _process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _limit_worker(
    task: str, size: int, horizon: int, barrier: Any, window_s: Any, counts: Any, cpu: Any, index: int
) -> None:
    """``size`` envs stepping a constant action as fast as they can, for one window each time the parent says go."""
    from vla_recover.envs import make_task

    envs = [make_task(task, {"horizon": horizon}) for _ in range(size)]
    for offset, env in enumerate(envs):
        env.reset(seed=index * size + offset)
    action = np.asarray(ACTION)
    while True:
        barrier.wait()  # go
        if window_s.value <= 0:
            return
        cpu_start = time.process_time()
        steps, deadline = 0, time.perf_counter() + window_s.value
        while time.perf_counter() < deadline:
            for env in envs:
                _, _, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    env.reset()
            steps += size
        counts[index], cpu[index] = steps, time.process_time() - cpu_start
        barrier.wait()  # done


class LimitWorkers:
    """Worker processes laid out as the fleet's (``per_process`` envs each) with no fleet logic: the limit."""

    def __init__(self, task: str, robots: int, per_process: int, horizon: int) -> None:
        context = mp.get_context("spawn")
        sizes = [min(per_process, robots - first) for first in range(0, robots, per_process)]
        self._barrier = context.Barrier(len(sizes) + 1)
        self._window_s = context.Value("d", 0.0)
        self._counts, self._cpu = context.Array("l", len(sizes)), context.Array("d", len(sizes))
        self._processes = [
            context.Process(
                target=_limit_worker,
                args=(task, size, horizon, self._barrier, self._window_s, self._counts, self._cpu, i),
                daemon=True,
            )
            for i, size in enumerate(sizes)
        ]
        for process in self._processes:
            process.start()
        self.window(0.5)  # every worker has imported and built its envs

    def window(self, seconds: float) -> tuple[int, float, float, float]:
        """Step for ``seconds``: (steps, seconds, the sims' CPU seconds, 0.0: there is no manager)."""
        self._window_s.value = seconds
        self._barrier.wait(timeout=120)
        self._barrier.wait(timeout=120 + seconds)
        return sum(self._counts[:]), seconds, sum(self._cpu[:]), 0.0

    def close(self) -> None:
        self._window_s.value = 0.0
        with contextlib.suppress(threading.BrokenBarrierError):
            self._barrier.wait(timeout=10)
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


class TimedFleet:
    """A fleet with a constant-action (or ``policy``) source, ticked for timed windows."""

    def __init__(self, task: str, robots: int, horizon: int, store: Path, **extra: Any) -> None:
        from vla_recover.config import validate_config
        from vla_recover.fleet import FleetConfig, FleetManager

        raw = {
            "task": task, "robots": robots, "episodes": 10**6, "store": str(store), "task_config": {"horizon": horizon},
            "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False}, **extra,
        }  # fmt: skip
        if "policy" not in extra:
            raw["constant_action"] = ACTION
        self.robots = robots
        self.fleet = FleetManager(validate_config(FleetConfig, raw))
        self.fleet.start()
        for _ in range(20):  # warm-up: workers answer, the policy runs once
            self.fleet.tick()
        self.fleet.land_in_flight()
        slots = self.fleet.slots.values()
        self._hosts = list({id(s.worker.host): s.worker.host for s in slots}.values())  # type: ignore[attr-defined]
        self._pids = [host.process.pid for host in self._hosts]
        self._waited_s = self._process_s = 0.0

    @property
    def workers_waiting(self) -> float:
        """The share of their time the worker processes spent waiting for requests, over all windows so far."""
        return self._waited_s / self._process_s if self._process_s else 0.0

    def window(self, seconds: float) -> tuple[int, float, float, float]:
        """Tick for ``seconds``, then land the steps in flight (timed too): (steps, seconds, the workers' CPU
        seconds, the manager's CPU seconds)."""
        workers_cpu, manager_cpu = sum(_process_cpu_s(pid) for pid in self._pids), time.process_time()
        waited = sum(host.waited_s for host in self._hosts)
        ticks, begin = self.fleet.ticks, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            self.fleet.tick()
        landed = self.fleet.land_in_flight()
        elapsed = time.perf_counter() - begin
        steps = (self.fleet.ticks - ticks) * self.robots + landed
        workers_cpu = sum(_process_cpu_s(pid) for pid in self._pids) - workers_cpu
        self._waited_s += sum(host.waited_s for host in self._hosts) - waited
        self._process_s += elapsed * len(self._hosts)
        return steps, elapsed, workers_cpu, time.process_time() - manager_cpu

    def close(self) -> None:
        self.fleet.close()


def measure_interleaved(
    setups: dict[str, LimitWorkers | TimedFleet], rounds: int, window_s: float
) -> dict[str, dict[str, Any]]:
    """Every setup runs ``rounds`` windows of ``window_s``, taking turns, so a slow minute on a shared machine
    slows all of them alike. Per setup: steps/s over all its windows, steps/s per round, and CPU µs per step
    (``cpu_us``: the sims'; fleets also ``cpu_us_manager``)."""
    totals: dict[str, list[float]] = {name: [0.0, 0.0, 0.0, 0.0] for name in setups}
    per_round: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(rounds):
        for name, setup in setups.items():
            measured = setup.window(window_s)  # steps, seconds, sims' CPU seconds, manager's CPU seconds
            totals[name] = [total + value for total, value in zip(totals[name], measured, strict=True)]
            per_round[name].append(measured[0] / measured[1])
    results: dict[str, dict[str, Any]] = {}
    for name, (total_steps, total_s, total_sims_cpu, total_manager_cpu) in totals.items():
        results[name] = {
            "steps_per_s": total_steps / total_s,
            "rounds": per_round[name],
            "cpu_us": 1e6 * total_sims_cpu / max(1.0, total_steps),
            "cpu_us_manager": 1e6 * total_manager_cpu / max(1.0, total_steps),
        }
    return results


def spare_core_row(task: str, robots: int, horizon: int, rounds: int, window_s: float, tmp: Path) -> dict[str, Any]:
    """The same comparison with a core to spare for the manager: every robot in one worker process, so the bare sims
    fill one core and the manager has another to itself (what a machine with a core beyond the sims' gives)."""
    setups: dict[str, Any] = {
        "limit": LimitWorkers(task, robots, robots, horizon),
        "fleet": TimedFleet(task, robots, horizon, tmp / "s", robots_per_process=robots),
        "fleet_run_ahead_max": TimedFleet(
            task, robots, horizon, tmp / "sm", robots_per_process=robots, run_ahead_steps=RUN_AHEAD_MAX
        ),
    }
    measured = _interleaved(setups, rounds, window_s)
    limit = measured["limit"]["steps_per_s"]
    row: dict[str, Any] = {"robots": robots, "limit": round(limit, 1)}
    for name in ("fleet", "fleet_run_ahead_max"):
        row[name] = round(measured[name]["steps_per_s"], 1)
        row[f"{name}_vs_limit"] = round(measured[name]["steps_per_s"] / limit, 3)
        row[f"cpu_us_{name}_workers"] = round(measured[name]["cpu_us"], 1)
        row[f"cpu_us_{name}_manager"] = round(measured[name]["cpu_us_manager"], 1)
    row["cpu_us_limit_sim"] = round(measured["limit"]["cpu_us"], 1)
    return row


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


def small_policy(task: str, directory: Path, kind: str = "diffusion", config: dict[str, Any] | None = None) -> Path:
    """A randomly initialised state-only policy for ``task``; by default a diffusion policy as big as the
    quality-bar recipe."""
    from vla_recover.envs import make_task
    from vla_recover.policies import build_policy
    from vla_recover.policies.common.checkpoint import save_policy

    env = make_task(task)
    state_dim, action_dim = env.observation_space["state"].shape[0], env.action_space.shape[0]
    env.close()
    policy = build_policy(kind, config or {"down_dims": [64, 128, 256]}, {"obs.state": (state_dim,)}, action_dim)
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs.state": rng.normal(size=(64, state_dim)), "action": rng.uniform(-1, 1, (64, 5))})
    return save_policy(policy, directory)


def _interleaved(setups: dict[str, Any], rounds: int, window_s: float) -> dict[str, dict[str, Any]]:
    try:
        return measure_interleaved(setups, rounds, window_s)
    finally:
        for setup in setups.values():
            setup.close()


def constant_action_row(
    task: str, n: int, grouped: int, horizon: int, rounds: int, window_s: float, tmp: Path
) -> dict[str, Any]:
    """The limit and the fleet with a constant action, in both layouts, and the per-core fleet in lockstep and
    running ahead as far as its chunks allow, all interleaved; CPU per robot-step in the per-core layout."""
    setups: dict[str, Any] = {}
    setups["limit"] = LimitWorkers(task, n, 1, horizon)
    setups["limit_per_core"] = LimitWorkers(task, n, grouped, horizon)
    setups["fleet_constant"] = TimedFleet(task, n, horizon, tmp / "c")
    setups["fleet_constant_per_core"] = TimedFleet(task, n, horizon, tmp / "g", robots_per_process=grouped)
    setups["fleet_constant_lockstep"] = TimedFleet(
        task, n, horizon, tmp / "l", robots_per_process=grouped, run_ahead_steps=1
    )
    setups["fleet_constant_run_ahead_max"] = TimedFleet(
        task, n, horizon, tmp / "m", robots_per_process=grouped, run_ahead_steps=RUN_AHEAD_MAX
    )
    unstored = setups["fleet_constant_per_core_unstored"] = TimedFleet(
        task, n, horizon, tmp / "u", robots_per_process=grouped
    )
    unstored.fleet.recorder.finished = lambda make_episodes: None  # type: ignore[method-assign]  # diagnostic
    measured = _interleaved(setups, rounds, window_s)
    row: dict[str, Any] = {name: round(m["steps_per_s"], 1) for name, m in measured.items()}
    for name in ("fleet_constant_per_core", "fleet_constant_run_ahead_max"):
        row[f"{name}_workers_waiting"] = round(setups[name].workers_waiting, 3)
    limit, fleet = measured["limit_per_core"], measured["fleet_constant_per_core"]
    row["cpu_us_limit_sim"] = round(limit["cpu_us"], 1)
    row["cpu_us_fleet_workers"] = round(fleet["cpu_us"], 1)
    row["cpu_us_fleet_manager"] = round(fleet["cpu_us_manager"], 1)
    row["cpu_us_fleet_run_ahead_max_workers"] = round(measured["fleet_constant_run_ahead_max"]["cpu_us"], 1)
    row["cpu_us_fleet_run_ahead_max_manager"] = round(measured["fleet_constant_run_ahead_max"]["cpu_us_manager"], 1)
    row["cpu_us_fleet_unstored_manager"] = round(measured["fleet_constant_per_core_unstored"]["cpu_us_manager"], 1)
    # the spread over rounds: the per-core fleet over the per-core limit measured next to it
    ratios = [f / lim for f, lim in zip(fleet["rounds"], limit["rounds"], strict=True)]
    row["fleet_vs_limit_rounds"] = [round(min(ratios), 3), round(max(ratios), 3)]
    return row


def policy_row(
    task: str, n: int, grouped: int, horizon: int, rounds: int, window_s: float, policy: Path, tmp: Path
) -> dict[str, float]:
    """The fleet with a small diffusion policy: one batched forward per tick vs one forward per robot."""
    setups: dict[str, Any] = {
        "fleet_policy_batched": TimedFleet(task, n, horizon, tmp / "b", policy=str(policy), robots_per_process=grouped),
        "fleet_policy_unbatched": TimedFleet(
            task, n, horizon, tmp / "u", policy=str(policy), robots_per_process=grouped, batched_inference=False
        ),
    }
    return {name: round(m["steps_per_s"], 1) for name, m in _interleaved(setups, rounds, window_s).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--robots", type=int, nargs="+", default=[1, 4, 12])
    parser.add_argument("--task", default="LiftCube")
    parser.add_argument("--horizon", type=int, default=200)
    parser.add_argument(
        "--rounds", type=int, default=4,
        help="windows per setup; the setups take turns window by window, since on a shared 2-core machine the "
        "same setup measured a minute apart can differ by a third",
    )  # fmt: skip
    parser.add_argument("--window", type=float, default=2.0, help="seconds per window")
    parser.add_argument(
        "--spare-core", type=int, default=0, metavar="ROBOTS",
        help="also measure ROBOTS robots in one worker process against as many bare sims in one process: the "
        "manager then has a core to itself (a diagnostic: what a core beyond the sims' would give)",
    )  # fmt: skip
    args = parser.parse_args()

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        policy = small_policy(args.task, Path(tmp) / "policy")
        for n in args.robots:
            grouped = max(1, math.ceil(n / (os.cpu_count() or 1)))  # one worker process per core
            work = Path(tmp) / str(n)
            row = constant_action_row(args.task, n, grouped, args.horizon, args.rounds, args.window, work)
            row |= policy_row(args.task, n, grouped, args.horizon, args.rounds, args.window, policy, work)
            row["async_vector_env"] = round(measure_async_vector_env(args.task, n, args.horizon, args.window), 1)
            row["robots_per_process"] = grouped
            row["run_ahead_max"] = RUN_AHEAD_MAX
            # strict: the best fleet layout at the default run-ahead against the best free-running layout
            best_fleet = max(row["fleet_constant"], row["fleet_constant_per_core"])
            row["fleet_vs_limit"] = round(best_fleet / max(row["limit"], row["limit_per_core"]), 3)
            row["run_ahead_max_vs_limit"] = round(
                row["fleet_constant_run_ahead_max"] / max(row["limit"], row["limit_per_core"]), 3
            )
            row["run_ahead_vs_lockstep"] = round(row["fleet_constant_per_core"] / row["fleet_constant_lockstep"], 2)
            row["batched_vs_unbatched"] = round(row["fleet_policy_batched"] / row["fleet_policy_unbatched"], 2)
            # with every core busy, the fleet can reach at most the sim's CPU per step over all it spends per step
            spent = row["cpu_us_fleet_manager"] + row["cpu_us_fleet_workers"]
            row["cpu_bound_vs_limit"] = round(row["cpu_us_limit_sim"] / spent, 3) if spent else None
            print(f"{n} robots: {row}", flush=True)
            results[str(n)] = row
        if args.spare_core:
            work = Path(tmp) / "spare_core"
            results["spare_core"] = spare_core_row(
                args.task, args.spare_core, args.horizon, args.rounds, args.window, work
            )
            print(f"spare core: {results['spare_core']}", flush=True)
    print(json.dumps({"benchmark": "fleet_throughput", "task": args.task, "steps_per_s": results}))


if __name__ == "__main__":
    main()
