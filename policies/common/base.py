"""The `Policy` interface every policy implements, and the observation conditioning they share.

Batches are dicts of tensors: ``obs.state`` (B, To, D), ``obs.images.<cam>`` (B, To, H, W, 3) uint8, optionally
``instruction_embedding`` (B, 384), ``action`` (B, H, A) and ``action_is_pad`` (B, H) for training.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from vla_recover.config import FrozenConfig
from vla_recover.policies.common.encoders import TEXT_EMBED_DIM, ImageEncoder
from vla_recover.policies.common.normalizer import Normalizer

__all__ = ["GuidanceHook", "NoiseSource", "Policy", "PolicyConfig", "draw_noise"]

# A sampling hook sees, at each denoising / integration step, the step index, the current noisy action chunk and the
# estimated clean chunk (both (B, H, A), normalised space) and returns a term added to the clean estimate, or None.
GuidanceHook = Callable[[int, torch.Tensor, torch.Tensor], "torch.Tensor | None"]

# Where sampling noise comes from: torch's global generator (None), one generator for the batch, or one per row. With
# one per row, a row's chunk does not depend on which other rows share its batch, so an evaluation's results do not
# depend on its batch size or worker count.
NoiseSource = torch.Generator | list[torch.Generator] | None


def draw_noise(shape: tuple[int, ...], generator: NoiseSource) -> torch.Tensor:
    """Standard normal noise of ``shape``; with one generator per row, row i is drawn from generator i alone."""
    if not isinstance(generator, list):
        return torch.randn(shape, generator=generator)
    if len(generator) != shape[0]:  # the only way a list comes here: predict_chunk's seeds, one per row
        raise ValueError(f"seed: got {len(generator)} seeds for a batch of {shape[0]}")
    return torch.stack([torch.randn(shape[1:], generator=row) for row in generator])


class PolicyConfig(FrozenConfig):
    """Fields every action-chunk policy shares."""

    obs_horizon: int = Field(2, ge=1, le=16, description="observation steps the policy is conditioned on")
    action_horizon: int = Field(
        16,
        ge=1,
        le=128,
        description="actions in each predicted chunk; the unet needs a multiple of 2**(len(down_dims)-1)",
    )
    action_exec: int = Field(8, ge=1, le=128, description="actions executed from each predicted chunk")
    state_key: str | None = Field("obs.state", description="low-dim state input; None: images only")
    image_keys: tuple[str, ...] = Field(default=(), description="camera inputs (obs.images.<cam>); none: state only")
    image_crop: int = Field(
        76,
        ge=8,
        le=1024,
        description="pixels of the square crop each image encoder sees (random in training, centred otherwise)",
    )
    image_feature_dim: int = Field(64, ge=8, le=1024, description="features per image and observation step")
    use_language: bool = Field(False, description="condition on the instruction's sentence embedding")
    backbone: Literal["unet", "transformer"] = Field(
        "unet", description="the denoising network: a 1-D conditional unet or a transformer over the chunk"
    )
    down_dims: tuple[int, ...] = Field(default=(64, 128, 256), description="unet: channels of each downsampling level")
    transformer_dim: int = Field(128, ge=16, le=2048, description="transformer: model width")
    transformer_layers: int = Field(4, ge=1, le=24, description="transformer: encoder layers")

    @model_validator(mode="after")
    def _consistent(self) -> PolicyConfig:
        if self.action_exec > self.action_horizon:
            raise ValueError(f"action_exec ({self.action_exec}) must be <= action_horizon ({self.action_horizon})")
        if self.backbone == "unet" and self.action_horizon % 2 ** (len(self.down_dims) - 1):
            raise ValueError(
                f"action_horizon ({self.action_horizon}) must be divisible by 2**(len(down_dims)-1) "
                f"= {2 ** (len(self.down_dims) - 1)} for the unet backbone"
            )
        if self.state_key is None and not self.image_keys:
            raise ValueError("a policy needs state_key or image_keys")
        return self


class Policy(nn.Module, abc.ABC):
    """An action-chunk policy: conditioning on an observation window, a generative head over action chunks."""

    name: str = ""
    backbone_attr: str = ""  # the (dotted) submodule path of the denoising network
    config: PolicyConfig

    def __init__(self, config: PolicyConfig, shapes: dict[str, tuple[int, ...]], action_dim: int) -> None:
        super().__init__()
        self.config = config
        self.shapes = dict(shapes)
        self.action_dim = action_dim
        norm_dims = {"action": action_dim}
        if config.state_key:
            norm_dims[config.state_key] = shapes[config.state_key][-1]
        self.normalizer = Normalizer(norm_dims)
        self.image_encoders = nn.ModuleDict(
            {
                key.replace(".", "__"): ImageEncoder(shapes[key][0], config.image_crop, config.image_feature_dim)
                for key in config.image_keys
            }
        )
        per_step = (shapes[config.state_key][-1] if config.state_key else 0) + config.image_feature_dim * len(
            config.image_keys
        )
        self.cond_dim = per_step * config.obs_horizon + (TEXT_EMBED_DIM if config.use_language else 0)

    # -- conditioning ---------------------------------------------------------------------------------------------
    def encode_obs(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Observation window → global condition (B, cond_dim)."""
        parts = []
        cfg = self.config
        if cfg.state_key:
            state = batch[cfg.state_key].float()
            parts.append(self.normalizer.normalize(cfg.state_key, state).flatten(1))
        for key in cfg.image_keys:
            images = batch[key]  # (B, To, H, W, 3)
            b, t = images.shape[:2]
            features = self.image_encoders[key.replace(".", "__")](images.reshape(b * t, *images.shape[2:]))
            parts.append(features.reshape(b, -1))
        if cfg.use_language:
            parts.append(batch["instruction_embedding"].float())
        return torch.cat(parts, dim=-1)

    def fit_normalizer(self, data: dict[str, np.ndarray]) -> None:
        """Statistics from training data: ``action`` (N, A) and the state key (N, D)."""
        for key in self.normalizer.keys:
            self.normalizer.fit(key, data[key])

    # -- the interface ----------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def compute_loss(self, batch: dict[str, torch.Tensor], weights: torch.Tensor | None = None) -> torch.Tensor:
        """Weighted training loss: ``sum_i w_i * loss_i / B`` over the batch; padded actions do not count."""

    @abc.abstractmethod
    def sample_actions(self, cond: torch.Tensor, generator: NoiseSource, hook: GuidanceHook | None) -> torch.Tensor:
        """Normalised action chunks (B, H, A) for conditions (B, C); noise comes from ``draw_noise``."""

    @torch.no_grad()
    def predict_chunk(
        self, batch: dict[str, Any], seed: int | Sequence[int] | None = None, hook: GuidanceHook | None = None
    ) -> np.ndarray:
        """Action chunks (B, H, A) in the environment's units. Deterministic for a given ``seed``; a sequence of
        seeds, one per row, makes each row's chunk its own seed's whatever else is in the batch."""
        was_training = self.training
        self.eval()
        tensors = {k: torch.as_tensor(v) for k, v in batch.items()}
        cond = self.encode_obs(tensors)
        generator: NoiseSource = None
        if isinstance(seed, int | np.integer):
            generator = torch.Generator().manual_seed(int(seed))
        elif seed is not None:  # draw_noise checks there is one per row
            generator = [torch.Generator().manual_seed(int(row)) for row in seed]
        if hook is None:
            actions = self.sample_actions(cond, generator, None)
        else:
            with torch.enable_grad():
                actions = self.sample_actions(cond, generator, hook)
        self.train(was_training)
        return self.normalizer.unnormalize("action", actions.detach()).cpu().numpy()

    @property
    def failure_generator(self) -> nn.Module | None:
        """AFIL's failure generator (``failure_<backbone_attr>``), when the config asks for one."""
        module = getattr(self, f"failure_{self.backbone_attr}", None)
        return module if isinstance(module, nn.Module) else None

    def compile_backbone(self) -> None:
        """``torch.compile`` the denoising network in place; the state dict keeps its keys.

        On CPU this roughly halves chunk latency at batch 1 and trains ~10% faster (benchmarks/policy_speed.py).
        Each new input shape pays a one-off compile of seconds to a minute (shapes are specialised, not dynamic:
        callers with varying batch sizes should pad to a few fixed sizes), so long runs (training, fleet, robot
        node) gain and short scripts do not.
        """
        self.get_submodule(self.backbone_attr).compile(dynamic=False)

    # -- shared loss plumbing ----------------------------------------------------------------------------------------
    def _weighted(
        self, per_element: torch.Tensor, batch: dict[str, torch.Tensor], weights: torch.Tensor | None
    ) -> torch.Tensor:
        """Reduce (B, H, A) losses to one scalar with padding masked and per-sample weights applied."""
        mask = torch.ones(per_element.shape[:2], dtype=per_element.dtype)
        if "action_is_pad" in batch:
            mask = (~batch["action_is_pad"].bool()).to(per_element.dtype)
        per_sample = (per_element.mean(-1) * mask).sum(1) / mask.sum(1).clamp_min(1.0)
        if weights is None:
            return per_sample.mean()
        weights = torch.as_tensor(weights, dtype=per_sample.dtype)
        if weights.shape != per_sample.shape:
            raise ValueError(f"weights: expected shape {tuple(per_sample.shape)}, got {tuple(weights.shape)}")
        if not torch.isfinite(weights).all() or (weights < 0).any():
            raise ValueError("weights: must be finite and non-negative")
        if float(weights.sum()) == 0.0:
            raise ValueError("weights: all zero; the batch carries no training signal (check the weighter's output)")
        return (weights * per_sample).mean()
