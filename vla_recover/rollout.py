"""Run scripted-expert episodes: the demos that seed the loop, and what `vla-recover render` shows."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.data import EpisodeData, EpisodeStore, Recorder, RecorderClient
from vla_recover.envs import TASKS, load_task_config, make_expert, make_task, resolve_task_name
from vla_recover.envs.expert import ExpertConfig

__all__ = ["CollectConfig", "EpisodeRecord", "collect_demos", "expert_episodes", "summarize"]


class CollectConfig(FrozenConfig):
    """``vla-recover collect``: scripted demonstrations of one task."""

    task: str = Field(default="PickPlaceBin", description="the task (name or gym id) to demonstrate")
    episodes: int = Field(50, ge=1, le=1_000_000, description="demonstrations, one per seed from seed")
    seed: int = Field(0, ge=0, description="first demonstration's seed")
    expert: ExpertConfig = Field(
        default=ExpertConfig(), description="the scripted demonstrator's skill; default: the perfect expert"
    )
    task_config: dict[str, Any] = Field(
        default_factory=dict, description="the task's settings (its config class's fields, e.g. injected failures)"
    )
    out: Path = Field(default=Path("runs/demos"), description="the episode store the demonstrations are added to")
    workers: int = Field(2, ge=1, le=256, description="processes recording demonstrations at once")


@dataclass
class EpisodeRecord:
    """One episode as plain arrays: observations (T+1 steps), actions (T), per-step ground truth."""

    task: str
    seed: int
    instruction: str
    observations: dict[str, list[np.ndarray]] = field(default_factory=dict)
    actions: list[np.ndarray] = field(default_factory=list)
    phases: list[str] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    success: bool = False
    truncated: bool = False
    failures: tuple[dict[str, Any], ...] = ()

    @property
    def length(self) -> int:
        return len(self.actions)

    @property
    def outcome(self) -> str:
        return "success" if self.success else ("truncated" if self.truncated else "failure")

    def to_episode_data(self, robot: str = "sim0") -> EpisodeData:
        """The episode as the store takes it: one row per action, with the observation that preceded it."""
        phases = tuple(TASKS.get(self.task).load().PHASES)  # the class is imported already: cheap
        length = len(self.actions)
        steps = {f"obs.{k}": np.stack(v[:length]) for k, v in self.observations.items() if k != "frames"}
        steps["action"] = np.stack(self.actions)
        steps["phase"] = np.array([phases.index(p) for p in self.phases[:length]], dtype=np.int8)
        steps["progress"] = np.asarray(self.progress[:length], dtype=np.float32)
        env_cls = TASKS.get(self.task).load()
        steps["sim_time"] = np.arange(length) / float(getattr(env_cls, "CONTROL_HZ", 20))
        return EpisodeData(
            task=self.task,
            steps=steps,
            robot=robot,
            instruction=self.instruction,
            outcome=self.outcome,
            actor="scripted",
            phases=phases,
            info={"seed": self.seed, "failures": list(self.failures), "final_progress": self.progress[-1]},
        )


def expert_episodes(
    task: str,
    seeds: list[int],
    expert: ExpertConfig | None = None,
    task_config: Any = None,
    render_size: int | None = None,
) -> Iterator[EpisodeRecord]:
    """Yield one recorded expert episode per seed (``render_size`` adds ``frames`` from the front camera)."""
    name = resolve_task_name(task)
    env = make_task(name, load_task_config(name, task_config), render_mode="rgb_array" if render_size else None)
    if render_size:
        env.unwrapped.render_size = render_size
    try:
        for seed in seeds:
            obs, info = env.reset(seed=seed)
            policy = make_expert(name, env, expert, seed=seed)
            record = EpisodeRecord(name, seed, info["instruction"])
            _append_obs(record, obs, env if render_size else None)
            record.phases.append(info["phase"])
            record.progress.append(info["progress"])
            while True:
                action = policy()
                obs, _, terminated, truncated, info = env.step(action)
                record.actions.append(np.asarray(action, dtype=np.float32))
                _append_obs(record, obs, env if render_size else None)
                record.phases.append(info["phase"])
                record.progress.append(info["progress"])
                if terminated or truncated:
                    break
            record.success = bool(info["is_success"])
            record.truncated = bool(truncated and not terminated)
            record.failures = tuple(info["failures"])
            yield record
    finally:
        env.close()


def _append_obs(record: EpisodeRecord, obs: dict[str, np.ndarray], env: Any) -> None:
    for key, value in obs.items():
        record.observations.setdefault(key, []).append(value)
    if env is not None:
        record.observations.setdefault("frames", []).append(env.render())


def _collect_worker(client: RecorderClient, config: CollectConfig, seeds: list[int], robot: str) -> None:
    for record in expert_episodes(config.task, seeds, config.expert, config.task_config or None):
        client.record_episode(record.to_episode_data(robot))


def collect_demos(
    config: CollectConfig, on_progress: Callable[[int, int], None] | None = None
) -> tuple[list[int], float]:
    """Record scripted demos into the store at ``config.out`` with ``config.workers`` processes.

    Returns the ids of the episodes added and the seconds it took. ``on_progress(done, successes)`` is called as
    episodes commit.
    """
    start = time.perf_counter()
    seeds = list(range(config.seed, config.seed + config.episodes))
    ctx = mp.get_context("spawn")
    with EpisodeStore(config.out, mode="a") as store:
        recorder = Recorder(store, context=ctx, batch_episodes=8, flush_interval=0.25, seed_order=seeds)
        workers = [
            ctx.Process(
                target=_collect_worker,
                args=(recorder.client(f"collect{w}"), config, seeds[w :: config.workers], f"sim{w}"),
                daemon=True,
            )
            for w in range(min(config.workers, len(seeds)))
        ]
        for process in workers:
            process.start()
        reported = 0
        while reported < len(seeds):
            recorder.pump(timeout=0.1)
            if not any(p.is_alive() for p in workers) and recorder.pump(timeout=0.2) == 0:
                recorder.release_held()  # what the workers finished is kept, even when one of them died
                failed = [p.exitcode for p in workers if p.exitcode]
                if len(recorder.stats.committed_ids) < len(seeds):
                    raise RuntimeError(f"collect worker(s) exited with codes {failed} before finishing")
            ids = recorder.stats.committed_ids
            if len(ids) > reported and on_progress is not None:
                successes = sum(r.outcome == "success" for r in store.episodes() if r.id in set(ids))
                on_progress(len(ids), successes)
            reported = len(ids)
        for process in workers:
            process.join(timeout=10)
        return list(recorder.stats.committed_ids), time.perf_counter() - start


def summarize(store_path: str | Path, episode_ids: list[int], seconds: float) -> dict[str, Any]:
    wanted = set(episode_ids)
    with EpisodeStore(store_path) as store:
        rows = [r for r in store.episodes() if r.id in wanted]
    lengths = np.array([r.length for r in rows]) if rows else np.zeros(0)
    steps = int(lengths.sum())
    return {
        "store": str(store_path),
        "task": rows[0].task if rows else "",
        "episodes": len(rows),
        "success_rate": float(np.mean([r.outcome == "success" for r in rows])) if rows else 0.0,
        "mean_length": float(lengths.mean()) if rows else 0.0,
        "steps": steps,
        "steps_per_s": steps / seconds if seconds > 0 else 0.0,
        "failures_injected": sum(len(r.info.get("failures", [])) for r in rows),
        "instructions": sorted({r.instruction for r in rows}),
    }
