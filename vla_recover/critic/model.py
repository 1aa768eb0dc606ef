"""The progress estimator p(observation, instruction) ∈ [0, 1] and its checkpoint format.

Inputs, each optional by config: the low-dim state (normalised with statistics saved in the checkpoint), a camera
image through the policies' small conv encoder, and the instruction as a cached sentence embedding. A trunk MLP
gives a progress logit and, optionally, a done logit (the step is among the last of a successful episode).
Checkpoints are ``config.json`` plus ``model.safetensors``, like the policies'; loading never unpickles.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field, model_validator
from torch import nn

from vla_recover.config import FrozenConfig, validate_config
from vla_recover.critic.base import Critic
from vla_recover.critic.data import non_finite_step
from vla_recover.critic.tuned import TUNED_FILES, TunedSegmenter
from vla_recover.policies.common.checkpoint import load_weights, read_checkpoint_config, save_weights
from vla_recover.policies.common.encoders import TEXT_EMBED_DIM, ImageEncoder, SentenceEmbedder
from vla_recover.policies.common.normalizer import Normalizer

__all__ = ["CRITIC_SCHEMA", "CriticConfig", "ProgressCritic", "ProgressNet"]

CRITIC_SCHEMA = 1


class CriticConfig(FrozenConfig):
    state_key: str | None = Field(default="obs.state", description="low-dim input; None: not used")
    image_key: str | None = Field(default=None, description="camera input (H, W, 3) uint8; None: not used")
    image_crop: int = Field(
        default=76,
        ge=8,
        description="pixels of the square crop the image encoder sees (random in training, centred otherwise); "
        "capped at the image size",
    )
    use_language: bool = Field(default=True, description="the instruction's sentence embedding is an input")
    hidden: int = Field(default=256, ge=8, le=4096, description="width of each trunk layer")
    layers: int = Field(default=3, ge=1, le=12, description="number of trunk layers")
    done_head: bool = Field(
        default=False, description="add a done head: the step is among the last done_steps of a successful episode"
    )
    done_steps: int = Field(default=3, ge=1, description="the done head's positives: the last steps of a success")

    @model_validator(mode="after")
    def _some_input(self) -> CriticConfig:
        if self.state_key is None and self.image_key is None:
            raise ValueError("state_key / image_key: the critic needs a state or an image input")
        return self


class ProgressNet(nn.Module):
    def __init__(self, config: CriticConfig, shapes: dict[str, tuple[int, ...]]) -> None:
        super().__init__()
        self.config = config
        width = 0
        self.normalizer = Normalizer({config.state_key: shapes[config.state_key][0]} if config.state_key else {})
        if config.state_key:
            width += shapes[config.state_key][0]
        self.image_encoder: ImageEncoder | None = None
        if config.image_key:
            size = shapes[config.image_key][0]
            self.image_encoder = ImageEncoder(size, min(config.image_crop, size))
            width += 64
        self.language: nn.Linear | None = nn.Linear(TEXT_EMBED_DIM, 32) if config.use_language else None
        width += 32 if config.use_language else 0
        layers: list[nn.Module] = []
        for _ in range(config.layers):
            layers += [nn.Linear(width, config.hidden), nn.LayerNorm(config.hidden), nn.SiLU()]
            width = config.hidden
        self.trunk = nn.Sequential(*layers)
        self.progress_head = nn.Linear(width, 1)
        self.done_head = nn.Linear(width, 1) if config.done_head else None

    def forward(
        self, batch: dict[str, torch.Tensor], state_noise: float = 0.0
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(progress logits (B,), done logits (B,) or None); ``state_noise``: the std of Gaussian noise added to the
        normalised state (training only)."""
        parts = []
        if self.config.state_key:
            state = self.normalizer.normalize(self.config.state_key, batch[self.config.state_key])
            parts.append(state + state_noise * torch.randn_like(state) if state_noise else state)
        if self.image_encoder is not None:
            parts.append(self.image_encoder(batch[self.config.image_key]))  # type: ignore[index]
        if self.language is not None:
            parts.append(self.language(batch["instruction_embedding"]))
        features = self.trunk(torch.cat(parts, dim=-1))
        done = self.done_head(features).squeeze(-1) if self.done_head is not None else None
        return self.progress_head(features).squeeze(-1), done


