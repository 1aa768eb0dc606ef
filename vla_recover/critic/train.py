"""Train the progress critic on stored episodes: pairwise ranking, regression to normalised time-to-go, failures.

The ranking and the regression come from successful episodes only, where "later" means "further along": the ranking
loss says which of two frames of one episode comes later (as VLAC's pairwise critic does); the regression pulls p
towards 1 - (T-1-t) / H, the steps still to go in units of the longest successful episode H (``regress_target:
time`` pulls it towards t / (T-1) instead). Time-to-go gives a state the same target wherever it occurs: a cube
dropped halfway through a clumsy demo is as far from done as one never picked up, where normalised time would call
it further along. Failed and truncated episodes rank below the last step of a success (``failure_weight``): a
state the robot reached without succeeding is not done, however much it looks like the end of a demonstration
(an arm over the bin with the cube still on the table). Swapped pairs rank a success's later robot state joined to
its earlier object state below the real later step (``swap_weight``). Every training forward sees the normalised
state with Gaussian noise (``state_noise``), so the critic does not fit the demonstrations' narrow band of states
so closely that a policy's state just beside it reads as another stage of the task. Episodes are drawn uniformly
over episode-length bins, so long episodes do not dominate and the critic has no reason to encode how long an
episode runs. Held-out episodes (a fixed fraction, by seed) are for evaluation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field
from torch.nn import functional as F

from vla_recover.config import FrozenConfig
from vla_recover.critic.data import CriticEpisode, length_bin_edges, load_episodes, non_finite_step, spearman
from vla_recover.critic.model import CriticConfig, ProgressCritic, ProgressNet
from vla_recover.data import EpisodeStore
from vla_recover.devices import DEVICE_HELP, DeviceName, resolve_device
from vla_recover.policies.common.encoders import SentenceEmbedder

__all__ = [
    "CriticTrainConfig",
    "evaluate_critic",
    "length_bins",
    "ranking_loss",
    "robot_state_size",
    "split_episodes",
    "train_critic",
]


class CriticTrainConfig(FrozenConfig):
    critic: CriticConfig = Field(default=CriticConfig(), description="the critic's inputs and network")
    device: DeviceName = Field(default="auto", description=f"where the critic trains: {DEVICE_HELP}")
    task: str | None = Field(default=None, description="train on this task's episodes only")
    steps: int = Field(default=3000, ge=1, le=10_000_000, description="optimiser steps")
    batch_size: int = Field(
        default=256,
        ge=2,
        le=65536,
        description="steps per batch (half as many ranked pairs; a quarter as many failure and swapped pairs)",
    )
    lr: float = Field(default=1e-3, gt=0.0, description="AdamW learning rate, annealed to 0 on a cosine schedule")
    weight_decay: float = Field(default=1e-4, ge=0.0, description="AdamW weight decay")
    rank_weight: float = Field(
        default=1.0, ge=0.0, description="weight of the pairwise ranking loss on steps of successful episodes"
    )
    rank_temperature: float = Field(default=0.1, gt=0.0, description="progress difference that counts as a clear order")
    regress_weight: float = Field(
        default=1.0, ge=0.0, description="weight of the regression of progress to regress_target"
    )
    regress_target: Literal["time", "time_to_go"] = Field(
        default="time_to_go",
        description="time: t / (T-1) of the step's episode; time_to_go: 1 - (T-1-t) / H, H the longest successful "
        "training episode: a state as far from success gets the same target in a clumsy episode as in a clean one",
    )
    done_weight: float = Field(
        default=0.5, ge=0.0, description="weight of the done head's binary cross-entropy (with critic.done_head)"
    )
    failure_weight: float = Field(
        default=1.0,
        ge=0.0,
        description="rank steps of failed or truncated episodes below the last step of a successful one: "
        "what a robot did without succeeding is not done, whatever it looks like",
    )
    swap_weight: float = Field(
        default=0.5,
        ge=0.0,
        description="rank a success's later step above the robot state of that step with the objects where they "
        "were at an earlier step: an arm over the goal without the object is not done (state input only)",
    )
    robot_state_dims: int | None = Field(
        default=None,
        ge=1,
        description="the leading state entries that describe the robot, the rest the objects; None: the task's "
        "(a registered sim task), else swapped pairs are off",
    )
    swap_min_move: float = Field(default=0.01, ge=0.0, description="swapped pairs: the objects moved this far")
    state_noise: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="std of Gaussian noise on the normalised state in training: states near the demonstrations' get a "
        "progress near theirs (a cube held at a grip no demonstration used is not read as back on the table)",
    )
    min_gap: int = Field(default=1, ge=1, description="ranked pairs are at least this many steps apart")
    length_bins: int = Field(
        default=4,
        ge=1,
        le=100,
        description="episode-length quantile bins; episodes are drawn uniformly over bins, so long ones do not "
        "dominate",
    )
    held_out_fraction: float = Field(
        default=0.2, ge=0.0, lt=1.0, description="share of the episodes held out (by seed) for evaluation"
    )
    seed: int = Field(default=0, ge=0, description="seed of the held-out split, the pair sampling and torch")


def ranking_loss(early: torch.Tensor, late: torch.Tensor, temperature: float) -> torch.Tensor:
    """-log σ((p_late − p_early) / τ), mean over pairs.

    On progress rather than logits: the margin it asks for is bounded, so the ranking orders steps without pushing
    the curve to a 0/1 step, and the regression to normalised time sets its shape.
    """
    return F.softplus((early - late) / temperature).mean()


def split_episodes(episodes: list[CriticEpisode], fraction: float, seed: int) -> tuple[list[Any], list[Any]]:
    """(train, held out): a seeded, fixed share of the episodes held out."""
    rng = np.random.default_rng(seed)
    held = set(rng.permutation(len(episodes))[: round(fraction * len(episodes))].tolist())
    return [e for i, e in enumerate(episodes) if i not in held], [e for i, e in enumerate(episodes) if i in held]


def length_bins(lengths: np.ndarray, bins: int) -> np.ndarray:
    """Each episode's length bin (quantile edges over these lengths)."""
    return np.searchsorted(length_bin_edges(lengths, bins), lengths, side="right")


