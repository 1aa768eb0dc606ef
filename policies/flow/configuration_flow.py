from __future__ import annotations

from typing import Literal

from pydantic import Field

from vla_recover.policies.common.generative import GenerativePolicyConfig

__all__ = ["FlowConfig"]


class FlowConfig(GenerativePolicyConfig):
    inference_steps: int = Field(4, ge=1, le=100, description="Euler steps at inference")
    time_sampling: Literal["uniform", "beta"] = Field(
        "beta",
        description="how training draws the flow time: uniform, or beta: beta(1.5, 1) leans to noisier times, "
        "as in pi0",
    )
