"""Scripted experts: closed-loop controllers on privileged simulator state, with a skill knob.

They read the state every step rather than replaying a plan, so they recover from injected failures and can take
over from any state: the simulated teleoperator uses them after a rewind. The knob degrades them on purpose
(action noise, hesitation, missed grasps) so the same code yields strong and weak demonstrators.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from vla_recover.config import FrozenConfig, validate_config
from vla_recover.envs.base import MujocoTaskEnv
from vla_recover.envs.mjcf import FINGER_OPEN
from vla_recover.envs.task import Task

__all__ = ["Expert", "ExpertConfig", "ScriptedExpert", "wrap_angle"]


class ExpertConfig(FrozenConfig):
    """Skill knob of a scripted expert. All zeros is the perfect expert."""

    action_noise: float = Field(0.0, ge=0.0, le=2.0, description="std of Gaussian noise on motion channels")
    hesitation_prob: float = Field(0.0, ge=0.0, le=1.0, description="chance per step to start hesitating")
    hesitation_steps: int = Field(6, ge=1, le=100, description="steps a hesitation lasts")
    grasp_miss_prob: float = Field(0.0, ge=0.0, le=1.0, description="chance that a grasp attempt misses")

    @classmethod
    def at_level(cls, level: float) -> ExpertConfig:
        """One knob in [0, 1]: 0 is the perfect expert, 1 a clumsy one that still finishes most episodes."""
        if not 0.0 <= level <= 1.0:
            raise ValueError(f"skill level: got {level!r}; expected a number in [0, 1]")
        return cls(
            action_noise=0.3 * level, hesitation_prob=0.05 * level, hesitation_steps=6, grasp_miss_prob=0.4 * level
        )


def wrap_angle(angle: float) -> float:
    return float((angle + np.pi) % (2.0 * np.pi) - np.pi)


class Expert(abc.ABC):
    """What every task's expert shares: bound to one env family, called with nothing for the next action, and
    degraded by the skill knob the same way (hesitations stop the hand, noise jitters it, grasps may miss)."""

    ENV: ClassVar[type[Task]]  # the env family it drives
    ENV_NAME: ClassVar[str]  # that family, as a bad env's error names it
    MOTION_DIMS: ClassVar[int]  # the leading action entries that move the hand
    NOISE_SCALE: ClassVar[float | np.ndarray] = 1.0  # action_noise per motion entry, in the env's action units

    def __init__(self, env: Any, config: ExpertConfig | dict[str, float] | None = None, seed: int | None = None):
        unwrapped = getattr(env, "unwrapped", env)
        if not isinstance(unwrapped, self.ENV):
            raise TypeError(f"env: expected a vla_recover {self.ENV_NAME}, got {type(unwrapped).__name__}")
        self.env = unwrapped
        self.config = validate_config(ExpertConfig, config, source="expert")
        self.reset(seed)

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self._hesitation_left = 0
        self._reset_skills()
        self._new_attempt()

    def __call__(self) -> np.ndarray:
        action = self._plan()
        motion = slice(0, self.MOTION_DIMS)
        if self._hesitation_left > 0:
            self._hesitation_left -= 1
            action[motion] = 0.0
        elif self.config.hesitation_prob and self.rng.random() < self.config.hesitation_prob:
            self._hesitation_left = self.config.hesitation_steps - 1
            action[motion] = 0.0
        if self.config.action_noise:
            action[motion] += self.rng.normal(0.0, self.config.action_noise, size=self.MOTION_DIMS) * self.NOISE_SCALE
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    @abc.abstractmethod
    def _plan(self) -> np.ndarray:
        """The clean action for the current state."""

    @abc.abstractmethod
    def _reset_skills(self) -> None:
        """Forget the skills' state (a grasp in progress, a held object) before an episode."""

    @abc.abstractmethod
    def _new_attempt(self) -> None:
        """Start a grasp attempt: draw whether it misses."""


