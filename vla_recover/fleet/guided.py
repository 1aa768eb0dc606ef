"""A fleet chunk source that applies ReGuide to a saved policy; its steps are recorded under the ``guided`` actor."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vla_recover.fleet.inference import PolicyChunks
from vla_recover.train.reguide import ReGuide, policy_state_key

if TYPE_CHECKING:
    from vla_recover.policies.common.base import Policy
    from vla_recover.policies.common.checkpoint import Checkpoint
    from vla_recover.policies.common.encoders import SentenceEmbedder

__all__ = ["GuidedChunks"]


class GuidedChunks(PolicyChunks):
    """``PolicyChunks`` plus ReGuide: chunks of drifted-but-recoverable robots are guided, the rest are the policy's.

    ``chunks`` counts the chunks predicted (one per robot per call), ``guided_chunks`` those that were guided.
    The phase of each robot is judged from its observation window alone (stateless; see
    ``vla_recover.train.reguide.phases``).
    """

    actor = "guided"

    def __init__(
        self,
        checkpoint: Checkpoint | str | Path,
        reguide_dir: Path,
        compile_backbone: bool = False,
        loaded: tuple[Policy, SentenceEmbedder] | None = None,
        device: str = "auto",
    ) -> None:
        super().__init__(checkpoint, compile_backbone, loaded, device)
        self.reguide = ReGuide.load(reguide_dir)
        key = policy_state_key(self.policy)
        if key != self.reguide.state_key:
            raise ValueError(
                f"state_key: the policy reads {key!r}, the ReGuide was built on {self.reguide.state_key!r}"
            )
        self.chunks = 0
        self.guided_chunks = 0

    def predict(
        self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str], seeds: list[int] | None = None
    ) -> np.ndarray:
        batch = self.batch(windows, instructions)
        chunks, guided = self.reguide.predict_chunk(self.policy, batch, seed=self.row_seeds(len(windows), seeds))
        self.chunks += len(windows)
        self.guided_chunks += int(guided.sum())
        return chunks
