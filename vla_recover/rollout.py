"""Run scripted-expert episodes: the demos that seed the loop, and what `vla-recover render` shows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.envs import load_task_config, make_expert, make_task, resolve_task_name
from vla_recover.envs.expert import ExpertConfig

__all__ = ["CollectConfig", "EpisodeRecord", "collect_demos", "expert_episodes", "summarize"]


class CollectConfig(FrozenConfig):
    """``vla-recover collect``: scripted demonstrations of one task."""

    task: str = "PickPlaceBin"
    episodes: int = Field(50, ge=1, le=1_000_000)
    seed: int = Field(0, ge=0)
    expert: ExpertConfig = ExpertConfig()
    task_config: dict[str, Any] = Field(default_factory=dict)


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

    def arrays(self) -> dict[str, np.ndarray]:
        out = {f"obs.{k}": np.stack(v) for k, v in self.observations.items()}
        out["action"] = np.stack(self.actions) if self.actions else np.zeros((0, 0), np.float32)
        out["progress"] = np.asarray(self.progress, dtype=np.float32)
        out["phase"] = np.asarray(self.phases)
        return out


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


def collect_demos(
    config: CollectConfig, on_episode: Callable[[EpisodeRecord], None] | None = None
) -> list[EpisodeRecord]:
    seeds = list(range(config.seed, config.seed + config.episodes))
    records = []
    for record in expert_episodes(config.task, seeds, config.expert, config.task_config or None):
        records.append(record)
        if on_episode is not None:
            on_episode(record)
    return records


def summarize(records: list[EpisodeRecord], seconds: float) -> dict[str, Any]:
    lengths = np.array([r.length for r in records])
    steps = int(lengths.sum())
    return {
        "task": records[0].task if records else "",
        "episodes": len(records),
        "success_rate": float(np.mean([r.success for r in records])) if records else 0.0,
        "mean_length": float(lengths.mean()) if records else 0.0,
        "steps": steps,
        "steps_per_s": steps / seconds if seconds > 0 else 0.0,
        "failures_injected": sum(len(r.failures) for r in records),
        "instructions": sorted({r.instruction for r in records}),
    }
