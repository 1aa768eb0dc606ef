"""LeRobot's DiffusionPolicy as one of ours: built from our fields, a LeRobot config, or a local checkpoint.

Our fields map onto LeRobot's: ``obs_horizon`` → ``n_obs_steps``, ``action_horizon`` → ``horizon``, ``action_exec``
→ ``n_action_steps``, ``down_dims`` and ``inference_steps`` (DDIM) likewise. ``lerobot_config`` passes any other
field of LeRobot's ``DiffusionConfig`` through unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from vla_recover.policies.common.base import PolicyConfig

__all__ = ["LeRobotDiffusionConfig"]


class LeRobotDiffusionConfig(PolicyConfig):
    inference_steps: int = Field(10, ge=1, le=1000, description="DDIM steps at inference")
    environment_state_dims: int = Field(
        0,
        ge=0,
        description="trailing state dims fed as LeRobot's observation.environment_state (object poses); LeRobot's "
        "diffusion policy needs this or images",
    )
    pretrained_path: Path | None = Field(
        None, description="a local LeRobot checkpoint directory (config.json + model.safetensors); never a hub id"
    )
    lerobot_config: dict[str, Any] = Field(default_factory=dict, description="extra LeRobot DiffusionConfig fields")

    @model_validator(mode="after")
    def _lerobot_needs(self) -> LeRobotDiffusionConfig:
        if self.use_language:
            raise ValueError("use_language: LeRobot's diffusion policy takes no instruction; set it to false")
        if self.state_key is None:
            raise ValueError("state_key: LeRobot's diffusion policy needs a robot state")
        if not self.image_keys and self.environment_state_dims == 0:
            raise ValueError(
                "environment_state_dims: LeRobot's diffusion policy needs images or an environment state; "
                "set image_keys or the number of trailing state dims that describe objects"
            )
        if self.backbone != "unet":
            raise ValueError(f"backbone: LeRobot's diffusion policy is a UNet, got {self.backbone!r}")
        return self
