"""ReGuide's phase-conditioned guidance: steer a drifted robot's next chunk back towards its phase's prototypes.

At sampling step i of n, for rows whose current latent is drifted but recoverable (lower < d ≤ upper of its phase),
the estimated clean chunk â0 (normalised) moves by −c·∇_{â0} L(â0), L = distance(f(z_now, â0[:, :k]), phase): the
soft-min distance of the latent the dynamics model predicts after the executed part of the chunk. Only the last
``guided_steps`` steps are guided (x̂0-space guidance, ALGORITHMS.md).

Choices where the paper leaves things open or where we differ:

- Latents are normalised with ReGuide's own copy of the normalisation statistics taken at build time, so a ReGuide
  stays valid for a policy retrained later with other statistics (``hook(..., policy_normalizer=...)`` maps its
  actions into ReGuide's space).
- ``scale`` defaults to 0.1 rather than the paper's c ≈ 0.01: the paper guides 10–30 of 100 DDPM steps, our
  policies sample in 4–10 steps, so each guided step carries several of the paper's steps' displacement.
- The paper's "predicted next latent is already back in distribution" gate is not applied: it would make the
  gate depend on the sampled chunk, so whether a row is guided could flip between sampling steps.
- The policies' samplers recompute the noise / velocity from â0 for the whole batch whenever a hook returns a term,
  which perturbs unguided rows at float rounding; :meth:`ReGuide.predict_chunk` therefore samples once without
  guidance and once with it (same seed) and takes the unguided rows from the first pass, so rows outside the band
  are bit-identical to the plain policy's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field
from safetensors.torch import load_file, save_file
from torch import nn

from vla_recover.config import FrozenConfig, read_saved_meta, write_saved_meta
from vla_recover.data.store import EpisodeStore
from vla_recover.policies.common.base import GuidanceHook, Policy
from vla_recover.policies.common.normalizer import Normalizer
from vla_recover.train.reguide.dynamics import DynamicsConfig, LatentDynamics, policy_state_key, train_dynamics
from vla_recover.train.reguide.phases import PhaseConfig, PhaseTargets, build_phase_targets

__all__ = ["REGUIDE_SCHEMA", "ReGuide", "ReGuideConfig", "build_reguide"]

REGUIDE_SCHEMA = 1
_CONFIG, _WEIGHTS = "reguide.json", "reguide.safetensors"


class ReGuideConfig(FrozenConfig):
    """Guidance strength and timing, plus how the phase targets and the dynamics model are built."""

    scale: float = Field(default=0.1, ge=0.0, le=100.0, description="c in â0 − c·∇L, per guided sampling step")
    guided_steps: int = Field(default=5, ge=1, le=1000, description="how many final sampling steps are guided")
    phases: PhaseConfig = Field(
        default=PhaseConfig(), description="how the phase prototypes and drift thresholds are built"
    )
    dynamics: DynamicsConfig = Field(
        default=DynamicsConfig(), description="how the latent dynamics model is shaped and trained"
    )


class ReGuide:
    """Latent dynamics + phase targets + the normalisation they were built in; independent of any one policy."""

    def __init__(
        self,
        dynamics: LatentDynamics,
        targets: PhaseTargets,
        normalizer: Normalizer,
        state_key: str,
        config: ReGuideConfig,
        metrics: dict[str, float] | None = None,
    ) -> None:
        self.dynamics, self.targets, self.normalizer = dynamics.eval(), targets, normalizer
        self.state_key, self.config = state_key, config
        self.metrics = dict(metrics or {})
        for p in self.dynamics.parameters():
            p.requires_grad_(False)  # guidance differentiates w.r.t. the actions only

    # -- gate and hook ----------------------------------------------------------------------------------------------
    def latent(self, states: torch.Tensor) -> torch.Tensor:
        """Raw states (B, D) of the latest observation → latents z (B, D)."""
        return self.normalizer.normalize(self.state_key, torch.as_tensor(states, dtype=torch.float32))

    def drift(self, z_now: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(phase (B,), distance (B,), active (B,) bool): active when lower < d ≤ upper of the row's phase."""
        phase, distance = self.targets.current_phase(z_now)
        active = (distance > self.targets.lower(phase)) & (distance <= self.targets.upper(phase))
        return phase, distance, active

    def loss(self, z_now: torch.Tensor, actions: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:
        """L (B,): distance of f(z_now, actions[:, :k]) to the phase; actions (B, H, A) in ReGuide's space."""
        k = self.dynamics.action_exec
        return self.targets.distance(self.dynamics(z_now, actions[:, :k]), phase)

    def hook(
        self,
        z_now: torch.Tensor,
        phase: torch.Tensor,
        active: torch.Tensor,
        n_steps: int,
        policy_normalizer: Normalizer | None = None,
    ) -> GuidanceHook | None:
        """The sampling hook for one batch, or None when no row is active.

        Returns −c·∇_{â0} L on active rows (exactly zero on the others) at steps i ≥ n_steps − guided_steps, None
        before. ``policy_normalizer``: the sampling policy's, when its statistics may differ from ReGuide's.
        """
        if not bool(active.any()):
            return None
        first = n_steps - self.config.guided_steps
        weight = active.to(torch.float32)[:, None, None]
        z_now, phase = z_now.detach(), phase.detach()

        def guide(index: int, noisy: torch.Tensor, clean: torch.Tensor) -> torch.Tensor | None:
            if index < first:
                return None
            with torch.enable_grad():
                actions = clean.detach().requires_grad_(True)
                ours = actions
                if policy_normalizer is not None:
                    ours = self.normalizer.normalize("action", policy_normalizer.unnormalize("action", actions))
                (grad,) = torch.autograd.grad(self.loss(z_now, ours, phase).sum(), actions)
            return -self.config.scale * grad * weight

        return guide

    def predict_chunk(
        self, policy: Policy, batch: dict[str, Any], seed: int | Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(chunks (B, H, A) in environment units, guided (B,) bool) for a policy batch.

        Rows not guided are the policy's unguided chunks, bit for bit (module docstring).
        """
        k, action_dim = self.dynamics.action_exec, self.dynamics.action_dim
        if policy.action_dim != action_dim or policy.config.action_horizon < k:
            raise ValueError(
                f"policy: action_dim {policy.action_dim}, action_horizon {policy.config.action_horizon}; this "
                f"ReGuide needs action_dim {action_dim} and action_horizon >= {k}"
            )
        n_steps = getattr(policy.config, "inference_steps", None)
        if not isinstance(n_steps, int):
            raise ValueError(f"policy.config.inference_steps: got {n_steps!r}; ReGuide needs an iterative sampler")
        self._modules().to(policy.device)  # the hook runs inside the policy's sampling, on its device
        states = torch.as_tensor(batch[self.state_key], dtype=torch.float32)[:, -1].to(policy.device)
        z_now = self.latent(states)
        phase, _, active = self.drift(z_now)
        plain = policy.predict_chunk(batch, seed=seed)
        mask = active.cpu().numpy()
        hook = self.hook(z_now, phase, active, n_steps, policy.normalizer)
        if hook is None:
            return plain, mask
        guided = policy.predict_chunk(batch, seed=seed, hook=hook)
        return np.where(mask[:, None, None], guided, plain), mask

    # -- persistence ------------------------------------------------------------------------------------------------
    def _modules(self) -> nn.ModuleDict:
        return nn.ModuleDict({"dynamics": self.dynamics, "targets": self.targets, "normalizer": self.normalizer})

    def save(self, directory: str | Path) -> Path:
        """``reguide.json`` (schema, config, shapes, metrics) + ``reguide.safetensors`` (all tensors)."""
        directory = Path(directory)
        meta = {
            "config": self.config.model_dump(mode="json"),
            "state_key": self.state_key,
            "latent_dim": self.dynamics.latent_dim,
            "action_dim": self.dynamics.action_dim,
            "action_exec": self.dynamics.action_exec,
            "hidden": list(self.dynamics.hidden),
            "prototype_shape": list(self.targets.prototypes.shape),
            "tau": self.targets.tau,
            "metrics": self.metrics,
        }
        write_saved_meta(directory, _CONFIG, REGUIDE_SCHEMA, meta)
        tensors = {k: v.detach().contiguous().clone() for k, v in self._modules().state_dict().items()}
        save_file(tensors, str(directory / _WEIGHTS))
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> ReGuide:
        directory = Path(directory)
        meta = read_saved_meta(directory, _CONFIG, REGUIDE_SCHEMA, "ReGuide")
        n_phases, width, dim = meta["prototype_shape"]
        dynamics = LatentDynamics(meta["latent_dim"], meta["action_dim"], meta["action_exec"], tuple(meta["hidden"]))
        targets = PhaseTargets(
            torch.zeros(n_phases, dtype=torch.int64), torch.zeros(n_phases, width, dim),
            torch.zeros(n_phases, width, dtype=torch.bool), torch.zeros(n_phases, 2), meta["tau"],
        )  # fmt: skip
        normalizer = Normalizer({meta["state_key"]: meta["latent_dim"], "action": meta["action_dim"]})
        guide = cls(dynamics, targets, normalizer, meta["state_key"], ReGuideConfig.model_validate(meta["config"]),
                    meta.get("metrics"))  # fmt: skip
        guide._modules().load_state_dict(load_file(str(directory / _WEIGHTS)), strict=True)
        return guide


def build_reguide(
    store: EpisodeStore,
    policy: Policy,
    config: ReGuideConfig | None = None,
    episode_ids: list[int] | None = None,
    phases: np.ndarray | None = None,
) -> ReGuide:
    """Phase targets from the successful episodes among ``episode_ids`` (default: all) and latent dynamics trained
    on all of those episodes, in the policy's current normalisation (copied into the ReGuide).

    ``phases`` (N,) per store step replaces the store's ground-truth ``phase`` column (e.g. a critic's phases).
    """
    config = config or ReGuideConfig()
    key = policy_state_key(policy)
    normalizer = _copy_normalizer(policy, key)
    with torch.no_grad():
        latents = normalizer.normalize(key, torch.as_tensor(store.read(key), dtype=torch.float32)).numpy()
    targets = build_phase_targets(store, latents, config.phases, episode_ids, phases)
    dynamics, metrics = train_dynamics(store, policy, config.dynamics, episode_ids, normalizer)
    return ReGuide(dynamics, targets, normalizer, key, config, metrics)


def _copy_normalizer(policy: Policy, key: str) -> Normalizer:
    """A detached copy of the policy's state and action statistics."""
    copy = Normalizer({key: policy.shapes[key][-1], "action": policy.action_dim})
    copy.load_state_dict({k: v.clone() for k, v in policy.normalizer.state_dict().items()}, strict=True)
    return copy
