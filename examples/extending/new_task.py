"""A new task: LiftCubeTo, lift the cube to a target point in the air, built on LiftCube's scene and expert skills.

It shows the four parts every task has: a config class (fields with descriptions, validated when the task is
built), an env class (scene, randomisation, observation, ground truth), a scripted expert and one
`register_task` call, after which `make_task`, `make_expert`, the collect/fleet/loop configs and gymnasium's
``gym.make("vla_recover/LiftCubeTo-v0")`` all know the task. Registering when the module is imported, as here,
also makes it known to the worker processes that collecting and the fleet start: they import the main script again.

Run it from the repository root:

    python examples/extending/new_task.py
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from vla_recover.envs import gym_id, make_expert, make_task, register_task
from vla_recover.envs.base import TaskStatus
from vla_recover.envs.expert import ScriptedExpert
from vla_recover.envs.tasks.lift import CUBE_HALF, GRASP_DZ, LiftCubeConfig, LiftCubeEnv

NAME = "LiftCubeTo"


class LiftCubeToConfig(LiftCubeConfig):
    """LiftCube's fields (``lift_height`` is now the target's height above the cube's start) and the target's."""

    target_range: float = Field(
        0.06, ge=0.0, le=0.1, description="half-width of the square around the cube's start the target is drawn in, m"
    )
    tolerance: float = Field(
        0.015, gt=0.0, le=0.05, description="m the held cube's centre may be from the target to succeed"
    )


class LiftCubeToEnv(LiftCubeEnv):
    """LiftCube's scene and phases; the episode succeeds once the held cube is within ``tolerance`` of the target."""

    CONFIG = LiftCubeToConfig
    INSTRUCTIONS = (
        "lift the red cube to the target",
        "raise the red block to the target point",
        "pick up the cube and hold it at the target",
    )
    # the policy must see where the target is: it joins the object part of obs["state"]
    STATE_LABELS_OBJECT: ClassVar[tuple[str, ...]] = (
        *LiftCubeEnv.STATE_LABELS_OBJECT,
        "target_x",
        "target_y",
        "target_z",
    )
    config: LiftCubeToConfig

    @property
    def target(self) -> np.ndarray:
        return np.array(self._task["target"])

    def _randomize(self, rng: np.random.Generator) -> dict[str, Any]:
        task = super()._randomize(rng)  # places the cube and draws the instruction
        start = self.data.joint("cube").qpos[:3].copy()  # body positions update only after reset's mj_forward
        r = self.config.target_range
        target = start + [rng.uniform(-r, r), rng.uniform(-r, r), self.config.lift_height]
        # plain floats: the task dict is part of the saved state (get_state / set_state)
        task.update(target=target.tolist(), carry0=float(np.linalg.norm(target - start)))
        return task

    def _object_state(self) -> np.ndarray:
        return np.concatenate([super()._object_state(), self.target])

    def _evaluate(self) -> TaskStatus:
        cube = self.data.xpos[self._object_body]
        if self.is_grasped():  # the last phase, "lift": carry the cube to the target
            distance = float(np.linalg.norm(cube - self.target))
            done = 1.0 - distance / self._task["carry0"]
            return TaskStatus(2, float(np.clip(done, 0.0, 1.0)), distance <= self.config.tolerance)
        return self._approach_status(cube + np.array([0.0, 0.0, GRASP_DZ]), CUBE_HALF)


class LiftCubeToExpert(ScriptedExpert):
    """The shared pick skill, then a straight carry to the target."""

    def _plan(self) -> np.ndarray:
        action = self.pick("cube", GRASP_DZ)  # approach, open, descend, close; None once the cube is held
        if action is not None:
            return action
        env = self.env
        assert isinstance(env, LiftCubeToEnv)
        # the tool centre point holds the cube GRASP_DZ above its centre
        return self.move(env.target + [0.0, 0.0, GRASP_DZ], None, 1.0)


# Targets are "module:Class" strings, imported when first used; __name__ keeps them right whether this file runs
# as a script (__main__) or is imported.
register_task(
    NAME,
    LiftCubeToConfig,
    f"{__name__}:LiftCubeToEnv",
    f"{__name__}:LiftCubeToExpert",
    "simple: lift a cube to a target point in the air",
)


def main(seeds: tuple[int, ...] = (0, 1, 2)) -> list[dict[str, Any]]:
    """Run the perfect scripted expert on LiftCubeTo once per seed; print and return each episode's outcome."""
    env = make_task(NAME)
    outcomes = []
    try:
        for seed in seeds:
            _, info = env.reset(seed=seed)
            expert = make_expert(NAME, env, seed=seed)
            steps, done = 0, False
            while not done:
                _, _, terminated, truncated, info = env.step(expert())
                steps, done = steps + 1, terminated or truncated
            outcomes.append({"seed": seed, "success": info["is_success"], "steps": steps, "progress": info["progress"]})
            print(f"{gym_id(NAME)} seed {seed}: {'success' if info['is_success'] else 'failure'} in {steps} steps")
    finally:
        env.close()
    return outcomes


if __name__ == "__main__":
    main()