class ScriptedExpert(Expert):
    """An MJCF task's expert. Call with nothing (it reads the env) to get the next action, shape (5,)."""

    ENV = MujocoTaskEnv
    ENV_NAME = "MJCF task"
    MOTION_DIMS = 4
    GRASP_MISS_OFFSET = 0.045  # m along the gripper's x axis: the fingers close beside the object
    env: MujocoTaskEnv

    def _reset_skills(self) -> None:
        self._closing_steps = 0
        self._held_steps = 0
        self._miss_offset = np.zeros(2)

    # -- building blocks -----------------------------------------------------------------------------------------
    def move(self, target: np.ndarray, yaw: float | None, grip: float) -> np.ndarray:
        """Action that drives the tool centre point to ``target`` (and the gripper to ``yaw``)."""
        env = self.env
        delta = (np.asarray(target) - env.tcp_pos) / env.MAX_TRANSLATION
        scale = max(1.0, float(np.max(np.abs(delta))))  # keep the direction when saturating
        dyaw = 0.0 if yaw is None else wrap_angle(yaw - env.gripper_yaw) / env.MAX_ROTATION
        return np.array([*(delta / scale), np.clip(dyaw, -1.0, 1.0), grip], dtype=np.float64)

    def aligned_yaw(self, object_yaw: float, symmetry: float = np.pi / 2) -> float:
        """The gripper yaw closest to the current one that matches ``object_yaw`` modulo ``symmetry``."""
        current = self.env.gripper_yaw
        offset = (object_yaw - current + symmetry / 2) % symmetry - symmetry / 2
        return current + offset

    def _new_attempt(self) -> None:
        if self.config.grasp_miss_prob and self.rng.random() < self.config.grasp_miss_prob:
            self._miss_offset = np.array([self.GRASP_MISS_OFFSET, 0.0]) * self.rng.choice([-1.0, 1.0])
        else:
            self._miss_offset = np.zeros(2)

    def pick(self, body: str, grasp_dz: float, settle_steps: int = 2) -> np.ndarray | None:
        """Approach, open, descend and close on ``body``; None once it is held firmly (the caller carries it).

        ``grasp_dz`` is the height of the grasp point above the body's origin.
        """
        env = self.env
        if env.is_grasped(body):
            self._closing_steps = 0
            self._held_steps += 1
            if self._held_steps > settle_steps:
                return None
            return self.move(env.tcp_pos, None, 1.0)
        self._held_steps = 0
        tcp = env.tcp_pos
        yaw = self.aligned_yaw(env.body_yaw(body))
        c, s = np.cos(yaw), np.sin(yaw)
        miss_world = np.array([c * self._miss_offset[0], s * self._miss_offset[0]])
        grasp = env.body_pos(body) + np.array([*miss_world, grasp_dz])
        hover = grasp + np.array([0.0, 0.0, 0.07])

        if self._closing_steps:
            self._closing_steps += 1
            if env.finger_opening < 0.004 or self._closing_steps > 12:  # closed on nothing: try again
                self._closing_steps = 0
                self._new_attempt()
                return self.move(tcp + np.array([0.0, 0.0, 0.03]), None, -1.0)
            return self.move(tcp, None, 1.0)

        xy_error = float(np.linalg.norm(tcp[:2] - grasp[:2]))
        yaw_error = abs(wrap_angle(yaw - env.gripper_yaw))
        if xy_error > 0.008 or yaw_error > 0.08:
            if tcp[2] < hover[2] - 0.015 and xy_error > 0.015:
                return self.move(np.array([tcp[0], tcp[1], hover[2]]), yaw, -1.0)  # rise before moving across
            return self.move(hover, yaw, -1.0)
        if env.finger_opening < 0.9 * FINGER_OPEN:
            return self.move(tcp, yaw, -1.0)
        if tcp[2] > grasp[2] + 0.004:
            return self.move(grasp, yaw, -1.0)
        self._closing_steps = 1
        return self.move(grasp, yaw, 1.0)
