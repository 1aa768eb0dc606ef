"""Latent dynamics for ReGuide: the normalised state one executed chunk ahead.

The latent of an observation is the policy's normalised state vector of the latest frame, z_t (D,). The model
predicts z_{t+k} from z_t and the normalised actions a_{t:t+k} (k = the policy's ``action_exec``, the part of a chunk
that is actually executed): ẑ = z_t + MLP([z_t, a_{t:t+k}]).

Choices where the paper leaves things open (ALGORITHMS.md, "ReGuide"): the paper's predictor is a small transformer
over frozen visual features; our policies are state-based, so an MLP on the residual is enough and trains in seconds
on CPU. Training windows never cross an episode end, and validation holds out whole episodes, so a validation MSE
measures generalisation to unseen trajectories rather than to neighbouring frames of the same one.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field
from torch import nn

from vla_recover.config import FrozenConfig
from vla_recover.data.store import EpisodeStore
from vla_recover.policies.common.base import Policy
from vla_recover.policies.common.normalizer import Normalizer

__all__ = ["DynamicsConfig", "LatentDynamics", "policy_state_key", "train_dynamics"]


class DynamicsConfig(FrozenConfig):
    """How the latent dynamics MLP is shaped and trained."""

    hidden: tuple[int, ...] = Field(default=(256, 256), min_length=1, description="hidden layer widths of the MLP")
    steps: int = Field(default=2000, ge=1, le=1_000_000, description="optimiser steps")
    batch_size: int = Field(default=256, ge=1, le=65536, description="training windows per optimiser step")
    lr: float = Field(default=1e-3, gt=0.0, le=1.0, description="AdamW learning rate, annealed on a cosine schedule")
    val_fraction: float = Field(default=0.1, ge=0.0, lt=1.0, description="fraction of episodes held out for validation")
    seed: int = Field(default=0, ge=0, description="seed of the validation split, the initialisation and the batches")


class LatentDynamics(nn.Module):
    """f(z_t (B, D), actions (B, k, A)) → ẑ_{t+k} (B, D), all in the policy's normalised spaces."""

    def __init__(self, latent_dim: int, action_dim: int, action_exec: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.latent_dim, self.action_dim, self.action_exec = latent_dim, action_dim, action_exec
        self.hidden = tuple(hidden)
        layers: list[nn.Module] = []
        width = latent_dim + action_dim * action_exec
        for size in hidden:
            layers += [nn.Linear(width, size), nn.SiLU()]
            width = size
        layers.append(nn.Linear(width, latent_dim))
        self.mlp = nn.Sequential(*layers)

    def forward(self, z: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        if actions.shape[1:] != (self.action_exec, self.action_dim):
            raise ValueError(
                f"actions: expected (B, {self.action_exec}, {self.action_dim}), got {tuple(actions.shape)}"
            )
        return z + self.mlp(torch.cat([z, actions.flatten(1)], dim=-1))


def policy_state_key(policy: Policy) -> str:
    """The state key whose normalised value is the latent; ReGuide needs a state-based policy."""
    key = policy.config.state_key
    if not key:
        raise ValueError(
            "policy.config.state_key: got None; ReGuide's latent is the normalised state, so it needs a policy "
            "conditioned on a state key (image-only policies are not supported)"
        )
    return key


def _windows(store: EpisodeStore, episode_ids: list[int], k: int) -> np.ndarray:
    """Global step indices t with t + k still inside t's episode (so z_{t+k} exists)."""
    rows = {row.id: row for row in store.episodes()}
    missing = sorted(set(episode_ids) - set(rows))
    if missing:
        raise ValueError(f"episode_ids: {missing} are not in {store.path}")
    parts = [np.arange(rows[i].start, rows[i].stop - k) for i in episode_ids if rows[i].length > k]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _mse(model: LatentDynamics, z: torch.Tensor, a: torch.Tensor, index: np.ndarray, k: int) -> float:
    if index.size == 0:
        return float("nan")
    t = torch.as_tensor(index)
    offsets = torch.arange(k)
    with torch.no_grad():
        predicted = model(z[t], a[t[:, None] + offsets])
        return float(((predicted - z[t + k]) ** 2).mean())


def train_dynamics(
    store: EpisodeStore,
    policy: Policy,
    config: DynamicsConfig | None = None,
    episode_ids: list[int] | None = None,
    normalizer: Normalizer | None = None,
) -> tuple[LatentDynamics, dict[str, float]]:
    """Fit f on every window of the given episodes (default: all, whatever their outcome).

    Latents and actions are normalised with ``normalizer`` (default: the policy's). Returns the model in eval mode
    and ``{"train_mse", "val_mse", "val_identity_mse", "windows"}``; ``val_identity_mse`` is the error of predicting
    no motion (ẑ = z_t), the baseline a useful model must beat. ``val_mse`` is NaN when there is one episode only.
    """
    config = config or DynamicsConfig()
    key = policy_state_key(policy)
    normalizer = normalizer or policy.normalizer
    k = policy.config.action_exec
    ids = list(episode_ids) if episode_ids is not None else [row.id for row in store.episodes()]
    rng = np.random.default_rng(config.seed)
    shuffled = rng.permutation(np.asarray(ids, dtype=np.int64)).tolist()
    n_val = 0
    if config.val_fraction > 0 and len(shuffled) > 1:  # at least one held-out episode, at least one to train on
        n_val = min(len(shuffled) - 1, max(1, round(config.val_fraction * len(shuffled))))
    train_index = _windows(store, sorted(shuffled[n_val:]), k)
    val_index = _windows(store, sorted(shuffled[:n_val]), k)
    if train_index.size == 0:
        raise ValueError(f"episode_ids: no training episode is longer than action_exec ({k}) steps")

    with torch.no_grad():
        z = normalizer.normalize(key, torch.as_tensor(store.read(key), dtype=torch.float32))
        a = normalizer.normalize("action", torch.as_tensor(store.read("action"), dtype=torch.float32))
    torch.manual_seed(config.seed)
    model = LatentDynamics(z.shape[1], a.shape[1], k, config.hidden)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=config.steps)
    generator = torch.Generator().manual_seed(config.seed)
    starts = torch.as_tensor(train_index)
    offsets = torch.arange(k)
    model.train()
    for _ in range(config.steps):
        t = starts[torch.randint(len(starts), (config.batch_size,), generator=generator)]
        loss = ((model(z[t], a[t[:, None] + offsets]) - z[t + k]) ** 2).mean()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
    model.eval()
    val_identity = float(((z[val_index + k] - z[val_index]) ** 2).mean()) if val_index.size else float("nan")
    metrics = {
        "train_mse": _mse(model, z, a, train_index, k),
        "val_mse": _mse(model, z, a, val_index, k),
        "val_identity_mse": val_identity,
        "windows": float(train_index.size + val_index.size),
    }
    return model, metrics
