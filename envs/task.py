"""The contract every task keeps, whatever simulates it: `Task`.

A task is a gymnasium env over ``{"state": ..., "images.<camera>": ...}`` observations and normalised actions in
[-1, 1] whose last entry is the gripper command (``GRIPPER_INDEX``). Beyond gymnasium it keeps:

- **ground truth** in every ``info`` (``reset`` and ``step``): ``phase`` (a name in ``PHASES``), ``phase_index``,
  ``progress`` in [0, 1], ``is_success``, ``failure`` (the kind injected at this step, or ""), ``failures`` (every
  injection so far), ``instruction`` and ``step``;
- **an instruction** per episode, drawn with the seed;
- **exact save and restore**: ``set_state(get_state())`` followed by the same actions reproduces the trajectory bit
  for bit (the physics' full integration state, the step counter, the random generator and the failure injector);
- **a scripted expert**, registered beside it (`vla_recover.envs.register_task`).

`tests/envs/test_task_contract.py` checks all of it on every registered task.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

__all__ = ["INFO_KEYS", "SimState", "Task"]

INFO_KEYS: tuple[str, ...] = (
    "phase", "phase_index", "progress", "is_success", "failure", "failures", "instruction", "step",
)  # fmt: skip


@dataclass(frozen=True)
class SimState:
    """Everything needed to put a task back exactly where it was."""

    physics: np.ndarray
    step: int
    rng: dict[str, Any]
    task: dict[str, Any] = field(default_factory=dict)


class Task(gym.Env[dict[str, np.ndarray], np.ndarray], abc.ABC):
    PHASES: ClassVar[tuple[str, ...]] = ()  # in the order an episode goes through them
    GRIPPER_INDEX: ClassVar[int]  # the action's last entry: the gripper command, +1 closed
    CONTROL_HZ: ClassVar[int] = 20  # control steps a second, unless the task's config sets control_freq

    @property
    @abc.abstractmethod
    def instruction(self) -> str:
        """This episode's instruction (drawn at reset)."""

    @property
    @abc.abstractmethod
    def phase(self) -> str:
        """The phase the episode is in now: one of ``PHASES``."""

    @property
    @abc.abstractmethod
    def state_labels(self) -> tuple[str, ...]:
        """Names of the entries of ``obs["state"]``, in order."""

    @property
    @abc.abstractmethod
    def robot_state_size(self) -> int:
        """How many leading entries of ``obs["state"]`` describe the robot; the rest describe the objects."""

    @abc.abstractmethod
    def get_state(self) -> SimState:
        """The exact state, for `set_state`."""

    @abc.abstractmethod
    def set_state(self, state: SimState) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Put the task back where `get_state` was called; returns the observation and info there."""
