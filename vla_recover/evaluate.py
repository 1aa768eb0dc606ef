"""Closed-loop evaluation of a policy in a sim task: success rate with a 95% Wilson interval.

Episodes run in lockstep batches so every control tick costs one batched forward. Chunks are planned, seeded,
filtered and executed by the rules of `vla_recover.execution`, which the fleet follows too, so a policy scores here
what it does in the fleet. Every result keeps its per-seed outcomes (``seeds``, ``outcomes``), which a paired
comparison of two policies on the same seeds needs.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import queue
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from vla_recover.envs import make_task, resolve_task_name
from vla_recover.execution import DEFAULT_ACTION_TOLERANCE, INITIAL_GRIP, chunk_seed, filtered_chunk, hold_action
from vla_recover.policies import Policy
from vla_recover.policies.common.encoders import SentenceEmbedder

__all__ = [
    "EpisodeObserver",
    "evaluate_checkpoint",
    "evaluate_policy",
    "failure_order",
    "running_totals",
    "success_by_failure",
    "wilson_interval",
]

NO_FAILURE = "none"  # the episodes in which no injected failure fired


class EpisodeObserver(Protocol):
    """Watches one evaluation episode: what DAgger's oracle needs to act from the states the policy visits."""

    def started(self, env: Any, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None: ...

    def acting(self, env: Any, action: np.ndarray) -> None:
        """Called with the action the policy is about to execute, before the env steps."""

    def stepped(self, obs: dict[str, np.ndarray], info: dict[str, Any], terminated: bool, truncated: bool) -> None: ...


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _task_config_for(policy: Policy, task_config: Any) -> dict[str, Any]:
    cfg = policy.config
    config = dict(task_config or {})
    if cfg.image_keys:
        config.setdefault("cameras", [k.removeprefix("obs.images.") for k in cfg.image_keys])
        config.setdefault("image_size", policy.shapes[cfg.image_keys[0]][0])
    return config


def check_policy_fits_task(policy: Policy, task: str, task_config: Any = None) -> None:
    """Raise, naming the key, when the task's observations or actions do not fit the policy."""
    name = resolve_task_name(task)
    probe = make_task(name, _task_config_for(policy, task_config))
    try:
        cfg = policy.config
        for key in ([cfg.state_key] if cfg.state_key else []) + list(cfg.image_keys):
            got = tuple(probe.observation_space[key.removeprefix("obs.")].shape)
            if got != tuple(policy.shapes[key]):
                raise ValueError(f"policy input {key!r} has shape {tuple(policy.shapes[key])}, task {name} gives {got}")
        if probe.action_space.shape != (policy.action_dim,):
            raise ValueError(f"policy acts in {policy.action_dim} dims, task {name} takes {probe.action_space.shape}")
    finally:
        probe.close()


def evaluate_policy(
    policy: Policy,
    embedder: SentenceEmbedder,
    task: str,
    seeds: list[int],
    batch: int = 25,
    task_config: Any = None,
    video_dir: Path | None = None,
    on_batch: Callable[[int, int], None] | None = None,
    action_tolerance: float = DEFAULT_ACTION_TOLERANCE,
    observe: Callable[[int], EpisodeObserver] | None = None,
) -> dict[str, Any]:
    """Roll the policy out once per seed; returns counts, rate, interval, mean episode length, the per-seed
    outcomes and injected failures that fired (``failures_fired``: their kinds joined by ``+``, "" for none) and
    how many policy actions were clipped or chunks rejected (``action_tolerance``: see
    `vla_recover.execution.filtered_chunk`). ``on_batch(episodes, successes)`` is called with each finished batch's
    counts; ``observe(seed)``, when given, returns the observer of that seed's episode."""
    name = resolve_task_name(task)
    cfg = policy.config
    keys = ([cfg.state_key] if cfg.state_key else []) + list(cfg.image_keys)
    config = _task_config_for(policy, task_config)
    check_policy_fits_task(policy, name, config)
    policy.trace_networks()  # as the fleet samples (vla_recover.fleet.inference)
    outcomes, lengths, fired = [], [], []
    counts = _ActionCounts()
    for lo in range(0, len(seeds), batch):
        batch_seeds = seeds[lo : lo + batch]
        envs = [make_task(name, config, render_mode="rgb_array" if video_dir else None) for _ in batch_seeds]
        observers = [observe(seed) for seed in batch_seeds] if observe is not None else None
        results = _run_batch(policy, embedder, envs, batch_seeds, keys, video_dir, action_tolerance, counts, observers)
        outcomes += [int(r[0]) for r in results]
        lengths += [r[1] for r in results]
        fired += [r[2] for r in results]
        for env in envs:
            env.close()
        if on_batch is not None:
            on_batch(len(results), sum(r[0] for r in results))
    successes = sum(outcomes)
    low, high = wilson_interval(successes, len(seeds))
    return {
        "task": name,
        "episodes": len(seeds),
        "successes": successes,
        "success_rate": successes / len(seeds),
        "ci95": [round(low, 4), round(high, 4)],
        "mean_length": float(np.mean(lengths)),
        "seeds": [int(s) for s in seeds],
        "outcomes": outcomes,
        "failures_fired": fired,
        "clipped_actions": counts.clipped,
        "rejected_chunks": counts.rejected,
    }


def success_by_failure(result: dict[str, Any]) -> dict[str, dict[str, int]] | None:
    """Successes and episodes of an evaluation by the injected failures that fired in them ("push", "push+slip",
    ``NO_FAILURE``), in that order; None for an evaluation that did not record them or where none fired."""
    fired = result.get("failures_fired")
    if fired is None or not any(fired):
        return None
    table: dict[str, dict[str, int]] = {}
    for kinds, outcome in zip(fired, result["outcomes"], strict=True):
        cell = table.setdefault(kinds or NO_FAILURE, {"successes": 0, "episodes": 0})
        cell["successes"] += int(outcome)
        cell["episodes"] += 1
    return {kinds: table[kinds] for kinds in sorted(table, key=failure_order)}


def failure_order(kinds: str) -> tuple[bool, int, str]:
    """Sort key of failure labels: single failures first, then combinations, then ``NO_FAILURE``."""
    return kinds == NO_FAILURE, kinds.count("+"), kinds


class _ActionCounts:
    """Policy actions clipped into bounds and chunks rejected, over an evaluation."""

    def __init__(self) -> None:
        self.clipped = self.rejected = 0


def running_totals(on_progress: Callable[[int, int], None] | None) -> Callable[[int, int], None]:
    """An ``on_batch(episodes, successes)`` for `evaluate_policy` that reports the running totals to ``on_progress``."""
    totals = [0, 0]

    def count(episodes: int, successes: int) -> None:
        totals[0] += episodes
        totals[1] += successes
        if on_progress is not None:
            on_progress(totals[0], totals[1])

    return count


def _run_batch(
    policy: Policy,
    embedder: SentenceEmbedder,
    envs: list[Any],
    seeds: list[int],
    keys: list[str],
    video_dir: Path | None,
    action_tolerance: float,
    counts: _ActionCounts,
    observers: list[EpisodeObserver] | None = None,
) -> list[tuple[bool, int, str]]:
    """Each episode's (success, length, the injected failures that fired in it, joined by "+")."""
    cfg = policy.config
    histories: list[deque[dict[str, np.ndarray]]] = []
    instructions = []
    for i, (env, seed) in enumerate(zip(envs, seeds, strict=True)):
        obs, info = env.reset(seed=seed)
        if observers is not None:
            observers[i].started(env, obs, info)
        histories.append(deque([obs] * cfg.obs_horizon, maxlen=cfg.obs_horizon))
        instructions.append(info["instruction"])
    language = embedder.embed(instructions) if cfg.use_language else None
    done = [False] * len(envs)
    outcome = [(False, 0, "")] * len(envs)
    frames: list[list[np.ndarray]] = [[] for _ in envs]
    plan: list[deque[np.ndarray]] = [deque() for _ in envs]
    grip = [INITIAL_GRIP] * len(envs)  # the last gripper command, which a hold keeps
    step = 0
    while not all(done):
        need = [i for i, d in enumerate(done) if not d and not plan[i]]
        if need:
            obs_batch = {
                k: np.stack([np.stack([o[k.removeprefix("obs.")] for o in histories[i]]) for i in need]) for k in keys
            }
            if language is not None:
                obs_batch["instruction_embedding"] = language[need]
            # each episode's own noise, so its outcome does not depend on the batch it ran in
            chunks = policy.predict_chunk(obs_batch, seed=[chunk_seed(seeds[i], step) for i in need])
            for j, i in enumerate(need):
                try:
                    window, outside = filtered_chunk(chunks[j, : cfg.action_exec], policy.action_dim, action_tolerance)
                except ValueError:
                    counts.rejected += 1
                    plan[i].append(hold_action(policy.action_dim, grip[i]))
                    continue
                counts.clipped += outside
                plan[i].extend(window)
        for i, env in enumerate(envs):
            if done[i]:
                continue
            action = np.asarray(plan[i].popleft(), dtype=np.float32)  # as a fleet worker passes it to its sim
            grip[i] = float(action[-1])
            if observers is not None:
                observers[i].acting(env, action)
            obs, _, terminated, truncated, info = env.step(action)
            if observers is not None:
                observers[i].stepped(obs, info, terminated, truncated)
            histories[i].append(obs)
            if video_dir is not None:
                frames[i].append(env.render())
            if terminated or truncated:
                done[i] = True
                fired = sorted({event["kind"] for event in info.get("failures", ())})
                outcome[i] = (bool(info["is_success"]), step + 1, "+".join(fired))
        step += 1
    if video_dir is not None:
        import imageio.v3 as iio

        video_dir.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(seeds):
            label = "success" if outcome[i][0] else "failure"
            iio.imwrite(video_dir / f"seed{seed}_{label}.mp4", frames[i], fps=20, codec="libx264")
    return outcome


@dataclass(frozen=True)
class _Share:
    """One process's part of a checkpoint's evaluation."""

    directory: str
    task: str
    seeds: list[int]
    batch: int
    task_config: Any
    video_dir: Any
    action_tolerance: float
    device: str


def _load_and_evaluate(share: _Share, on_batch: Callable[[int, int], None] | None) -> dict[str, Any]:
    import torch

    from vla_recover.policies.common.checkpoint import load_policy

    torch.set_num_threads(1)
    policy, embedder, _ = load_policy(share.directory, share.device)
    return evaluate_policy(
        policy, embedder, share.task, share.seeds, share.batch, share.task_config, share.video_dir, on_batch,
        share.action_tolerance,
    )  # fmt: skip


def _pool_worker(share: _Share, counts: Any) -> dict[str, Any]:
    """One evaluation process of several; ``counts`` (a queue) receives (episodes, successes) per finished batch."""

    def report(episodes: int, successes: int) -> None:
        counts.put((episodes, successes))

    return _load_and_evaluate(share, report)


def _on_ray(shares: list[_Share], address: str, count: Callable[[int, int], None]) -> list[dict[str, Any]]:
    """Each share as a Ray task of one CPU, wherever the cluster places it; results in the shares' order."""
    from vla_recover.fleet.ray_backend import init_ray

    init_ray(address)
    import ray

    task = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_load_and_evaluate)
    pending = {task.remote(share, None): index for index, share in enumerate(shares)}
    results: list[dict[str, Any]] = [{}] * len(shares)
    waiting = list(pending)
    while waiting:
        done, waiting = ray.wait(waiting, num_returns=1)
        result = ray.get(done[0])
        results[pending[done[0]]] = result
        count(result["episodes"], result["successes"])
    return results


