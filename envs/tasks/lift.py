"""LiftCube: grasp a cube and lift it. The simple task: three phases, one object."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from vla_recover.envs.base import MujocoTaskEnv, TaskStatus
from vla_recover.envs.config import MujocoTaskConfig
from vla_recover.envs.expert import ScriptedExpert
from vla_recover.envs.mjcf import box_body, scene_xml

__all__ = ["LiftCubeConfig", "LiftCubeEnv", "LiftCubeExpert"]

CUBE_HALF = 0.02
GRASP_DZ = 0.005  # the fingertips stay clear of the table


class LiftCubeConfig(MujocoTaskConfig):
    horizon: int = Field(100, ge=1, le=100_000, description="steps before the episode is truncated")
    lift_height: float = Field(0.08, gt=0.0, le=0.2, description="m the cube must rise to succeed")


class LiftCubeEnv(MujocoTaskEnv):
    CONFIG = LiftCubeConfig
    PHASES = ("reach", "grasp", "lift")
    OBJECT = "cube"
    INSTRUCTIONS = (
        "lift the red cube",
        "pick up the red block",
        "grab the cube and raise it off the table",
        "lift the block up",
        "pick the red cube up from the table",
    )
    STATE_LABELS_OBJECT: ClassVar[tuple[str, ...]] = (
        "cube_x", "cube_y", "cube_z", "cube_qw", "cube_qx", "cube_qy", "cube_qz",
        "cube_to_tcp_x", "cube_to_tcp_y", "cube_to_tcp_z",
    )  # fmt: skip
    config: LiftCubeConfig

    def _scene_xml(self) -> str:
        cube = box_body("cube", (0.0, 0.0, CUBE_HALF), (CUBE_HALF,) * 3, "red")
        return scene_xml("lift_cube", cube, camera_size=self.config.image_size)

    def _randomize(self, rng: np.random.Generator) -> dict[str, Any]:
        r = self.config.object_xy_range
        pos = np.array([rng.uniform(-r, r), rng.uniform(-r, r), CUBE_HALF])
        self._place_free_body("cube", pos, rng.uniform(-1, 1) * self.config.object_yaw_range)
        reach0 = self._reach_distance(pos + [0.0, 0.0, GRASP_DZ])
        return {"instruction": self._choose_instruction(rng), "cube_z0": float(pos[2]), "reach0": reach0}

    def _object_state(self) -> np.ndarray:
        body = self._object_body
        pos = self.data.xpos[body]
        return np.concatenate([pos, self.data.xquat[body], self.data.site_xpos[self._tcp_site] - pos])

    def _evaluate(self) -> TaskStatus:
        cube = self.data.xpos[self._object_body]
        if self.is_grasped():
            rise = (cube[2] - self._task["cube_z0"]) / self.config.lift_height
            return TaskStatus(2, float(np.clip(rise, 0.0, 1.0)), bool(rise >= 1.0))
        return self._approach_status(cube + np.array([0.0, 0.0, GRASP_DZ]), CUBE_HALF)


class LiftCubeExpert(ScriptedExpert):
    def _plan(self) -> np.ndarray:
        env = self.env
        action = self.pick("cube", GRASP_DZ)
        if action is not None:
            return action
        assert isinstance(env.config, LiftCubeConfig)
        target = env.tcp_pos
        target[2] = GRASP_DZ + env._task["cube_z0"] + env.config.lift_height + 0.03
        return self.move(target, None, 1.0)
