"""Failure-aware guidance (AFIL): a second generator trained on failed behaviour steers each chunk away from it.

A policy with ``failure_guidance`` set has two action generators over one observation conditioning: its usual
network, trained on what the data rule keeps, and a *failure generator* of the same shape, trained on the steps that
led to failure. At every sampling step both estimate the clean chunk from the same noisy chunk, and the hook moves
the estimate away from the failure generator's, classifier-free style (ALGORITHMS.md, negative guidance):

    â0' = â0_s + λ·(â0_s − â0_f)        (for diffusion the same as ε' = ε_s + λ·(ε_s − ε_f))

AFIL sets λ per denoising step from how far apart the two predictions are; its formula is not public. Ours
(``rule: adaptive``): λ = scale · exp(−d / distance_scale), d the RMS distance between â0_s and â0_f of the row
(normalised action units). Guidance is strongest where the two generators agree, i.e. where the chunk the policy is
about to produce is one its failures produced too, and fades where the policy already acts unlike its failures; the
displacement λ·d peaks at d = distance_scale and never exceeds scale · distance_scale / e, so a failure generator
far off the data cannot throw a chunk out of range. ``rule: constant`` is plain classifier-free negative guidance
(λ = scale).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.policies.common.base import GuidanceHook, then_hook

__all__ = ["FailureGuidanceConfig", "failure_guidance_hook", "guidance_strength"]


class FailureGuidanceConfig(FrozenConfig):
    """How strongly the failure generator steers sampling (see the module docstring for the rule)."""

    scale: float = Field(
        default=1.0, ge=0.0, le=10.0, description="λ's ceiling; 0 samples from the success generator alone"
    )
    rule: Literal["adaptive", "constant"] = Field(
        default="adaptive",
        description="adaptive: λ = scale · exp(−d / distance_scale) per row and sampling step, d the distance "
        "between the two generators' clean-chunk estimates; constant: λ = scale",
    )
    distance_scale: float = Field(
        default=0.25,
        gt=0.0,
        le=10.0,
        description="adaptive: the RMS distance (normalised action units) at which the push λ·d is largest",
    )


def guidance_strength(config: FailureGuidanceConfig, gap: torch.Tensor) -> torch.Tensor:
    """λ (B, 1, 1) for the gap â0_s − â0_f (B, H, A)."""
    if config.rule == "constant":
        return torch.full((gap.shape[0], 1, 1), config.scale, dtype=gap.dtype, device=gap.device)
    distance = gap.pow(2).mean(dim=(1, 2)).sqrt()
    return (config.scale * torch.exp(-distance / config.distance_scale))[:, None, None]


def failure_guidance_hook(
    config: FailureGuidanceConfig,
    failure_estimate: Callable[[int, torch.Tensor], torch.Tensor],
    then: GuidanceHook | None = None,
) -> GuidanceHook:
    """The sampling hook adding λ·(â0_s − â0_f); ``failure_estimate(index, noisy)`` is the failure generator's
    clean-chunk estimate at sampling step ``index``. ``then`` (e.g. ReGuide's hook) sees the estimate after it."""

    def guide(index: int, noisy: torch.Tensor, clean: torch.Tensor) -> torch.Tensor | None:
        with torch.no_grad():
            gap = clean.detach() - failure_estimate(index, noisy.detach())
            term = guidance_strength(config, gap) * gap
        return then_hook(term, then, index, noisy, clean)

    return guide
