"""Tasks behind the gymnasium API, registered as ``vla_recover/<Name>-v0``, with scripted experts.

>>> import gymnasium as gym, vla_recover.envs
>>> env = gym.make("vla_recover/LiftCube-v0", config={"cameras": ["front"]})

A task of your own joins them with :func:`register_task` (examples/extending/new_task.py).
"""

from __future__ import annotations

import math
import os
from typing import Any

# Headless offscreen rendering by default; EGL needs a GPU device node that containers often lack.
os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import gymnasium as gym

from vla_recover.config import load_yaml, validate_config
from vla_recover.envs.config import TaskConfig
from vla_recover.envs.expert import ExpertConfig
from vla_recover.envs.robosuite.config import (
    RobosuiteLiftConfig,
    RobosuiteNutAssemblySquareConfig,
    RobosuitePickPlaceCanConfig,
)
from vla_recover.envs.task import Task
from vla_recover.envs.tasks.lift import LiftCubeConfig
from vla_recover.envs.tasks.peg_insert import PegInsertConfig
from vla_recover.envs.tasks.pick_place import PickPlaceBinConfig
from vla_recover.registry import Registry, UnknownNameError

__all__ = [
    "EXPERTS",
    "TASKS",
    "Task",
    "checked_task",
    "control_period",
    "gym_id",
    "load_task_config",
    "make_expert",
    "make_task",
    "register_task",
    "resolve_task_name",
    "task_features",
]

TASKS: Registry[TaskConfig] = Registry("task")
EXPERTS: Registry[ExpertConfig] = Registry("scripted expert")

_NAMESPACE = "vla_recover"
_BUILTIN: list[tuple[str, type[TaskConfig], str, str, str]] = [
    ("LiftCube", LiftCubeConfig, "tasks.lift:LiftCubeEnv", "tasks.lift:LiftCubeExpert",
     "simple: grasp a cube and lift it"),
    ("PickPlaceBin", PickPlaceBinConfig, "tasks.pick_place:PickPlaceBinEnv", "tasks.pick_place:PickPlaceBinExpert",
     "long-horizon: put the cube the instruction names into a bin"),
    ("PegInsert", PegInsertConfig, "tasks.peg_insert:PegInsertEnv", "tasks.peg_insert:PegInsertExpert",
     "contact-rich: insert a square peg into a hole, 2 mm clearance"),
    ("RobosuiteLift", RobosuiteLiftConfig, "robosuite.env:RobosuiteLiftEnv", "robosuite.experts:LiftExpert",
     "robosuite Lift (Panda, OSC_POSE); robosuite extra"),
    ("RobosuitePickPlaceCan", RobosuitePickPlaceCanConfig, "robosuite.env:RobosuitePickPlaceCanEnv",
     "robosuite.experts:PickPlaceCanExpert", "robosuite PickPlaceCan (Panda); robosuite extra"),
    ("RobosuiteNutAssemblySquare", RobosuiteNutAssemblySquareConfig, "robosuite.env:RobosuiteNutAssemblySquareEnv",
     "robosuite.experts:NutAssemblySquareExpert", "robosuite NutAssemblySquare (Panda); robosuite extra"),
]  # fmt: skip


def gym_id(name: str) -> str:
    return f"{_NAMESPACE}/{name}-v0"


def resolve_task_name(task: str) -> str:
    """Accept ``LiftCube`` or ``vla_recover/LiftCube-v0``; raise listing the valid ids otherwise."""
    name = task
    if task.startswith(f"{_NAMESPACE}/") and task.endswith("-v0"):
        name = task[len(_NAMESPACE) + 1 : -3]
    if name not in TASKS:
        valid = ", ".join(gym_id(n) for n in TASKS.names())
        raise UnknownNameError(f"unknown task {task!r}; valid task ids: {valid}")
    return name


def checked_task(task: str, task_config: Any = None) -> str:
    """For config validators: the task's registered name once ``task_config`` validates against its config class;
    a ``ValueError`` naming the ``task`` field when the task is unknown."""
    try:
        name = resolve_task_name(task)
    except UnknownNameError as exc:
        raise ValueError(f"task: {exc.args[0]}") from None
    load_task_config(name, task_config or None)
    return name


def control_period(task: str, task_config: dict[str, Any]) -> float:
    """Seconds per control step: the task's ``control_freq`` setting where it has one, else its class's rate."""
    task_cls = TASKS.get(resolve_task_name(task)).load()
    return 1.0 / float(task_config.get("control_freq", task_cls.CONTROL_HZ))


def task_features(env: gym.Env[Any, Any]) -> tuple[dict[str, tuple[int, ...]], int]:
    """A task env's observation features (key → shape) and its action size: what a robot running it declares."""
    spaces = env.observation_space
    assert isinstance(spaces, gym.spaces.Dict), f"a task's observation space is a Dict, got {spaces}"
    observation = {key: tuple(space.shape or ()) for key, space in spaces.spaces.items()}
    return observation, math.prod(env.action_space.shape or ())


def load_task_config(task: str, config: Any = None) -> TaskConfig:
    """Validate ``config`` (a dict, a config object, a YAML path or None) against the task's config class."""
    entry = TASKS.get(resolve_task_name(task))
    source = f"task {entry.name}"
    if isinstance(config, str | os.PathLike):
        source, config = str(config), load_yaml(os.fspath(config))
    return validate_config(entry.config_cls, config, source=source)


def make_task(task: str, config: Any = None, render_mode: str | None = None) -> gym.Env[Any, Any]:
    """Build a task by name or gym id with a validated config."""
    name = resolve_task_name(task)
    return gym.make(gym_id(name), config=load_task_config(name, config), render_mode=render_mode)


def make_expert(
    task: str,
    env: gym.Env[Any, Any],
    config: ExpertConfig | dict[str, Any] | None = None,
    seed: int | None = None,
) -> Any:
    """The task's scripted expert bound to ``env``; call it to get the next action."""
    expert_cls = EXPERTS.get(resolve_task_name(task)).load()
    return expert_cls(env, validate_config(ExpertConfig, config, source="expert"), seed=seed)


def register_task(
    name: str, config_cls: type[TaskConfig], env_target: str, expert_target: str, summary: str = ""
) -> None:
    """Make a task known by ``name``: to `make_task`, `make_expert` and every config that names a task, and to
    gymnasium as ``gym_id(name)``.

    ``env_target`` and ``expert_target`` are ``"package.module:Class"`` strings, imported when first used; the env
    class takes ``config`` (a ``config_cls``) and ``render_mode``, the expert class ``(env, expert config, seed)``.
    A name already registered is refused.
    """
    for field, target in (("env_target", env_target), ("expert_target", expert_target)):
        module, sep, attr = target.partition(":")
        if not (module and sep and attr):
            raise ValueError(f"{field}: got {target!r}; expected 'package.module:Class'")
    TASKS.register(name, config_cls, env_target, summary)
    EXPERTS.register(name, ExpertConfig, expert_target, summary)
    if gym_id(name) not in gym.registry:
        # No gymnasium TimeLimit: each task truncates at its own configured horizon, which survives
        # get_state/set_state where a wrapper's step counter would not.
        gym.register(id=gym_id(name), entry_point=env_target, disable_env_checker=True)


def _register_builtin() -> None:
    for name, config_cls, env_target, expert_target, summary in _BUILTIN:
        register_task(name, config_cls, f"{__name__}.{env_target}", f"{__name__}.{expert_target}", summary)


_register_builtin()
