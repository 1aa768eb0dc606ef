"""`SimRobot`: any registered task behind the `Robot` interface, so the deployment path (safety filter, fleet
hardware slots, the policy node) runs end to end in MuJoCo before it meets an arm.

``connect`` builds the env and resets it with ``seed``; ``home`` resets it again (the next seed); ``send_action``
steps the sim by one control period and returns the action the task applied. The latest step's info (phase,
progress, success) is kept in `SimRobot.info` for tests and recording.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_recover.hardware.robot import Robot, RobotError

__all__ = ["SimRobot"]


class SimRobot(Robot):
    def __init__(self, task: str, task_config: Any = None, seed: int = 0, name: str = "sim0") -> None:
        from vla_recover.envs import TASKS, resolve_task_name

        self.task, self.task_config, self.seed, self.name = resolve_task_name(task), task_config, seed, name
        task_cls = TASKS.get(self.task).load()
        self.control_hz = float(task_cls.CONTROL_HZ)
        self._env: Any = None
        self._spaces = self._probe_spaces()
        self.info: dict[str, Any] = {}

    def _probe_spaces(self) -> tuple[dict[str, tuple[int, ...]], int]:
        """The features, read from a throwaway env: declared before connecting, as a real robot's are."""
        from vla_recover.envs import make_task, task_features

        env = make_task(self.task, self.task_config)
        try:
            return task_features(env)
        finally:
            env.close()

    @property
    def observation_features(self) -> dict[str, tuple[int, ...]]:
        return dict(self._spaces[0])

    @property
    def action_features(self) -> dict[str, tuple[int, ...]]:
        return {"action": (self._spaces[1],)}

    @property
    def is_connected(self) -> bool:
        return self._env is not None

    def connect(self) -> None:
        from vla_recover.envs import make_task

        if self._env is None:
            self._env = make_task(self.task, self.task_config)
            self._observation, self.info = self._env.reset(seed=self.seed)

    def disconnect(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None

    def _require_connection(self) -> Any:
        if self._env is None:
            raise RobotError(f"{self.name}: not connected")
        return self._env

    def get_observation(self) -> dict[str, np.ndarray]:
        self._require_connection()
        return {key: np.array(value) for key, value in self._observation.items()}

    def send_action(self, action: np.ndarray) -> np.ndarray:
        env = self._require_connection()
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if action.shape != (self._spaces[1],) or not np.all(np.isfinite(action)):
            raise RobotError(f"{self.name}: action must be {self._spaces[1]} finite numbers, got {action.tolist()}")
        sent = np.clip(action, env.action_space.low, env.action_space.high)
        self._observation, _, terminated, truncated, self.info = env.step(sent)
        self.info = {**self.info, "terminated": terminated, "truncated": truncated}
        return sent

    def home(self) -> dict[str, np.ndarray]:
        env = self._require_connection()
        self.seed += 1
        self._observation, self.info = env.reset(seed=self.seed)
        return self.get_observation()
