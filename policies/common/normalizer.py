"""Per-key affine normalisation to [-1, 1] with statistics that travel inside the checkpoint."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

__all__ = ["Normalizer"]


class Normalizer(nn.Module):
    """Maps each key's features from [min, max] to [-1, 1]; constant features map to 0.

    Statistics are buffers, so they are saved and loaded with the weights.
    """

    def __init__(self, dims: dict[str, int]) -> None:
        super().__init__()
        self.keys = sorted(dims)
        for key in self.keys:
            self.register_buffer(_name(key, "low"), torch.zeros(dims[key]))
            self.register_buffer(_name(key, "high"), torch.ones(dims[key]))

    @torch.no_grad()
    def fit(self, key: str, values: np.ndarray) -> None:
        """Set the statistics of ``key`` from samples (N, D)."""
        flat = torch.as_tensor(values, dtype=torch.float32).reshape(-1, values.shape[-1])
        getattr(self, _name(key, "low")).copy_(flat.min(0).values)
        getattr(self, _name(key, "high")).copy_(flat.max(0).values)

    @property
    def device(self) -> torch.device:
        return getattr(self, _name(self.keys[0], "low")).device

    def _scale(self, key: str) -> tuple[torch.Tensor, torch.Tensor]:
        low, high = getattr(self, _name(key, "low")), getattr(self, _name(key, "high"))
        span = (high - low).clamp_min(1e-6)
        return low, span

    def normalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        low, span = self._scale(key)
        return ((x - low) / span) * 2.0 - 1.0

    def unnormalize(self, key: str, x: torch.Tensor) -> torch.Tensor:
        low, span = self._scale(key)
        return (x + 1.0) / 2.0 * span + low


def _name(key: str, stat: str) -> str:
    return f"{key.replace('.', '__')}__{stat}"
