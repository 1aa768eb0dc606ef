"""ReGuide: phase-conditioned guidance of action-chunk policies towards where successful episodes were.

>>> from vla_recover.train.reguide import ReGuide, ReGuideConfig, build_reguide
"""

from __future__ import annotations

from vla_recover.train.reguide.dynamics import DynamicsConfig, LatentDynamics, policy_state_key, train_dynamics
from vla_recover.train.reguide.guidance import REGUIDE_SCHEMA, ReGuide, ReGuideConfig, build_reguide
from vla_recover.train.reguide.phases import PhaseConfig, PhaseTargets, build_phase_targets, kmeans

__all__ = [
    "REGUIDE_SCHEMA",
    "DynamicsConfig",
    "LatentDynamics",
    "PhaseConfig",
    "PhaseTargets",
    "ReGuide",
    "ReGuideConfig",
    "build_phase_targets",
    "build_reguide",
    "kmeans",
    "policy_state_key",
    "train_dynamics",
]
