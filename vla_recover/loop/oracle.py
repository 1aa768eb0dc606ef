"""DAgger with the scripted expert as its oracle (Ross et al. 2011): the upper bound of per-state correction.

The current policy runs the round's seeds exactly as evaluation runs it (the same execution rules, the task's
injected failures included), and the expert, bound to the same simulator, labels every state the policy visits
with the action it would take there. The labelled episodes (observations the policy met, the expert's actions) are
aggregated into the training set. No human time is charged: the figure says whether a method is limited by its
data or by the training recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.data import EpisodeStore
from vla_recover.envs import make_expert, resolve_task_name
from vla_recover.envs.expert import ExpertConfig
from vla_recover.rollout import EpisodeRecord

__all__ = ["oracle_round"]


class _Labeller:
    """One episode of the policy, recorded with the expert's label of each state in place of the executed action."""

    def __init__(self, task: str, seed: int, expert: ExpertConfig) -> None:
        self.task, self.seed, self.expert_config = task, seed, expert
        self.record = EpisodeRecord(task, seed, "")
        self.gaps: list[float] = []  # how far the executed action was from the label, motion channels

    def started(self, env: Any, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        self.expert = make_expert(self.task, env, self.expert_config, seed=self.seed)
        self.record.instruction = info["instruction"]
        self._observe(obs, info)

    def acting(self, env: Any, action: np.ndarray) -> None:
        label = np.asarray(self.expert(), dtype=np.float32)  # the state before the policy's action is executed
        self.record.actions.append(label)
        self.gaps.append(float(np.linalg.norm(label[:-1] - action[:-1])))

    def stepped(self, obs: dict[str, np.ndarray], info: dict[str, Any], terminated: bool, truncated: bool) -> None:
        self._observe(obs, info)
        if terminated or truncated:
            self.record.success = bool(info["is_success"])
            self.record.truncated = bool(truncated and not terminated)
            self.record.failures = tuple(info.get("failures", ()))

    def _observe(self, obs: dict[str, np.ndarray], info: dict[str, Any]) -> None:
        for key, value in obs.items():
            self.record.observations.setdefault(key, []).append(value)
        self.record.phases.append(info["phase"])
        self.record.progress.append(info["progress"])


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
) -> dict[str, Any]:
    """Roll the policy out on ``seeds``, store each episode with the expert's labels (tagged with ``tags``), and
    return the ids and counts. The stored outcome is the policy's."""
    from vla_recover.evaluate import evaluate_policy
    from vla_recover.policies.common.checkpoint import load_policy

    name = resolve_task_name(task)
    policy, embedder, _ = load_policy(policy_dir)
    labellers: list[_Labeller] = []

    def observe(seed: int) -> _Labeller:
        labellers.append(_Labeller(name, seed, expert))
        return labellers[-1]

    result = evaluate_policy(
        policy, embedder, name, seeds, batch, task_config, action_tolerance=action_tolerance, observe=observe
    )
    episodes = []
    for labeller in labellers:
        episode = labeller.record.to_episode_data("oracle")
        episode.info.update(tags, oracle_labelled=True)
        episodes.append(episode)
    with EpisodeStore(store_path, mode="a") as store:
        ids = store.append_episodes(episodes)
    gaps = [gap for labeller in labellers for gap in labeller.gaps]
    return {
        "episode_ids": sorted(ids),
        "episodes": len(ids),
        "successes": result["successes"],
        "steps": len(gaps),
        "mean_label_gap": round(float(np.mean(gaps)), 4) if gaps else None,
    }
