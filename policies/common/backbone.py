"""Build the denoiser a policy config names."""

from __future__ import annotations

from torch import nn

from vla_recover.policies.common.base import PolicyConfig
from vla_recover.policies.common.transformer import ChunkTransformer
from vla_recover.policies.common.unet1d import ConditionalUnet1D

__all__ = ["build_backbone"]


def build_backbone(config: PolicyConfig, action_dim: int, cond_dim: int) -> nn.Module:
    if config.backbone == "transformer":
        return ChunkTransformer(
            action_dim, cond_dim, config.action_horizon, config.transformer_dim, config.transformer_layers
        )
    return ConditionalUnet1D(action_dim, cond_dim, config.down_dims)
