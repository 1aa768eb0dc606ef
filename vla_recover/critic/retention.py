"""Which steps of an episode feed training, from its critic and supervision segments.

Default (as VLAC-CUT does): progress and recovery segments and every human intervention are kept; idle and
failure-inducing segments are dropped, or kept as negatives with ``negatives: true`` for methods that use them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import Field, field_validator

from vla_recover.config import FrozenConfig
from vla_recover.critic.segmenter import CRITIC_KINDS

__all__ = ["RetentionConfig", "retention_labels"]

KEEP, DROP, NEGATIVE = 1, 0, -1


class RetentionConfig(FrozenConfig):
    keep: tuple[str, ...] = Field(default=("progress", "recovery"), description="critic kinds kept for training")
    keep_interventions: bool = Field(
        default=True, description="human intervention steps are kept whatever the critic says"
    )
    negatives: bool = Field(default=False, description="mark the dropped critic kinds as negatives instead")

    @field_validator("keep")
    @classmethod
    def _known_kinds(cls, kinds: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(kinds) - set(CRITIC_KINDS))
        if unknown:
            raise ValueError(f"got {unknown}; critic kinds are {', '.join(CRITIC_KINDS)}")
        return kinds


def retention_labels(
    length: int,
    critic: Sequence[tuple[int, int, str]],
    supervision: Sequence[tuple[int, int, str]] = (),
    config: RetentionConfig | None = None,
) -> np.ndarray:
    """Per step: 1 keep, 0 drop, -1 negative. Steps no segment covers (rewinds) are dropped."""
    config = config or RetentionConfig()
    labels = np.full(length, DROP, dtype=np.int8)
    for start, stop, kind in critic:
        if kind in config.keep:
            labels[start:stop] = KEEP
        elif config.negatives:
            labels[start:stop] = NEGATIVE
    if config.keep_interventions:
        for start, stop, kind in supervision:
            if kind == "intervention":
                labels[start:stop] = KEEP
    return labels
