"""PegInsert: pick up a square peg and insert it into a square hole with 2 mm clearance per side.

The contact-rich precision task: the peg's position must be within the clearance and its yaw within about
ten degrees (modulo 90) of the hole's before it goes in, and a misaligned peg jams on the fixture.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from vla_recover.envs.base import MujocoTaskEnv, TaskStatus
from vla_recover.envs.config import MujocoTaskConfig
from vla_recover.envs.expert import ScriptedExpert
from vla_recover.envs.mjcf import scene_xml

__all__ = ["PegInsertConfig", "PegInsertEnv", "PegInsertExpert"]

PEG_HALF = 0.012
PEG_HALF_HEIGHT = 0.04
GRASP_DZ = 0.02  # grasp the upper half of the peg
HOLE_HALF = 0.014
FIXTURE_TOP = 0.04
FIXTURE_HALF = 0.045
LIFT_CLEAR = FIXTURE_TOP + 0.01  # peg bottom height above which it clears the fixture
ALIGN_Z = FIXTURE_TOP + 0.02  # peg bottom height at which the expert aligns
INSERT_START = FIXTURE_TOP + 0.025
ALIGNED_XY = 0.004
ALIGNED_YAW = 0.12


class PegInsertConfig(MujocoTaskConfig):
    horizon: int = Field(200, ge=1, le=100_000, description="steps before the episode is truncated")
    insert_depth: float = Field(0.03, gt=0.0, le=0.038, description="m the peg must go into the hole")
    hole_yaw_range: float = Field(0.4, ge=0.0, le=0.785, description="half-range of the hole's yaw, rad")


def _fixture_xml() -> str:
    h = FIXTURE_TOP / 2
    wall = (FIXTURE_HALF - HOLE_HALF) / 2
    centre = HOLE_HALF + wall
    walls = [
        (f"0 {centre} {h}", f"{FIXTURE_HALF} {wall} {h}"),
        (f"0 {-centre} {h}", f"{FIXTURE_HALF} {wall} {h}"),
        (f"{centre} 0 {h}", f"{wall} {HOLE_HALF} {h}"),
        (f"{-centre} 0 {h}", f"{wall} {HOLE_HALF} {h}"),
    ]
    geoms = "".join(
        f'<geom name="fixture{i}" type="box" pos="{pos}" size="{size}" material="metal" friction="0.6 0.01 0.001"/>'
        for i, (pos, size) in enumerate(walls)
    )
    return f'<body name="fixture" mocap="true" pos="0 0.1 0">{geoms}</body>'


def _peg_xml() -> str:
    return (
        f'<body name="peg" pos="0 -0.08 {PEG_HALF_HEIGHT}"><freejoint name="peg"/>'
        f'<geom name="peg" type="box" size="{PEG_HALF} {PEG_HALF} {PEG_HALF_HEIGHT}" material="yellow" mass="0.05" '
        f'friction="1.0 0.01 0.001" condim="4"/></body>'
    )


def _yaw_error(peg_yaw: float, hole_yaw: float) -> float:
    """Signed yaw from peg to hole modulo the square's 90° symmetry, in [-pi/4, pi/4)."""
    return float((hole_yaw - peg_yaw + np.pi / 4) % (np.pi / 2) - np.pi / 4)


