"""Checkpoints: safetensors weights + a JSON config; loading never unpickles.

A policy directory holds ``config.json`` (schema version, policy name and config, input shapes, instruction list,
and the checkpoint's own ``version``) and ``model.safetensors`` (weights and normalisation statistics, plus the cached
instruction embeddings). The version is the checkpoint's identity wherever its actions are recorded: a name (the
training run's), the hash of its weights file and the version it was fine-tuned from (``parent``), so two
checkpoints saved to folders of the same name never share an id. A schema-1 checkpoint, saved before versions
existed, loads with a version made from its folder's name and its weights (no parent).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from vla_recover.policies.common.base import Policy
from vla_recover.policies.common.encoders import SentenceEmbedder

__all__ = [
    "CHECKPOINT_SCHEMA",
    "Checkpoint",
    "checkpoint_version",
    "host_copy",
    "load_policy",
    "load_weights",
    "read_checkpoint_config",
    "save_policy",
    "save_weights",
]

CHECKPOINT_SCHEMA = 2  # 2: config.json carries the checkpoint's version
_EMBEDDINGS = "__instruction_embeddings__"


def save_policy(
    policy: Policy,
    directory: str | Path,
    embedder: SentenceEmbedder | None = None,
    name: str | None = None,
    parent: str | None = None,
    **meta: Any,
) -> Path:
    """Write the checkpoint; ``name`` (default: the folder's, or its parent's for a folder called ``policy``) and
    ``parent`` (the version id it was fine-tuned from) go into its version."""
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
        "version": _version(directory, name, parent),
        **meta,
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory


def _version(directory: Path, name: str | None, parent: str | None) -> dict[str, Any]:
    """Name, weights hash and parent; ``id`` is ``<name>-<first 12 hex digits of the hash>``."""
    name = name or (directory.parent.name if directory.name == "policy" else directory.name) or "policy"
    digest = hashlib.sha256((directory / "model.safetensors").read_bytes()).hexdigest()
    return {"id": f"{name}-{digest[:12]}", "name": name, "content_hash": f"sha256:{digest}", "parent": parent}


def checkpoint_version(directory: str | Path) -> str:
    """The version id of the policy checkpoint in ``directory`` (a schema-1 checkpoint's is derived on reading)."""
    return Checkpoint.open(directory).version


def _migrated(config: dict[str, Any], directory: Path) -> dict[str, Any]:
    """A schema-1 config brought to this schema: its version made from its folder's name and weights."""
    if config.get("schema_version") == 1:
        return {**config, "schema_version": CHECKPOINT_SCHEMA, "version": _version(directory, None, None)}
    return config


def read_checkpoint_config(path: Path) -> dict[str, Any]:
    """A checkpoint's config.json as a mapping, or a ValueError naming the file."""
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(config).__name__}")
    return config


@dataclass(frozen=True)
class Checkpoint:
    """A saved policy as a value: where it is, its version and its config, read and checked once.

    ``Checkpoint.open(directory)`` refuses anything that is not a policy checkpoint this version reads; ``load()``
    builds the policy from it (a new module each call: a caller may fine-tune what it loaded). The loop, the fleet
    and evaluation pass this handle, so one round reads a checkpoint's config once and loads its weights only where
    a policy must run.
    """

    path: Path
    config: dict[str, Any]  # the checkpoint's config.json, brought to this schema

    @classmethod
    def open(cls, directory: str | Path) -> Checkpoint:
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
        config = _migrated(config, directory)
        schema = config.get("schema_version")
        if schema != CHECKPOINT_SCHEMA:
            reads = f"this vla_recover reads {CHECKPOINT_SCHEMA} (and migrates 1)"
            raise ValueError(f"{config_path}: checkpoint schema {schema}, {reads}")
        version = config.get("version")
        if not isinstance(version, dict) or not isinstance(version.get("id"), str) or not version["id"]:
            raise ValueError(f"{config_path}: field 'version' must hold an 'id' string, got {version!r}")
        return cls(directory, config)

    @property
    def version(self) -> str:
        """The checkpoint's own id, recorded with every step its policy chooses."""
        return str(self.config["version"]["id"])

    def load(self, device: str | torch.device = "cpu") -> tuple[Policy, SentenceEmbedder]:
        """The policy (in eval mode, on ``device``) and its instruction embedder with the saved cache."""
        from vla_recover.policies import build_policy

        shapes = {k: tuple(v) for k, v in self.config["shapes"].items()}
        policy = build_policy(self.config["policy"], self.config["config"], shapes, self.config["action_dim"])
        embedder = load_weights(policy, self.path, self.config["instructions"])
        return policy.to(device).eval(), embedder


def load_policy(directory: str | Path, device: str = "cpu") -> tuple[Policy, SentenceEmbedder, dict[str, Any]]:
    """The policy (in eval mode, on ``device``: a `vla_recover.devices` name), its instruction embedder with the
    saved cache, and the raw config."""
    from vla_recover.devices import resolve_device

    checkpoint = Checkpoint.open(directory)
    policy, embedder = checkpoint.load(resolve_device(device))
    return policy, embedder, checkpoint.config


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy in CPU memory, as safetensors writes it (so a checkpoint saved on any device loads on any other)."""
    return tensor.detach().to("cpu", copy=True).contiguous()


def save_weights(module: nn.Module, directory: Path, embedder: SentenceEmbedder | None) -> list[str]:
    """``model.safetensors``: the module's weights and the embedder's cached instructions; returns those, in the
    order their embeddings are stored."""
    tensors = {k: host_copy(v) for k, v in module.state_dict().items()}
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
