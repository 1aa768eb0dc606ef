"""Checkpoints: safetensors weights + a JSON config; loading never unpickles.

A policy directory holds ``config.json`` (schema version, policy name and config, input shapes, instruction list)
and ``model.safetensors`` (weights and normalisation statistics, plus the cached instruction embeddings).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from vla_recover.policies.common.base import Policy
from vla_recover.policies.common.encoders import SentenceEmbedder

__all__ = ["CHECKPOINT_SCHEMA", "load_policy", "load_weights", "read_checkpoint_config", "save_policy", "save_weights"]

CHECKPOINT_SCHEMA = 1
_EMBEDDINGS = "__instruction_embeddings__"


def save_policy(policy: Policy, directory: str | Path, embedder: SentenceEmbedder | None = None, **meta: Any) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    instructions = save_weights(policy, directory, embedder)
    config = {
        "schema_version": CHECKPOINT_SCHEMA,
        "policy": policy.name,
        "config": policy.config.model_dump(mode="json"),
        "shapes": {k: list(v) for k, v in policy.shapes.items()},
        "action_dim": policy.action_dim,
        "instructions": instructions,
        **meta,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


def read_checkpoint_config(path: Path) -> dict[str, Any]:
    """A checkpoint's config.json as a mapping, or a ValueError naming the file."""
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
    return config


def load_policy(directory: str | Path) -> tuple[Policy, SentenceEmbedder, dict[str, Any]]:
    """The policy (in eval mode), its instruction embedder with the saved cache, and the raw config."""
    from vla_recover.policies import build_policy

    directory = Path(directory)
    config_path = directory / "config.json"
    if not config_path.is_file():
        inside = directory / "policy"  # a training run folder keeps its final policy here
        hint = f"; the training run's policy is {inside}" if (inside / "config.json").is_file() else ""
        raise FileNotFoundError(f"{config_path}: not a policy checkpoint (no config.json){hint}")
    config = read_checkpoint_config(config_path)
    missing = [key for key in ("policy", "config", "shapes", "action_dim", "instructions") if key not in config]
    if missing:
        kind = f" (a {config['kind']} checkpoint)" if "kind" in config else ""
        raise ValueError(f"{config_path}: not a policy checkpoint{kind}; it has no {', '.join(missing)}")
    version = config.get("schema_version")
    if version != CHECKPOINT_SCHEMA:
        raise ValueError(f"{config_path}: checkpoint schema {version}, this vla_recover reads {CHECKPOINT_SCHEMA}")
    shapes = {k: tuple(v) for k, v in config["shapes"].items()}
    policy = build_policy(config["policy"], config["config"], shapes, config["action_dim"])
    embedder = load_weights(policy, directory, config["instructions"])
    return policy.eval(), embedder, config


def save_weights(module: nn.Module, directory: Path, embedder: SentenceEmbedder | None) -> list[str]:
    """``model.safetensors``: the module's weights and the embedder's cached instructions; returns those, in the
    order their embeddings are stored."""
    tensors = {k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}
    instructions = sorted(embedder.cache) if embedder else []
    if instructions and embedder is not None:
        tensors[_EMBEDDINGS] = torch.as_tensor(np.stack([embedder.cache[s] for s in instructions]))
    save_file(tensors, str(directory / "model.safetensors"))
    return instructions


def load_weights(module: nn.Module, directory: Path, instructions: list[str]) -> SentenceEmbedder:
    """Load ``model.safetensors`` into ``module`` (every weight must fit); returns the saved instruction embedder."""
    tensors = load_file(str(directory / "model.safetensors"))
    embeddings = tensors.pop(_EMBEDDINGS, None)
    missing, unexpected = module.load_state_dict(tensors, strict=False)
    if missing or unexpected:
        raise ValueError(f"{directory}: weights do not fit the config (missing {missing}, unexpected {unexpected})")
    cache = {}
    if embeddings is not None:
        cache = {s: embeddings[i].numpy() for i, s in enumerate(instructions)}
    return SentenceEmbedder(cache)
