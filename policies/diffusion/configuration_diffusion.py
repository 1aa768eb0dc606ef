from __future__ import annotations

from typing import Literal

from pydantic import Field

from vla_recover.policies.common.generative import GenerativePolicyConfig

__all__ = ["DiffusionConfig"]


class DiffusionConfig(GenerativePolicyConfig):
    train_timesteps: int = Field(100, ge=2, le=1000, description="diffusion timesteps of the noise schedule (DDPM)")
    inference_steps: int = Field(10, ge=1, le=1000, description="DDIM steps at inference")
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear"] = Field(
        "squaredcos_cap_v2", description="the noise schedule's betas (diffusers' beta_schedule)"
    )
    clip_sample: bool = Field(True, description="clip the estimated clean actions to [-1, 1] while sampling")