class ProgressCritic(Critic):
    """A trained `ProgressNet` with its instruction embeddings: predicts progress curves of stored episodes."""

    NAME = "progress"

    def __init__(
        self,
        net: ProgressNet,
        embedder: SentenceEmbedder,
        shapes: dict[str, tuple[int, ...]],
        tuned: TunedSegmenter | None = None,
    ) -> None:
        self.net, self.embedder, self.shapes = net, embedder, shapes
        self.tuned = tuned  # the segmenter tuned on this critic's curves (vla-recover critic tune), if any

    @property
    def config(self) -> CriticConfig:
        return self.net.config

    @property
    def input_keys(self) -> tuple[str, ...]:
        return tuple(k for k in (self.config.state_key, self.config.image_key) if k)

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    def to(self, device: Any) -> ProgressCritic:
        self.net.to(device)
        return self

    def tensors(
        self,
        steps: dict[str, np.ndarray],
        instruction: str | list[str],
        where: str = "episode",
        check_finite: bool = True,
    ) -> dict[str, torch.Tensor]:
        """The net's inputs for ``steps`` (arrays with one row per step) under one instruction, or one per row;
        NaN or a wrong shape is a clear error (``check_finite=False`` for data already checked, as training batches
        are)."""
        batch: dict[str, torch.Tensor] = {}
        length = None
        for key in self.input_keys:
            if key not in steps:
                raise KeyError(f"{where}: no key {key!r} (the critic reads {', '.join(self.input_keys)})")
            values = np.asarray(steps[key])
            if values.shape[1:] != tuple(self.shapes[key]):
                raise ValueError(f"{where}: {key} has shape {values.shape[1:]}, the critic expects {self.shapes[key]}")
            bad = non_finite_step(values) if check_finite else None
            if bad is not None:
                raise ValueError(f"{where}: {key} is NaN or Inf at step {bad}")
            batch[key] = torch.as_tensor(
                values if key == self.config.image_key else values.astype(np.float32), device=self.device
            )
            length = len(values)
        if self.config.use_language and isinstance(instruction, list):
            if len(instruction) != length:
                raise ValueError(f"{where}: {len(instruction)} instructions for {length} steps")
            embedded = self.embedder.embed(instruction)
            batch["instruction_embedding"] = torch.as_tensor(embedded, dtype=torch.float32, device=self.device)
        elif self.config.use_language:
            embedded = self.embedder.embed([instruction])[0]
            embedding = torch.as_tensor(embedded, dtype=torch.float32, device=self.device)
            batch["instruction_embedding"] = embedding.expand(length or 1, -1)
        return batch

    def predict(self, steps: dict[str, np.ndarray], instruction: str | list[str], where: str = "episode") -> np.ndarray:
        """Progress in [0, 1] for every step (one instruction for all, or one per step)."""
        return self.predict_with_done(steps, instruction, where)[0]

    @property
    def has_done_head(self) -> bool:
        return self.net.done_head is not None

    @torch.no_grad()
    def predict_with_done(
        self, steps: dict[str, np.ndarray], instruction: str | list[str], where: str = "episode"
    ) -> tuple[np.ndarray, np.ndarray | None]:
        self.net.eval()
        logits, done = self.net(self.tensors(steps, instruction, where))
        progress = torch.sigmoid(logits).cpu().numpy().astype(np.float32)
        return progress, None if done is None else torch.sigmoid(done).cpu().numpy().astype(np.float32)

    def save(self, directory: str | Path, **meta: Any) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name in TUNED_FILES:  # a segmenter tuned on an earlier critic's curves does not fit this one's
            (directory / name).unlink(missing_ok=True)
        instructions = save_weights(self.net, directory, self.embedder)
        config = {
            "schema_version": CRITIC_SCHEMA,
            "kind": "progress_critic",
            "critic": self.NAME,
            "config": self.config.model_dump(mode="json"),
            "shapes": {k: list(v) for k, v in self.shapes.items()},
            "instructions": instructions,
            **meta,
        }
        (directory / "config.json").write_text(json.dumps(config, indent=2))
        return directory

    @classmethod
    def fit(
        cls,
        stores: list[Path],
        out: Path,
        config: Any,
        on_step: Callable[[int, float], None] | None = None,
    ) -> dict[str, Any]:
        from vla_recover.critic.train import train_critic

        return train_critic(list(stores), out, config, on_step)

    @classmethod
    def load(cls, directory: str | Path) -> ProgressCritic:
        directory = Path(directory)
        path = directory / "config.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: not a critic checkpoint (no config.json)")
        raw = read_checkpoint_config(path)
        if raw.get("kind") != "progress_critic" or raw.get("schema_version") != CRITIC_SCHEMA:
            raise ValueError(
                f"{path}: kind {raw.get('kind')!r} schema {raw.get('schema_version')}; "
                f"this vla_recover reads progress_critic schema {CRITIC_SCHEMA}"
            )
        shapes = {k: tuple(v) for k, v in raw["shapes"].items()}
        net = ProgressNet(validate_config(CriticConfig, raw["config"]), shapes)
        embedder = load_weights(net, directory, raw["instructions"])
        return cls(net.eval(), embedder, shapes, TunedSegmenter.load(directory))
