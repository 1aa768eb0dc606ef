"""The task contract (`vla_recover.envs.task.Task`), checked on every registered task, robosuite's included.

robosuite takes seconds to build a scene, so each task's env is built once for the module; its tasks skip where
the robosuite extra is missing.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from vla_recover.envs import TASKS, Task, gym_id, make_expert, make_task
from vla_recover.envs.robosuite.config import RobosuiteConfig
from vla_recover.envs.task import INFO_KEYS

HAS_ROBOSUITE = importlib.util.find_spec("robosuite") is not None
NOISE = {"failures": [{"kind": "actuator_noise", "at_step": 3, "duration": 10}]}  # draws on the env's generator


def _param(name: str) -> Any:
    if issubclass(TASKS.get(name).config_cls, RobosuiteConfig):
        needs = pytest.mark.skipif(not HAS_ROBOSUITE, reason="the robosuite extra")
        return pytest.param(name, marks=[needs, pytest.mark.robosuite])
    return name


EVERY_TASK = [_param(name) for name in TASKS.names()]


@pytest.fixture(scope="module")
def envs() -> Iterator[dict[str, Any]]:
    made: dict[str, Any] = {}
    yield made
    for env in made.values():
        env.close()


def _env(envs: dict[str, Any], task: str) -> Any:
    if task not in envs:
        envs[task] = make_task(task, NOISE)
    return envs[task]


def test_every_builtin_task_is_registered_with_gymnasium() -> None:
    assert len(TASKS) >= 6
    for name in TASKS.names():
        assert gym_id(name) in gym.registry


@pytest.mark.parametrize("task", EVERY_TASK)
def test_reset_and_step_keep_the_contract(envs: dict[str, Any], task: str) -> None:
    env = _env(envs, task)
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, Task) and unwrapped.PHASES
    assert env.action_space.shape == (unwrapped.GRIPPER_INDEX + 1,)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    assert set(INFO_KEYS) <= set(info) and info["step"] == 0 and not info["failures"]
    assert info["instruction"] and info["instruction"] == unwrapped.instruction
    assert len(unwrapped.state_labels) == obs["state"].shape[0] and 0 < unwrapped.robot_state_size < len(obs["state"])
    obs, reward, terminated, truncated, info = env.step(np.zeros(env.action_space.shape, np.float32))
    assert env.observation_space.contains(obs)
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert info["phase"] == unwrapped.PHASES[info["phase_index"]] == unwrapped.phase
    assert 0.0 <= info["progress"] <= 1.0 and info["step"] == 1
    with pytest.raises(ValueError, match="action"):
        env.step(np.full(env.action_space.shape, np.nan))


@pytest.mark.parametrize("task", EVERY_TASK)
def test_a_seed_fixes_the_episode_and_another_seed_changes_it(envs: dict[str, Any], task: str) -> None:
    env = _env(envs, task)
    actions = np.random.default_rng(1).uniform(-1, 1, size=(10, *env.action_space.shape))

    def rollout(seed: int) -> tuple[np.ndarray, str]:
        obs, info = env.reset(seed=seed)
        return np.stack([obs["state"]] + [env.step(a)[0]["state"] for a in actions]), info["instruction"]

    (first, said), (again, said_again), (other, _) = rollout(7), rollout(7), rollout(8)
    assert np.array_equal(first, again) and said == said_again
    assert not np.array_equal(first[0], other[0])  # another seed places the objects elsewhere


@pytest.mark.parametrize("task", EVERY_TASK)
def test_restore_replays_bit_for_bit(envs: dict[str, Any], task: str) -> None:
    env = _env(envs, task)
    env.reset(seed=3)
    expert = make_expert(task, env, seed=3)
    for _ in range(10):
        env.step(expert())
    saved = env.unwrapped.get_state()
    actions = np.random.default_rng(0).uniform(-1, 1, size=(12, *env.action_space.shape))
    actions[:, -1] = np.sign(actions[:, -1])  # the gripper command
    first = []
    for a in actions:
        obs, _, _, _, info = env.step(a)
        first.append((obs["state"], info["progress"], info["phase"]))
    for _ in range(5):  # wander off, then come back
        env.step(env.action_space.sample())
    obs, info = env.unwrapped.set_state(saved)
    assert info["step"] == saved.step == 10
    for a, (state, progress, phase) in zip(actions, first, strict=True):
        obs, _, _, _, info = env.step(a)
        assert np.array_equal(obs["state"], state)
        assert info["progress"] == progress and info["phase"] == phase


@pytest.mark.parametrize("task", EVERY_TASK)
def test_the_expert_acts_within_the_action_space(envs: dict[str, Any], task: str) -> None:
    env = _env(envs, task)
    env.reset(seed=5)
    expert = make_expert(task, env, seed=5)
    for _ in range(20):
        action = np.asarray(expert(), dtype=np.float32)
        assert env.action_space.contains(action)
        env.step(action)
