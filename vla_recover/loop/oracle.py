"""DAgger with the scripted expert as its oracle (Ross et al. 2011): the upper bound of per-state correction.

The current policy runs the round's seeds exactly as evaluation runs it (the same execution rules, the task's
injected failures included). At every chunk boundary the oracle saves the simulator's exact state, lets a fresh
perfect expert act for one chunk from there, records that branch and restores the state, so the policy's episode
goes on as if nothing happened. A branch is the expert's own chunk from a state the policy visited: a chunked policy
learns a coherent plan from it, where the expert's label of each visited state alone would string together
reactions to actions the policy took. The branches (short episodes, actor ``scripted``) are aggregated into the
training set. No human time is charged: the figure says whether a method is limited by its data or by the recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.data import EpisodeData, EpisodeStore
from vla_recover.envs import make_expert, resolve_task_name
from vla_recover.envs.expert import ExpertConfig
from vla_recover.rollout import EpisodeRecord

__all__ = ["oracle_round"]


class _Brancher:
    """Watches one policy episode and records the expert's chunk from every ``stride``-th state it visits."""

    def __init__(self, task: str, seed: int, expert: ExpertConfig, stride: int, horizon: int) -> None:
        self.task, self.seed, self.expert_config = task, seed, expert
        self.stride, self.horizon = stride, horizon
        self.step = 0
        self.branches: list[EpisodeRecord] = []
        self.gaps: list[float] = []  # how far the policy's action was from the expert's, motion channels

    def started(self, env: Any, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.obs, self.info, self.instruction = obs, info, info["instruction"]

    def acting(self, env: Any, action: np.ndarray) -> None:
        if self.step % self.stride == 0:  # the env is still in the state the policy acts from
            self._branch(env, action)
        self.step += 1

    def stepped(self, obs: dict[str, np.ndarray], info: dict[str, Any], terminated: bool, truncated: bool) -> None:
        self.obs, self.info = obs, info  # the episode's outcome is evaluation's

    def _branch(self, env: Any, action: np.ndarray) -> None:
        sim = env.unwrapped
        saved = sim.get_state()
        expert = make_expert(self.task, env, self.expert_config, seed=self.seed)
        record, info = EpisodeRecord(self.task, self.seed, self.instruction), self.info
        _observe(record, self.obs, info)
        for _ in range(self.horizon):
            label = np.asarray(expert(), dtype=np.float32)
            if not record.actions:
                self.gaps.append(float(np.linalg.norm(label[:-1] - np.asarray(action)[:-1])))
            obs, _, terminated, truncated, info = env.step(label)
            record.actions.append(label)
            _observe(record, obs, info)
            if terminated or truncated:
                break
        record.success = bool(info["is_success"])
        record.truncated = not record.success  # cut short after a chunk: not a failure
        record.failures = tuple(info.get("failures", ()))
        sim.set_state(saved)
        self.branches.append(record)

    def episodes(self, tags: dict[str, Any]) -> list[EpisodeData]:
        episodes = []
        for at, record in enumerate(self.branches):
            episode = record.to_episode_data("oracle")
            episode.info.update(tags, oracle_branch_step=at * self.stride)
            episodes.append(episode)
        return episodes


def _observe(record: EpisodeRecord, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None:
    for key, value in obs.items():
        record.observations.setdefault(key, []).append(value)
    record.phases.append(info["phase"])
    record.progress.append(info["progress"])


def oracle_round(
    policy_dir: Path,
    task: str,
    task_config: dict[str, Any],
    seeds: list[int],
    expert: ExpertConfig,
    store_path: Path,
    batch: int,
    action_tolerance: float,
    tags: dict[str, Any],
    device: str = "cpu",
) -> dict[str, Any]:
    """Roll the policy out on ``seeds`` and store the expert's branches from its chunk boundaries (tagged with
    ``tags``); return their ids, counts and the policy's outcomes."""
    from vla_recover.evaluate import evaluate_policy
    from vla_recover.policies.common.checkpoint import load_policy

    name = resolve_task_name(task)
    policy, embedder, _ = load_policy(policy_dir, device)
    stride, horizon = policy.config.action_exec, policy.config.action_horizon
    branchers: list[_Brancher] = []

    def observe(seed: int) -> _Brancher:
        branchers.append(_Brancher(name, seed, expert, stride, horizon))
        return branchers[-1]

    result = evaluate_policy(
        policy, embedder, name, seeds, batch, task_config, action_tolerance=action_tolerance, observe=observe
    )
    episodes = [episode for brancher in branchers for episode in brancher.episodes(tags)]
    with EpisodeStore(store_path, mode="a") as store:
        ids = store.append_episodes(episodes)
    gaps = [gap for brancher in branchers for gap in brancher.gaps]
    return {
        "episode_ids": sorted(ids),
        "policy_episodes": len(seeds),
        "policy_successes": result["successes"],
        "policy_outcomes": result["outcomes"],
        "branches": len(ids),
        "steps": sum(episode.length for episode in episodes),
        "mean_label_gap": round(float(np.mean(gaps)), 4) if gaps else None,
    }