class _PairSampler:
    """Batches of (earlier, later) step pairs from successful episodes, uniform over length bins."""

    def __init__(self, episodes: list[CriticEpisode], config: CriticTrainConfig) -> None:
        self.episodes = [e for e in episodes if e.success and e.steps >= 2]
        if not self.episodes:
            raise ValueError("episodes: the critic trains on successful episodes of 2+ steps; there are none")
        self.rng = np.random.default_rng(config.seed)
        self.min_gap = config.min_gap
        bins = length_bins(np.array([e.steps for e in self.episodes]), config.length_bins)
        self.by_bin = [np.flatnonzero(bins == b) for b in np.unique(bins)]
        self.longest = max(e.steps for e in self.episodes) - 1
        self.failed = [e for e in episodes if e.outcome in ("failure", "truncated") and e.steps >= 1]

    def targets(self, picks: list[tuple[CriticEpisode, int]], kind: str) -> torch.Tensor:
        """The regression target of each picked step (``CriticTrainConfig.regress_target``)."""
        if kind == "time":
            curves = {id(e): e.normalised_time() for e, _ in picks}  # once per episode, not per picked step
            values = [curves[id(e)][t] for e, t in picks]
        else:
            values = [1.0 - (e.steps - 1 - t) / max(self.longest, 1) for e, t in picks]
        return torch.as_tensor(values, dtype=torch.float32)

    def failure_pairs(self, size: int) -> list[tuple[tuple[CriticEpisode, int], tuple[CriticEpisode, int]]]:
        """(a step of a failed episode, the last step of a successful one) pairs; none without failed episodes."""
        if not self.failed:
            return []
        pairs = []
        for _ in range(size):
            failed = self.failed[self.rng.integers(len(self.failed))]
            success = self.episodes[self.rng.integers(len(self.episodes))]
            pairs.append(((failed, int(self.rng.integers(failed.steps))), (success, success.steps - 1)))
        return pairs

    def swap_pairs(
        self, size: int, key: str, robot_dims: int, min_move: float
    ) -> tuple[np.ndarray, list[tuple[CriticEpisode, int]]]:
        """(hybrid states, the later steps they were made from): the robot of a success's later step with the objects
        where they were at an earlier step, over pairs in which the objects moved at least ``min_move``."""
        hybrids, lates = [], []
        for episode, early, late in self.sample(size * 4):  # pairs where only the robot moved are dropped
            state = episode.inputs[key]
            if np.abs(state[late, robot_dims:] - state[early, robot_dims:]).max() >= min_move:
                hybrids.append(np.concatenate([state[late, :robot_dims], state[early, robot_dims:]]))
                lates.append((episode, late))
            if len(lates) == size:
                break
        return np.stack(hybrids) if hybrids else np.empty((0, 0), np.float32), lates

    def sample(self, size: int) -> list[tuple[CriticEpisode, int, int]]:
        pairs = []
        for _ in range(size):
            members = self.by_bin[self.rng.integers(len(self.by_bin))]
            episode = self.episodes[members[self.rng.integers(members.size)]]
            gap = min(self.min_gap, episode.steps - 1)
            early = int(self.rng.integers(0, episode.steps - gap))
            late = int(self.rng.integers(early + gap, episode.steps))
            pairs.append((episode, early, late))
        return pairs


