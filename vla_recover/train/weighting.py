"""Weighters: from a store, one weight per stored step. The trainer multiplies each window's loss by its anchor's
weight, and never samples a step of weight 0. Objectives differ here, not in copies of the training loop."""

from __future__ import annotations

import abc

import numpy as np

from vla_recover.config import FrozenConfig
from vla_recover.data import EpisodeStore
from vla_recover.registry import Registry

__all__ = ["WEIGHTERS", "BCWeighter", "Weighter"]


class Weighter(abc.ABC):
    @abc.abstractmethod
    def weights(self, store: EpisodeStore) -> np.ndarray:
        """(n_steps,) float32, non-negative."""


class BCWeighter(Weighter):
    """Plain behaviour cloning: every selected step counts the same."""

    def weights(self, store: EpisodeStore) -> np.ndarray:
        return np.ones(store.n_steps, dtype=np.float32)


class _NoConfig(FrozenConfig):
    pass


WEIGHTERS: Registry[FrozenConfig] = Registry("weighter")
WEIGHTERS.register("bc", _NoConfig, "vla_recover.train.weighting:BCWeighter", "uniform weights")
