"""A transformer denoiser over action chunks: the alternative backbone to the conv UNet.

Tokens: [condition, diffusion step, action_1 … action_H]; a pre-norm encoder mixes them and the action tokens are
read out. Shapes as the UNet: (B, H, A), (B,), (B, C) → (B, H, A).
"""

from __future__ import annotations

import torch
from torch import nn

from vla_recover.policies.common.unet1d import SinusoidalEmbedding

__all__ = ["ChunkTransformer"]


class ChunkTransformer(nn.Module):
    def __init__(self, action_dim: int, cond_dim: int, horizon: int, dim: int = 128, layers: int = 4, heads: int = 4):
        super().__init__()
        self.action_in = nn.Linear(action_dim, dim)
        self.cond_in = nn.Sequential(nn.Linear(cond_dim, dim), nn.Mish(), nn.Linear(dim, dim))
        self.step_in = nn.Sequential(SinusoidalEmbedding(dim), nn.Linear(dim, dim), nn.Mish(), nn.Linear(dim, dim))
        self.position = nn.Parameter(torch.zeros(1, horizon + 2, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, action_dim))
        nn.init.normal_(self.position, std=0.02)

    def forward(self, sample: torch.Tensor, timestep: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        tokens = torch.cat(
            [self.cond_in(cond)[:, None], self.step_in(timestep)[:, None], self.action_in(sample)], dim=1
        )
        hidden = self.encoder(tokens + self.position)
        return self.out(hidden[:, 2:])