def _batch(critic: ProgressCritic, picks: list[tuple[CriticEpisode, int]]) -> dict[str, torch.Tensor]:
    steps = {key: np.stack([episode.inputs[key][t] for episode, t in picks]) for key in critic.input_keys}
    batch = critic.tensors(steps, picks[0][0].instruction, check_finite=False)  # checked once, before training
    if critic.config.use_language:  # each step with its own episode's instruction
        embeddings = critic.embedder.embed([episode.instruction for episode, _ in picks])
        batch["instruction_embedding"] = torch.as_tensor(embeddings, dtype=torch.float32, device=critic.device)
    return batch


def _robot_state_dims(config: CriticTrainConfig, episodes: list[CriticEpisode]) -> int | None:
    """Where the robot's part of the state ends: the config's, else the tasks' own (None where unknown: a real
    robot's store, or a critic that sees a camera: its image would still show the objects where they were)."""
    key = config.critic.state_key
    if not key or config.critic.image_key:
        return None
    if config.robot_state_dims is not None:
        width = episodes[0].inputs[key].shape[-1]
        if config.robot_state_dims >= width:
            raise ValueError(f"robot_state_dims: got {config.robot_state_dims}; {key} has only {width} entries")
        return config.robot_state_dims
    return robot_state_size({e.task for e in episodes})


def robot_state_size(tasks: set[str]) -> int | None:
    """How many leading state entries describe the robot in every one of these sim tasks; None when a task is not
    simulated here or they differ."""
    from vla_recover.envs import make_task

    sizes = set()
    for task in sorted(tasks):
        try:
            env = make_task(task)
        except (KeyError, ValueError, ImportError):  # not a registered sim task, or its extra is not installed
            return None
        sizes.add(int(env.unwrapped.robot_state_size))
        env.close()
    return sizes.pop() if len(sizes) == 1 else None


