"""The interface every critic keeps (`Critic`); ``vla_recover.critic.kinds`` registers the critics that keep it."""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:
    from vla_recover.critic.tuned import TunedSegmenter

__all__ = ["Critic"]


class Critic(abc.ABC):
    """What the rest of the project needs from a critic."""

    NAME: ClassVar[str]  # its registry name, saved with it so `load_critic` finds its class again
    tuned: TunedSegmenter | None = None  # a segmenter tuned on this critic's curves, if any

    @property
    @abc.abstractmethod
    def input_keys(self) -> tuple[str, ...]:
        """The stored keys it reads (``obs.state``, ``obs.images.front``)."""

    @abc.abstractmethod
    def predict(self, steps: dict[str, np.ndarray], instruction: str | list[str], where: str = "episode") -> np.ndarray:
        """Progress in [0, 1] for every row of ``steps`` (one instruction for all, or one per row); ``where`` names
        the data in errors."""

    @property
    def has_done_head(self) -> bool:
        """Whether the critic also judges that the task is done (`predict_with_done` answers both)."""
        return False

    def predict_with_done(
        self, steps: dict[str, np.ndarray], instruction: str | list[str], where: str = "episode"
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Progress and P(the task is done) for every row of ``steps``, from one pass; done is None for a critic
        without a done head."""
        return self.predict(steps, instruction, where), None

    @classmethod
    @abc.abstractmethod
    def fit(
        cls,
        stores: list[Path],
        out: Path,
        config: Any,
        on_step: Callable[[int, float], None] | None = None,
    ) -> dict[str, Any]:
        """Train on the episodes of ``stores``, save the critic in ``out`` (with ``"critic": NAME`` in its
        config.json) and return its metrics."""

    @classmethod
    @abc.abstractmethod
    def load(cls, directory: str | Path) -> Critic:
        """The critic ``fit`` saved in ``directory``."""

    def to(self, device: Any) -> Critic:
        """Run on ``device`` (a torch device) from now on; a critic without a network stays where it is."""
        return self