class PegInsertEnv(MujocoTaskEnv):
    CONFIG = PegInsertConfig
    PHASES = ("reach", "grasp", "lift", "align", "insert")
    OBJECT = "peg"
    INSTRUCTIONS = (
        "insert the peg into the hole",
        "put the yellow peg in the square hole",
        "pick up the peg and fit it into the fixture",
        "slot the peg into the hole",
        "place the peg inside the square socket",
    )
    STATE_LABELS_OBJECT: ClassVar[tuple[str, ...]] = (
        "peg_x", "peg_y", "peg_z", "peg_qw", "peg_qx", "peg_qy", "peg_qz",
        "hole_x", "hole_y", "hole_yaw_sin", "hole_yaw_cos",
        "peg_bottom_to_hole_x", "peg_bottom_to_hole_y", "peg_bottom_to_hole_z",
    )  # fmt: skip
    config: PegInsertConfig

    def _scene_xml(self) -> str:
        return scene_xml("peg_insert", _peg_xml(), _fixture_xml(), camera_size=self.config.image_size)

    def _bind_ids(self) -> None:
        super()._bind_ids()
        self._fixture_mocap = self.model.body_mocapid[self.model.body("fixture").id]

    def _randomize(self, rng: np.random.Generator) -> dict[str, Any]:
        r = self.config.object_xy_range
        hole = np.array([rng.uniform(-0.06, 0.06), rng.uniform(0.07, 0.11), 0.0])
        hole_yaw = float(rng.uniform(-1, 1) * self.config.hole_yaw_range)
        self._place_mocap("fixture", hole, hole_yaw)
        peg = np.array([rng.uniform(-r, r), rng.uniform(-0.1 - r / 2, -0.1 + r / 2), PEG_HALF_HEIGHT])
        peg_yaw = float(rng.uniform(-1, 1) * self.config.object_yaw_range)
        self._place_free_body("peg", peg, peg_yaw)
        return {
            "instruction": self._choose_instruction(rng),
            "hole_yaw": hole_yaw,
            "reach0": self._reach_distance(peg + [0.0, 0.0, GRASP_DZ]),
            "align_xy0": max(float(np.linalg.norm(peg[:2] - hole[:2])), 1e-3),
            "align_yaw0": max(abs(_yaw_error(peg_yaw, hole_yaw)), 0.05),
        }

    # -- geometry the task and its expert share ------------------------------------------------------------------
    @property
    def hole_pos(self) -> np.ndarray:
        return self.data.mocap_pos[self._fixture_mocap].copy()

    def peg_bottom(self) -> np.ndarray:
        """Centre of the peg's lower face, world frame."""
        body = self._object_body
        axis = self.data.xmat[body].reshape(3, 3)[:, 2]
        return self.data.xpos[body] - PEG_HALF_HEIGHT * axis

    def peg_yaw_error(self) -> float:
        return _yaw_error(self.body_yaw("peg"), self._task["hole_yaw"])

    def _object_state(self) -> np.ndarray:
        d = self.data
        yaw = self._task["hole_yaw"]
        hole = d.mocap_pos[self._fixture_mocap]
        bottom = self.peg_bottom()
        return np.concatenate(
            [d.xpos[self._object_body], d.xquat[self._object_body], hole[:2], [np.sin(yaw), np.cos(yaw)],
             hole - bottom]
        )  # fmt: skip

    def _evaluate(self) -> TaskStatus:
        bottom = self.peg_bottom()
        xy_error = float(np.linalg.norm(bottom[:2] - self.hole_pos[:2]))
        yaw_error = abs(self.peg_yaw_error())
        goal_z = FIXTURE_TOP - self.config.insert_depth
        if xy_error < HOLE_HALF - PEG_HALF + 0.002 and bottom[2] <= goal_z:
            return TaskStatus(4, 1.0, True)
        inside = bottom[2] < FIXTURE_TOP + 0.002 and xy_error < ALIGNED_XY
        aligned = xy_error < ALIGNED_XY and yaw_error < ALIGNED_YAW and bottom[2] < INSERT_START
        if inside or aligned:
            depth = (INSERT_START - bottom[2]) / (INSERT_START - goal_z)
            return TaskStatus(4, float(np.clip(depth, 0.0, 1.0)), False)
        grasped = self.is_grasped()
        if grasped and bottom[2] >= LIFT_CLEAR:
            xy_done = 1.0 - xy_error / self._task["align_xy0"]
            yaw_done = 1.0 - yaw_error / self._task["align_yaw0"]
            fraction = 0.5 * np.clip(xy_done, 0.0, 1.0) + 0.5 * np.clip(yaw_done, 0.0, 1.0)
            return TaskStatus(3, float(fraction), False)
        if grasped:
            return TaskStatus(2, float(np.clip(bottom[2] / LIFT_CLEAR, 0.0, 1.0)), False)
        return self._approach_status(self.data.xpos[self._object_body] + np.array([0.0, 0.0, GRASP_DZ]), PEG_HALF)


class PegInsertExpert(ScriptedExpert):
    def _plan(self) -> np.ndarray:
        env = self.env
        assert isinstance(env, PegInsertEnv)
        if env._evaluate().success:
            return self.move(env.tcp_pos, None, 1.0)
        bottom = env.peg_bottom()
        hole = env.hole_pos
        xy_error = float(np.linalg.norm(bottom[:2] - hole[:2]))
        inside = bottom[2] < FIXTURE_TOP + 0.003 and xy_error < ALIGNED_XY
        if not inside:
            action = self.pick("peg", GRASP_DZ)
            if action is not None:
                return action
        tcp = env.tcp_pos
        yaw_error = env.peg_yaw_error()
        yaw = env.gripper_yaw + yaw_error
        correction = np.array([*(hole[:2] - bottom[:2]), 0.0])
        descend = tcp + correction + [0.0, 0.0, -0.02]
        if inside:
            goal_z = FIXTURE_TOP - env.config.insert_depth - 0.005
            return self.move(tcp + correction + [0.0, 0.0, goal_z - bottom[2]], yaw, 1.0)
        if bottom[2] < ALIGN_Z - 0.003 and xy_error < 0.003 and abs(yaw_error) < 0.05:
            return self.move(descend, yaw, 1.0)  # already on the way in
        if bottom[2] < ALIGN_Z - 0.008:  # too low to move across: rise first
            return self.move(tcp + [0.0, 0.0, ALIGN_Z - bottom[2]], yaw, 1.0)
        if xy_error > 0.0015 or abs(yaw_error) > 0.02:
            return self.move(tcp + correction + [0.0, 0.0, ALIGN_Z - bottom[2]], yaw, 1.0)
        return self.move(descend, yaw, 1.0)