def _swap_loss(
    critic: ProgressCritic, sampler: _PairSampler, config: CriticTrainConfig, robot_dims: int
) -> torch.Tensor:
    """Ranking of swapped states below the later steps they came from (``swap_weight``)."""
    key, noise = config.critic.state_key, config.state_noise
    assert key is not None
    hybrids, lates = sampler.swap_pairs(config.batch_size // 4, key, robot_dims, config.swap_min_move)
    if not lates:
        return torch.zeros(())
    late_batch = _batch(critic, lates)
    swapped = {**late_batch, key: torch.as_tensor(hybrids, dtype=torch.float32, device=critic.device)}
    late_p, swapped_p = torch.sigmoid(critic.net(late_batch, noise)[0]), torch.sigmoid(critic.net(swapped, noise)[0])
    return ranking_loss(swapped_p, late_p, config.rank_temperature)


def build_critic(episodes: list[CriticEpisode], config: CriticConfig) -> ProgressCritic:
    keys = tuple(k for k in (config.state_key, config.image_key) if k)
    shapes = {key: tuple(episodes[0].inputs[key].shape[1:]) for key in keys}
    net = ProgressNet(config, shapes)
    if config.state_key:
        net.normalizer.fit(config.state_key, np.concatenate([e.inputs[config.state_key] for e in episodes]))
    embedder = SentenceEmbedder()
    if config.use_language:
        embedder.embed(sorted({e.instruction for e in episodes}))
    return ProgressCritic(net, embedder, shapes)


def train_critic(
    store_path: str | Path | list[str | Path],
    out: str | Path,
    config: CriticTrainConfig | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Train on ``store_path`` (or several stores), save the critic in ``out`` with metrics.json and plots; returns
    the metrics. Episode ids in the metrics are per store, in the order given."""
    config = config or CriticTrainConfig()
    device = resolve_device(config.device)  # refused before any data is read
    torch.manual_seed(config.seed)
    keys = tuple(k for k in (config.critic.state_key, config.critic.image_key) if k)
    episodes = []
    for path in store_path if isinstance(store_path, list) else [store_path]:
        with EpisodeStore(path) as store:
            episodes += load_episodes(store, keys, config.task)
    if not episodes:
        raise ValueError(f"{store_path}: no episodes" + (f" of task {config.task!r}" if config.task else ""))
    for episode in episodes:  # NaN inputs are an error before any training, naming the episode
        for key in keys:
            step = non_finite_step(episode.inputs[key])
            if step is not None:
                raise ValueError(f"episode {episode.id}: {key} is NaN or Inf at step {step}")
    train, held_out = split_episodes(episodes, config.held_out_fraction, config.seed)
    critic = build_critic(train, config.critic).to(device)
    sampler = _PairSampler(train, config)
    robot_dims = _robot_state_dims(config, train) if config.swap_weight > 0 else None
    optimizer = torch.optim.AdamW(critic.net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, config.steps)
    started, losses = time.perf_counter(), []
    critic.net.train()
    for step in range(config.steps):
        pairs = sampler.sample(config.batch_size // 2)
        picks = [(e, early) for e, early, _ in pairs] + [(e, late) for e, _, late in pairs]
        logits, done = critic.net(_batch(critic, picks), config.state_noise)
        progress = torch.sigmoid(logits)
        early, late = progress.chunk(2)
        rank = ranking_loss(early, late, config.rank_temperature)
        regress = F.mse_loss(progress, sampler.targets(picks, config.regress_target).to(device))
        loss = config.rank_weight * rank + config.regress_weight * regress
        if config.failure_weight > 0:
            negatives = sampler.failure_pairs(config.batch_size // 4)
            if negatives:
                ends = [failed for failed, _ in negatives] + [done for _, done in negatives]
                failed_logits, done_logits = critic.net(_batch(critic, ends), config.state_noise)[0].chunk(2)
                below = ranking_loss(torch.sigmoid(failed_logits), torch.sigmoid(done_logits), config.rank_temperature)
                loss = loss + config.failure_weight * below
        if robot_dims is not None:
            loss = loss + config.swap_weight * _swap_loss(critic, sampler, config, robot_dims)
        if done is not None:
            ended = [t >= e.steps - config.critic.done_steps for e, t in picks]
            is_done = torch.as_tensor(ended, dtype=torch.float32, device=device)
            loss = loss + config.done_weight * F.binary_cross_entropy_with_logits(done, is_done)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step + 1, losses[-1])
    critic.net.eval()
    metrics = {
        "episodes": {"train": len(train), "held_out": len(held_out)},
        "train_s": round(time.perf_counter() - started, 1),
        "final_loss": round(float(np.mean(losses[-50:])), 4),
        "held_out": evaluate_critic(critic, held_out) if held_out else {},
        "swapped_pairs": {"robot_state_dims": robot_dims} if robot_dims else "off",
    }
    out = Path(out)
    critic.save(out, train_config=config.model_dump(mode="json"), held_out_ids=[e.id for e in held_out])
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    from vla_recover.critic.plots import plot_held_out, plot_loss

    plot_loss(losses, out / "loss.png")
    if held_out:
        plot_held_out(critic, held_out, out / "held_out_progress.png")
    return metrics


def evaluate_critic(critic: ProgressCritic, episodes: list[CriticEpisode]) -> dict[str, Any]:
    """VOC (Spearman of p vs time on successes, mean over episodes) and Pearson of p vs ground-truth progress."""
    voc, predicted, truth = [], [], []
    for episode in episodes:
        curve = critic.predict(episode.inputs, episode.instruction, where=f"episode {episode.id}")
        if episode.success and episode.steps >= 3:
            value = spearman(curve, np.arange(episode.steps))
            if np.isfinite(value):
                voc.append(value)
        if episode.true_progress is not None:
            predicted.append(curve)
            truth.append(episode.true_progress)
    result: dict[str, Any] = {"voc": round(float(np.mean(voc)), 4) if voc else None, "voc_episodes": len(voc)}
    if predicted:
        p, g = np.concatenate(predicted), np.concatenate(truth)
        result["pearson_vs_true_progress"] = round(float(np.corrcoef(p, g)[0, 1]), 4) if g.std() > 0 else None
    return result
