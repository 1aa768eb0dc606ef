"""The ``more_demos`` baseline's purchase: demonstrations by the teleoperator's demonstrator until a budget of human
time is spent, each charged its episode (sim clock) and a reset, as a fleet round charges its operators' presence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from vla_recover.data import EpisodeStore
from vla_recover.loop.config import LoopConfig

__all__ = ["buy_demonstrations"]


def buy_demonstrations(
    config: LoopConfig,
    store_path: Path,
    seed: int,
    human_s: float,
    conditions: Literal["nominal", "task"],
    on_progress: Callable[[int, str], None] | None = None,
) -> dict[str, Any]:
    """Record demonstrations in seed order from ``seed`` into the store until ``human_s`` is spent; return the ids
    of those bought, their count, steps and successes, and the seconds charged. ``conditions``: recorded without
    the task's injected failures (nominal) or under them (task)."""
    from vla_recover.envs import control_period
    from vla_recover.rollout import CollectConfig, collect_demos

    budget = config.more_demos
    period = control_period(config.task, config.task_config)
    kept: list[int] = []
    spent, successes, steps = 0.0, 0, 0
    while spent < human_s:
        collect = CollectConfig(
            task=config.task, episodes=budget.batch, seed=seed, expert=budget.expert,
            task_config=config.demo_task_config(conditions), out=store_path, workers=config.demos.workers,
        )  # fmt: skip
        ids, _ = collect_demos(collect)
        seed += budget.batch
        with EpisodeStore(store_path) as store:
            rows = sorted((r for r in store.episodes() if r.id in set(ids)), key=lambda r: r.info["seed"])
        for row in rows:
            if spent >= human_s:
                break  # recorded past the budget: kept in the store, never trained on
            spent += row.length * period + budget.reset_s
            steps += row.length
            successes += row.outcome == "success"
            kept.append(row.id)
        if on_progress is not None:
            on_progress(len(kept), f"{spent:.0f} of {human_s:.0f} human-s")
    return {
        "episode_ids": kept, "episodes": len(kept), "steps": steps, "successes": successes,
        "human_s": round(spent, 1),
    }  # fmt: skip
