"""PickPlaceBin: put the cube the instruction names (red or blue) into a bin. The long-horizon task.

The state lists both cubes in a fixed order (red, then blue), so only the instruction says which one to move:
a policy has to use language to solve it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from vla_recover.envs.base import MujocoTaskEnv, TaskStatus
from vla_recover.envs.config import MujocoTaskConfig
from vla_recover.envs.expert import ScriptedExpert
from vla_recover.envs.mjcf import box_body, scene_xml

__all__ = ["PickPlaceBinConfig", "PickPlaceBinEnv", "PickPlaceBinExpert"]

CUBE_HALF = 0.02
GRASP_DZ = 0.005
COLORS = ("red", "blue")
BIN_INNER = 0.065  # half-width of the bin's floor
BIN_WALL = 0.05  # wall height above the table
BIN_FLOOR = 0.005
LIFT_CLEAR = 0.10  # cube centre height above which it clears the bin walls
CARRY_Z = 0.13  # cube centre height the expert carries at


class PickPlaceBinConfig(MujocoTaskConfig):
    horizon: int = Field(200, ge=1, le=100_000, description="steps before the episode is truncated")
    min_cube_separation: float = Field(0.08, ge=0.06, le=0.2, description="m between the two cubes at spawn")


def _bin_xml() -> str:
    t, h, w = 0.005, BIN_WALL / 2, BIN_INNER + 0.005
    walls = [
        (f"0 {w} {h}", f"{w + t} {t} {h}"),
        (f"0 {-w} {h}", f"{w + t} {t} {h}"),
        (f"{w} 0 {h}", f"{t} {w} {h}"),
        (f"{-w} 0 {h}", f"{t} {w} {h}"),
    ]
    geoms = "".join(
        f'<geom name="bin_wall{i}" type="box" pos="{pos}" size="{size}" material="wood"/>'
        for i, (pos, size) in enumerate(walls)
    )
    floor = (
        f'<geom name="bin_floor" type="box" pos="0 0 {BIN_FLOOR / 2}" size="{w} {w} {BIN_FLOOR / 2}" material="wood"/>'
    )
    return f'<body name="bin" mocap="true" pos="0 0.12 0">{floor}{geoms}</body>'


class PickPlaceBinEnv(MujocoTaskEnv):
    CONFIG = PickPlaceBinConfig
    PHASES = ("reach", "grasp", "lift", "carry", "place")
    OBJECT = "red_cube"
    INSTRUCTIONS = (
        "put the {color} cube in the bin",
        "place the {color} block into the bin",
        "pick up the {color} cube and drop it in the box",
        "move the {color} cube into the container",
        "put the {color} block in the bin",
    )
    STATE_LABELS_OBJECT: ClassVar[tuple[str, ...]] = (
        "red_x", "red_y", "red_z", "red_qw", "red_qx", "red_qy", "red_qz",
        "blue_x", "blue_y", "blue_z", "blue_qw", "blue_qx", "blue_qy", "blue_qz",
        "bin_x", "bin_y", "bin_z",
    )  # fmt: skip
    config: PickPlaceBinConfig

    def _scene_xml(self) -> str:
        cubes = "".join(
            box_body(f"{color}_cube", (0.0, -0.05 * i, CUBE_HALF), (CUBE_HALF,) * 3, color)
            for i, color in enumerate(COLORS)
        )
        return scene_xml("pick_place_bin", cubes, _bin_xml(), camera_size=self.config.image_size)

    def _bind_ids(self) -> None:
        super()._bind_ids()
        self._cube_bodies = [self.model.body(f"{c}_cube").id for c in COLORS]
        self._bin_mocap = self.model.body_mocapid[self.model.body("bin").id]

    def _randomize(self, rng: np.random.Generator) -> dict[str, Any]:
        r = self.config.object_xy_range
        bin_pos = np.array([rng.uniform(-0.06, 0.06), rng.uniform(0.11, 0.14), 0.0])
        self._place_mocap("bin", bin_pos, 0.0)
        first = np.array([rng.uniform(-r, r), rng.uniform(-0.12 - r / 2, -0.12 + r / 2)])
        for _ in range(100):
            second = np.array([rng.uniform(-r - 0.04, r + 0.04), rng.uniform(-0.17, -0.05)])
            if np.linalg.norm(second - first) >= self.config.min_cube_separation:
                break
        spots = [first, second] if rng.random() < 0.5 else [second, first]
        yaw_range = self.config.object_yaw_range
        for color, xy in zip(COLORS, spots, strict=True):
            self._place_free_body(f"{color}_cube", np.array([*xy, CUBE_HALF]), rng.uniform(-1, 1) * yaw_range)
        color = COLORS[int(rng.integers(len(COLORS)))]
        target_xy = spots[COLORS.index(color)]
        return {
            "instruction": self._choose_instruction(rng, color=color),
            "object": f"{color}_cube",
            "cube_z0": CUBE_HALF,
            "reach0": self._reach_distance(np.array([*target_xy, CUBE_HALF + GRASP_DZ])),
            "carry0": max(float(np.linalg.norm(target_xy - bin_pos[:2])), 1e-3),
        }

    def _object_state(self) -> np.ndarray:
        d = self.data
        parts = [np.concatenate([d.xpos[b], d.xquat[b]]) for b in self._cube_bodies]
        return np.concatenate([*parts, d.mocap_pos[self._bin_mocap]])

    @property
    def bin_pos(self) -> np.ndarray:
        return self.data.mocap_pos[self._bin_mocap].copy()

    def in_bin_xy(self, pos: np.ndarray) -> bool:
        offset = np.abs(pos[:2] - self.data.mocap_pos[self._bin_mocap][:2])
        return bool(np.all(offset < BIN_INNER - 0.01))

    def _evaluate(self) -> TaskStatus:
        cube = self.data.xpos[self._object_body]
        grasped = self.is_grasped()
        if self.in_bin_xy(cube):
            if cube[2] < BIN_WALL and not grasped:
                return TaskStatus(4, 1.0, True)
            lowered = (CARRY_Z - cube[2]) / (CARRY_Z - BIN_FLOOR - CUBE_HALF)
            return TaskStatus(4, float(np.clip(lowered, 0.0, 1.0)), False)
        if grasped and cube[2] >= LIFT_CLEAR:
            remaining = np.linalg.norm(cube[:2] - self.bin_pos[:2]) / self._task["carry0"]
            return TaskStatus(3, float(np.clip(1.0 - remaining, 0.0, 1.0)), False)
        if grasped:
            rise = (cube[2] - self._task["cube_z0"]) / (LIFT_CLEAR - self._task["cube_z0"])
            return TaskStatus(2, float(np.clip(rise, 0.0, 1.0)), False)
        return self._approach_status(cube + np.array([0.0, 0.0, GRASP_DZ]), CUBE_HALF)


class PickPlaceBinExpert(ScriptedExpert):
    def _plan(self) -> np.ndarray:
        env = self.env
        assert isinstance(env, PickPlaceBinEnv)
        cube_name = env._task["object"]
        cube = env.body_pos(cube_name)
        tcp = env.tcp_pos
        if env.in_bin_xy(cube) and not env.is_grasped(cube_name) and cube[2] < BIN_WALL:
            return self.move(np.array([tcp[0], tcp[1], CARRY_Z + 0.05]), None, -1.0)  # done: back off
        action = self.pick(cube_name, GRASP_DZ)
        if action is not None:
            return action
        hand_offset = tcp - cube  # carry the cube, not the hand, to the target
        above_bin = np.array([*env.bin_pos[:2], CARRY_Z])
        if cube[2] < LIFT_CLEAR + 0.01 and not env.in_bin_xy(cube):
            return self.move(np.array([tcp[0], tcp[1], CARRY_Z + hand_offset[2]]), None, 1.0)
        if np.linalg.norm(cube[:2] - above_bin[:2]) > 0.01:
            return self.move(above_bin + hand_offset, None, 1.0)
        release_z = BIN_FLOOR + CUBE_HALF + 0.015
        if cube[2] > release_z + 0.005:
            return self.move(np.array([*above_bin[:2], release_z]) + hand_offset, None, 1.0)
        return self.move(tcp, None, -1.0)
