"""What drives autonomous robots: a policy checkpoint (batched across robots) or a constant action."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from vla_recover.policies.common.base import Policy
    from vla_recover.policies.common.checkpoint import Checkpoint
    from vla_recover.policies.common.encoders import SentenceEmbedder

__all__ = ["ChunkSource", "ConstantChunks", "PolicyChunks"]


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
    ) -> None:
        """``loaded``: the checkpoint's policy and embedder where the caller has already loaded them."""
        import torch

        from vla_recover.policies.common.checkpoint import Checkpoint

        torch.set_num_threads(1)  # the sim workers need the other cores
        if not isinstance(checkpoint, Checkpoint):
            checkpoint = Checkpoint.open(checkpoint)
        self.policy, self.embedder = loaded or checkpoint.load()
        if compile_backbone:
            self.policy.compile_backbone()
        else:  # as evaluation samples (vla_recover.evaluate), so the fleet runs the policy as it is judged
            self.policy.trace_networks()
        cfg = self.policy.config
        self.obs_horizon, self.action_exec, self.action_horizon = cfg.obs_horizon, cfg.action_exec, cfg.action_horizon
        self._policy_keys = ([cfg.state_key] if cfg.state_key else []) + list(cfg.image_keys)
        self.obs_keys = tuple(k.removeprefix("obs.") for k in self._policy_keys)
        self.version = checkpoint.version  # the checkpoint's own id, recorded with every step it chooses
        self._calls = 0

    def batch(self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str]) -> dict[str, np.ndarray]:
        """The policy's input batch for B observation windows."""
        batch = {
            key: np.stack([np.stack([obs[key.removeprefix("obs.")] for obs in window]) for window in windows])
            for key in self._policy_keys
        }
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
        return [self._calls * 1_000_003 + row for row in range(rows)]
