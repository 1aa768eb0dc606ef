"""Configs of the robosuite adapters. Importing this module does not import robosuite."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from vla_recover.envs.config import TaskConfig

__all__ = [
    "RobosuiteConfig",
    "RobosuiteLiftConfig",
    "RobosuiteNutAssemblySquareConfig",
    "RobosuitePickPlaceCanConfig",
]


class RobosuiteConfig(TaskConfig):
    """Fields shared by the robosuite adapters. Camera names map to robosuite's: front → agentview,
    side → sideview, wrist → robot0_eye_in_hand."""

    robot: Literal["Panda"] = Field("Panda", description="robosuite robot arm; only Panda is supported")
    control_freq: int = Field(20, ge=5, le=100, description="control steps per second (robosuite's control_freq), Hz")


class RobosuiteLiftConfig(RobosuiteConfig):
    horizon: int = Field(200, ge=1, le=100_000, description="steps before the episode is truncated")


class RobosuitePickPlaceCanConfig(RobosuiteConfig):
    horizon: int = Field(400, ge=1, le=100_000, description="steps before the episode is truncated")


class RobosuiteNutAssemblySquareConfig(RobosuiteConfig):
    horizon: int = Field(400, ge=1, le=100_000, description="steps before the episode is truncated")
