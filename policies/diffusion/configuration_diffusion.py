from __future__ import annotations

from typing import Literal

from pydantic import Field

from vla_recover.policies.common.base import PolicyConfig

__all__ = ["DiffusionConfig"]


class DiffusionConfig(PolicyConfig):
    train_timesteps: int = Field(100, ge=2, le=1000)
    inference_steps: int = Field(10, ge=1, le=1000, description="DDIM steps at inference")
    beta_schedule: Literal["squaredcos_cap_v2", "linear", "scaled_linear"] = "squaredcos_cap_v2"
    clip_sample: bool = True
