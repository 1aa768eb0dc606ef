"""What drives autonomous robots: a policy checkpoint (batched across robots) or a constant action."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from vla_recover.fleet.config import FleetConfig
    from vla_recover.policies.common.base import Policy
    from vla_recover.policies.common.checkpoint import Checkpoint
    from vla_recover.policies.common.encoders import SentenceEmbedder

__all__ = ["ChunkSource", "ConstantChunks", "PolicyChunks", "RemoteChunks", "chunk_source", "observation_arrays"]


class ChunkSource(Protocol):
    obs_horizon: int
    action_exec: int
    action_horizon: int  # actions per chunk; the first ``action_exec`` of them (after any in flight) are executed
    obs_keys: tuple[str, ...]  # env observation keys the source reads ("state", "images.front")
    version: str

    def predict(
        self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str], seeds: list[int] | None = None
    ) -> np.ndarray:
        """Action chunks (B, H, A) for B observation windows, in one batched call; ``seeds``: each row's sampling
        seed (`vla_recover.execution.chunk_seed`), None where nothing asks for reproducible chunks."""
        ...


class ConstantChunks:
    """Every robot gets the same action: the fleet's overhead measured without a network."""

    obs_horizon = 1
    obs_keys: tuple[str, ...] = ("state",)
    version = "constant"

    def __init__(self, action: list[float], action_exec: int = 8) -> None:
        self.action = np.asarray(action, dtype=np.float32)
        self.action_exec = action_exec
        self.action_horizon = 2 * action_exec  # planned further than executed, as a policy's chunks are

    def predict(
        self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str], seeds: list[int] | None = None
    ) -> np.ndarray:
        return np.broadcast_to(self.action, (len(windows), self.action_horizon, self.action.size)).copy()


class PolicyChunks:
    """A saved policy: one forward for all robots that need a chunk this tick."""

    def __init__(
        self,
        checkpoint: Checkpoint | str | Path,
        compile_backbone: bool = False,
        loaded: tuple[Policy, SentenceEmbedder] | None = None,
        device: str = "auto",
    ) -> None:
        """``loaded``: the checkpoint's policy and embedder where the caller has already loaded them (moved to
        ``device``, a `vla_recover.devices` name, refused here when it is not on this machine)."""
        import torch

        from vla_recover.devices import resolve_device
        from vla_recover.policies.common.checkpoint import Checkpoint

        torch.set_num_threads(1)  # the sim workers need the other cores
        where = resolve_device(device)
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = Checkpoint.open(checkpoint)
        self.policy, self.embedder = loaded or checkpoint.load(where)
        self.policy.to(where)
        if compile_backbone:
            self.policy.compile_backbone()
        else:  # as evaluation samples (vla_recover.evaluate), so the fleet runs the policy as it is judged
            self.policy.trace_networks()
        cfg = self.policy.config
        self.obs_horizon, self.action_exec, self.action_horizon = cfg.obs_horizon, cfg.action_exec, cfg.action_horizon
        self._policy_keys = tuple(([cfg.state_key] if cfg.state_key else []) + list(cfg.image_keys))
        self.obs_keys = tuple(k.removeprefix("obs.") for k in self._policy_keys)
        self.version = checkpoint.version  # the checkpoint's own id, recorded with every step it chooses
        self._calls = 0

    def batch(self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str]) -> dict[str, np.ndarray]:
        """The policy's input batch for B observation windows."""
        batch = observation_arrays(windows, self._policy_keys)
        if self.policy.config.use_language:
            batch["instruction_embedding"] = self.embedder.embed(instructions)
        return batch

    def predict(
        self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str], seeds: list[int] | None = None
    ) -> np.ndarray:
        return self.policy.predict_chunk(self.batch(windows, instructions), seed=self.row_seeds(len(windows), seeds))

    def row_seeds(self, rows: int, seeds: list[int] | None) -> list[int]:
        """The given per-row seeds, or (a caller with none, such as a robot node) one fresh seed per row."""
        if seeds is not None:
            return list(seeds)
        self._calls += 1
        return fresh_seeds(self._calls, rows)


class RemoteChunks:
    """A policy served by ``vla-recover serve`` (vla_recover.serving): the robots' windows go to the server in one
    request a tick, each with its own seed, so the chunks are those the same checkpoint gives locally."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        from vla_recover.serving.client import PolicyClient

        self.client = PolicyClient(url, token, timeout_s)
        self.timeout_s = timeout_s  # also how long a server may be gone (restarting) before the fleet stops
        info = self.client.info(wait_s=timeout_s)  # a fleet may start beside its server
        self.obs_horizon, self.action_exec = int(info["obs_horizon"]), int(info["action_exec"])
        self.action_horizon = int(info["action_horizon"])
        self._policy_keys = tuple(info["inputs"])
        self._dtypes = {key: np.dtype(spec["dtype"]) for key, spec in info["inputs"].items()}
        self.obs_keys = tuple(k.removeprefix("obs.") for k in self._policy_keys)
        self.use_language = bool(info["use_language"])
        self.version = str(info["version"])  # the served checkpoint's id, updated from every reply
        self.max_rows = int(info["max_rows"])
        self.action_dim = int(info["action_dim"])
        state = info["inputs"].get("obs.state")  # None for a policy that reads images only
        self.state_dim: int | None = int(state["shape"][-1]) if state else None
        self._calls = 0

    def predict(
        self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str], seeds: list[int] | None = None
    ) -> np.ndarray:
        if seeds is None:
            self._calls += 1
            seeds = fresh_seeds(self._calls, len(windows))
        arrays = {
            k: v.astype(self._dtypes[k], copy=False) for k, v in observation_arrays(windows, self._policy_keys).items()
        }
        parts = []
        for start in range(0, len(windows), self.max_rows):  # a fleet larger than a request's row limit
            rows = slice(start, start + self.max_rows)
            texts = instructions[rows] if self.use_language else None
            inputs = {k: v[rows] for k, v in arrays.items()}
            actions, meta = self.client.chunks(inputs, list(seeds[rows]), texts, wait_s=self.timeout_s)
            self.version = meta.get("version", self.version)
            parts.append(actions)
        return np.concatenate(parts)


def observation_arrays(windows: list[deque[dict[str, np.ndarray]]], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """(B, To, ...) arrays of the policy inputs ``keys`` (``obs.state``) from B windows of env observations."""
    return {
        key: np.stack([np.stack([obs[key.removeprefix("obs.")] for obs in window]) for window in windows])
        for key in keys
    }


def fresh_seeds(call: int, rows: int) -> list[int]:
    """Seeds for a caller that passes none (a robot node): new ones each call, one per row."""
    return [call * 1_000_003 + row for row in range(rows)]


def chunk_source(config: FleetConfig) -> ChunkSource:
    """What drives the fleet's autonomous robots: a constant action, a policy server, or a local checkpoint."""
    if config.constant_action is not None:
        return ConstantChunks(config.constant_action)
    if config.inference is not None:
        return RemoteChunks(config.inference.remote, timeout_s=config.inference.timeout_s)
    assert config.policy is not None
    return PolicyChunks(config.policy, config.compile_policy, device=config.device)
