"""Task configs: typed, frozen, validated at construction with the field name in every error."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from vla_recover.config import FrozenConfig

__all__ = ["CAMERA_NAMES", "FAILURE_KINDS", "FailureKind", "FailureSpec", "MujocoTaskConfig", "TaskConfig"]

FailureKind = Literal["slip", "early_release", "push", "actuator_noise", "pose_shift"]
FAILURE_KINDS: tuple[str, ...] = ("slip", "early_release", "push", "actuator_noise", "pose_shift")
CAMERA_NAMES: tuple[str, ...] = ("front", "side", "wrist")


class FailureSpec(FrozenConfig):
    """One failure to inject. It fires when the task first enters ``phase`` (or at ``at_step`` when no phase is
    given), after a delay drawn uniformly from ``delay``, with chance ``probability`` per episode.

    Kinds: ``slip`` loosens the grip just past the object's width and pulls the object down;
    ``early_release`` forces the gripper open; ``push`` applies a horizontal force to the object, away from the
    gripper; ``actuator_noise`` adds Gaussian noise to every action channel; ``pose_shift`` moves the object by a
    horizontal offset, away from the gripper.
    """

    kind: FailureKind = Field(
        description="slip, early_release, push, actuator_noise or pose_shift (what each does: the class docstring)"
    )
    probability: float = Field(1.0, ge=0.0, le=1.0, description="chance per episode that the failure is scheduled")
    phase: str | None = Field(
        default=None,
        description="fire when the task first reaches this phase (one of the task's phases); None: at at_step",
    )
    at_step: int = Field(0, ge=0, description="step to fire at when no phase is given")
    delay: tuple[int, int] = Field(
        default=(0, 0), description="(low, high) steps, inclusive: the delay after the trigger is drawn uniformly"
    )
    duration: int | None = Field(
        None,
        ge=1,
        le=200,
        description="steps the effect lasts; None: the kind's default (pose_shift is instantaneous)",
    )
    magnitude: float | None = Field(
        None,
        gt=0.0,
        description="N on a 50 g object for slip/push (tasks scale it by their object's mass), "
        "action std for actuator_noise, metres for pose_shift",
    )

    @field_validator("delay")
    @classmethod
    def _delay_ordered(cls, value: tuple[int, int]) -> tuple[int, int]:
        low, high = value
        if low < 0 or high < low:
            raise ValueError(f"must be (low, high) with 0 <= low <= high, got {value}")
        return value


class TaskConfig(FrozenConfig):
    """Fields every task accepts."""

    horizon: int = Field(200, ge=1, le=100_000, description="steps before the episode is truncated")
    cameras: tuple[Literal["front", "side", "wrist"], ...] = Field(
        default=(), description="cameras rendered into the observation as images.<name>; none: state only"
    )
    image_size: int = Field(84, ge=16, le=1024, description="pixels of each square camera image")
    terminate_on_success: bool = Field(True, description="end the episode at the first successful step")
    failures: tuple[FailureSpec, ...] = Field(default=(), description="failures to inject into each episode")


class MujocoTaskConfig(TaskConfig):
    """Fields of the tasks written in MJCF."""

    object_xy_range: float = Field(0.08, ge=0.0, le=0.15, description="half-width of the object spawn square, m")
    object_yaw_range: float = Field(0.5, ge=0.0, le=3.1416, description="half-range of the object spawn yaw, rad")

    @model_validator(mode="after")
    def _cameras_unique(self) -> MujocoTaskConfig:
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras must be unique, got {list(self.cameras)}")
        return self