def evaluate_checkpoint(
    directory: str | Path,
    task: str,
    episodes: int,
    seed: int,
    workers: int = 1,
    batch: int = 25,
    task_config: Any = None,
    video_dir: Path | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    action_tolerance: float = DEFAULT_ACTION_TOLERANCE,
    device: str = "cpu",
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Evaluate a saved policy on ``episodes`` seeds from ``seed``, split over ``workers`` processes, each running
    it on ``device`` (a `vla_recover.devices` name); with ``ray_address``, over ``workers`` Ray tasks on that
    cluster instead (the checkpoint's folder must be readable on its nodes). ``on_progress(episodes_done,
    successes)`` is called as batches finish (per share on Ray)."""
    from vla_recover.devices import resolve_device

    resolve_device(device)  # refused here, before any worker starts
    seeds = list(range(seed, seed + episodes))
    shares = [
        _Share(str(directory), task, seeds[w::workers], batch, task_config, video_dir, action_tolerance, device)
        for w in range(workers)
        if seeds[w::workers]
    ]
    count = running_totals(on_progress)
    if ray_address is not None:
        results = _on_ray(shares, ray_address, count)
    elif len(shares) == 1:
        results = [_load_and_evaluate(shares[0], count)]
    else:
        context = mp.get_context("spawn")
        with context.Manager() as manager, context.Pool(len(shares)) as pool:
            counts = manager.Queue()
            pending = pool.starmap_async(_pool_worker, [(share, counts) for share in shares])
            while not pending.ready() or not counts.empty():
                with contextlib.suppress(queue.Empty):
                    count(*counts.get(timeout=0.2))
            results = pending.get()
    by_seed = {s: o for r in results for s, o in zip(r["seeds"], r["outcomes"], strict=True)}
    fired = {s: f for r in results for s, f in zip(r["seeds"], r["failures_fired"], strict=True)}
    successes = sum(r["successes"] for r in results)
    low, high = wilson_interval(successes, episodes)
    mean_length = sum(r["mean_length"] * r["episodes"] for r in results) / episodes
    return {
        "task": results[0]["task"],
        "policy": str(directory),
        "episodes": episodes,
        "seed": seed,
        "successes": successes,
        "success_rate": successes / episodes,
        "ci95": [round(low, 4), round(high, 4)],
        "mean_length": mean_length,
        "seeds": seeds,
        "outcomes": [by_seed[s] for s in seeds],
        "failures_fired": [fired[s] for s in seeds],
        "clipped_actions": sum(r["clipped_actions"] for r in results),
        "rejected_chunks": sum(r["rejected_chunks"] for r in results),
    }
