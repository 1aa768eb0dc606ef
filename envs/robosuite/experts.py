"""Closed-loop scripted experts for the robosuite tasks, with the same skill knob as the MJCF experts.

Each call reads the simulator (hand pose, object pose, grasp contacts, gripper ramp) and returns the next action,
so the experts recover from injected failures and can take over from any state. The knob degrades them the same
way as :class:`vla_recover.envs.expert.ScriptedExpert`: Gaussian noise on the six motion channels, hesitations
that freeze the arm (the gripper command is kept), and grasp attempts offset so the fingers close beside the object,
which the expert notices and retries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import mujoco
import numpy as np

from vla_recover.envs.expert import Expert, wrap_angle
from vla_recover.envs.robosuite import phases
from vla_recover.envs.robosuite.env import RobosuiteTaskEnv

__all__ = ["LiftExpert", "NutAssemblySquareExpert", "PickPlaceCanExpert", "RobosuiteExpert", "down_rotation"]

ELBOW_STRETCH = (-0.3, -0.12)  # rad of the Panda's elbow (limit -0.07): outward moves fade out over this range
JOINT7_LIMIT = 2.75  # rad: stay clear of the Panda's last joint limit (2.90) when choosing among symmetric yaws


def down_rotation(yaw: float) -> np.ndarray:
    """Grip-site rotation pointing straight down with the fingers' closing axis at heading ``yaw``."""
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([[c, s, 0.0], [s, -c, 0.0], [0.0, 0.0, -1.0]])


def rotation_error(desired: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Axis-angle vector (world frame) that rotates ``current`` onto ``desired``."""
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, (desired @ current.T).reshape(-1))
    error = np.empty(3)
    mujoco.mju_quat2Vel(error, quat, 1.0)
    return error


def _saturate(vector: np.ndarray, limit: float = 1.0) -> np.ndarray:
    """Scale ``vector`` so no entry exceeds ``limit`` in magnitude, keeping its direction."""
    peak = float(np.max(np.abs(vector)))
    return vector if peak <= limit else vector * (limit / peak)


class RobosuiteExpert(Expert):
    """A robosuite task's expert. Call with nothing (it reads the env) to get the next action, shape (7,)."""

    ENV = RobosuiteTaskEnv
    ENV_NAME = "robosuite task"
    MOTION_DIMS = 6
    env: RobosuiteTaskEnv
    GRASP_MISS_OFFSET: ClassVar[float] = 0.055  # m across the closing axis: the fingers close beside the object
    HOVER: ClassVar[float] = 0.08  # m above the grasp point before descending
    SETTLE_STEPS: ClassVar[int] = 2
    # The knob's noise is in the MJCF tasks' action units (2 cm and 0.15 rad per unit); OSC_POSE's unit is 5 cm
    # and 0.5 rad, so the same knob value jitters the hand by the same distances and angles in both.
    NOISE_SCALE = np.array([0.4, 0.4, 0.4, 0.3, 0.3, 0.3])
    MAX_TURN: ClassVar[float] = 0.6  # of the rotation action: faster turns drag the hand off its position
    INTEGRAL_GAIN: ClassVar[float] = 0.2  # per step, on position errors under INTEGRAL_RANGE ...
    INTEGRAL_RANGE: ClassVar[float] = 0.015  # m
    INTEGRAL_SPEED: ClassVar[float] = 0.05  # m/s ... while the hand has (nearly) stopped short of the target
    INTEGRAL_LIMIT: ClassVar[float] = 0.02  # m: the OSC controller's steady-state sag it can make up for

    def _reset_skills(self) -> None:
        self._closing = False
        self._closed_steps = 0
        self._held_steps = 0
        self._miss_offset = 0.0
        self._integral: np.ndarray = np.zeros(3)
        self._yaw_memory: dict[str, float] = {}

    # -- building blocks -----------------------------------------------------------------------------------------
    def move(self, target: np.ndarray, yaw: float | None, grip: float) -> np.ndarray:
        """Action that drives the grip site to ``target``, pointing down with the closing axis at ``yaw``
        (None: keep the current heading), and sends ``grip`` to the gripper."""
        env = self.env
        error = np.asarray(target, dtype=float) - env.eef_pos
        # robosuite's OSC has no integral action: near the target, gravity, the payload and the nullspace pull
        # leave millimetres of error. Integrate small errors while the hand is stalled (no windup on the way in);
        # let the sum decay otherwise.
        near = (np.abs(error) < self.INTEGRAL_RANGE) & (np.abs(env.eef_vel) < self.INTEGRAL_SPEED)
        summed = np.clip(self._integral + self.INTEGRAL_GAIN * error, -self.INTEGRAL_LIMIT, self.INTEGRAL_LIMIT)
        self._integral = np.asarray(np.where(near, summed, 0.5 * self._integral), dtype=float)
        translation = self._keep_in_reach(_saturate((error + self._integral) / env.MAX_TRANSLATION))
        # ``yaw`` is unwrapped: turns past half a revolution go the long way round (to spare the last joint's
        # range), so aim at most a radian ahead at a time.
        current = env.gripper_yaw
        heading = current if yaw is None else current + float(np.clip(yaw - current, -1.0, 1.0))
        rotation = _saturate(rotation_error(down_rotation(heading), env.eef_xmat) / env.MAX_ROTATION, self.MAX_TURN)
        return np.concatenate([translation, rotation, [grip]])

    def _keep_in_reach(self, translation: np.ndarray) -> np.ndarray:
        """Drop the outward part of a move as the elbow straightens: at full stretch the arm is singular and
        robosuite's OSC cannot pull it back in."""
        env = self.env
        elbow = float(env.arm_qpos[3])
        start, stop = ELBOW_STRETCH
        if elbow <= start:
            return translation
        outward = env.eef_pos[:2] - env.robot_base_pos[:2]
        outward /= max(float(np.linalg.norm(outward)), 1e-9)
        radial = float(translation[:2] @ outward)
        if radial > 0.0:
            translation = translation.copy()
            translation[:2] -= radial * outward * min(1.0, (elbow - start) / (stop - start))
        return translation

    def hold(self, grip: float) -> np.ndarray:
        """Action that keeps the hand where it is (pointing down) and sends ``grip`` to the gripper."""
        action = self.move(self.env.eef_pos, None, grip)
        action[:3] = 0.0
        return action

    def joint7_after(self, heading: float) -> float:
        """Predicted angle of the Panda's last joint once the hand (pointing down) has turned to the unwrapped
        ``heading``: turning the hand by +d about the vertical turns that joint by about -d."""
        env = self.env
        return float(env.arm_qpos[-1]) - (heading - env.gripper_yaw)

    def choose_yaw(
        self, angle: float, symmetry: float, key: str, allowed: Callable[[float], bool] | None = None
    ) -> float:
        """Among the unwrapped headings ``angle + k * symmetry`` that keep the last joint in range (and pass
        ``allowed``), the nearest to the current heading. It sticks to the branch chosen under ``key`` before,
        so the choice does not flip back and forth as the hand turns."""
        current = self.env.gripper_yaw
        base = current + wrap_angle(angle - current)
        candidates = [base + k * symmetry for k in range(-4, 5)]
        usable = [
            c for c in candidates if abs(self.joint7_after(c)) < JOINT7_LIMIT and (allowed is None or allowed(c))
        ] or candidates
        previous = self._yaw_memory.get(key)

        def cost(c: float) -> tuple[int, float]:
            same_branch = previous is not None and abs(wrap_angle(c - previous)) < 0.35
            return (0 if same_branch else 1, abs(c - current))

        chosen = min(usable, key=cost)
        self._yaw_memory[key] = chosen
        return chosen

    def _new_attempt(self) -> None:
        if self.config.grasp_miss_prob and self.rng.random() < self.config.grasp_miss_prob:
            self._miss_offset = self.GRASP_MISS_OFFSET
        else:
            self._miss_offset = 0.0

    def pick(
        self, grasp_point: np.ndarray, grasp_yaw: Callable[[], float], miss_axis: np.ndarray | None = None
    ) -> np.ndarray | None:
        """Approach, open, descend and close on the task's object at ``grasp_point`` with the closing axis at
        ``grasp_yaw()``; None once it is held firmly (the caller then carries it). A missed attempt is offset
        along ``miss_axis`` (default: horizontally across the closing axis)."""
        env = self.env
        eef = env.eef_pos
        grasped = env.is_grasped()
        if grasped and env.gripper_command > 0.99:
            self._closing = False
            self._held_steps += 1
            if self._held_steps > self.SETTLE_STEPS:
                return None
            return self.hold(1.0)  # let the grip tighten before pulling
        self._held_steps = 0
        if grasped and not self._closing and env.gripper_command > 0.0:  # a loosened grip: tighten it right here
            return self.hold(1.0)
        yaw = grasp_yaw()
        if miss_axis is None:  # across the closing axis, on the robot's side (never further out of reach)
            miss_axis = np.array([-np.sin(yaw), np.cos(yaw), 0.0])
            if float(miss_axis[:2] @ (env.robot_base_pos[:2] - grasp_point[:2])) < 0.0:
                miss_axis = -miss_axis
        horizontal = np.array([miss_axis[0], miss_axis[1], 0.0])
        miss = self._miss_offset * horizontal / max(float(np.linalg.norm(horizontal)), 1e-9)
        target = np.asarray(grasp_point, dtype=float) + miss
        hover = target + np.array([0.0, 0.0, self.HOVER])

        if self._closing:
            if env.gripper_command > 0.99 and not grasped:
                self._closed_steps += 1
                if self._closed_steps > 3:  # closed on nothing (or on one finger): open, rise, try again
                    self._closing = False
                    self._closed_steps = 0
                    self._new_attempt()
                    return self.move(eef + np.array([0.0, 0.0, 0.04]), None, -1.0)
            return self.move(target, yaw, 1.0)

        xy_error = float(np.linalg.norm(eef[:2] - target[:2]))
        yaw_error = abs(wrap_angle(yaw - env.gripper_yaw))
        low = eef[2] < hover[2] - 0.02
        if xy_error > (0.012 if low else 0.006) or yaw_error > 0.08:
            if not low:
                return self.move(hover, yaw, -1.0)
            if xy_error < 0.03 and yaw_error < 0.08:  # drifted a little on the way down: correct in place
                return self.move(np.array([target[0], target[1], eef[2]]), yaw, -1.0)
            return self.move(np.array([eef[0], eef[1], hover[2]]), yaw, -1.0)  # rise before moving across
        if env.gripper_command > -0.99 or env.gripper_opening < 0.9 * env.GRIPPER_OPEN:
            return self.move(np.array([target[0], target[1], eef[2]]), yaw, -1.0)
        if eef[2] > target[2] + 0.004:
            return self.move(target, yaw, -1.0)
        self._closing = True
        self._closed_steps = 0
        return self.move(target, yaw, 1.0)

    def carry(self, obj: np.ndarray, goal: np.ndarray, yaw: float | None = None) -> np.ndarray:
        """Action moving the held object's origin from ``obj`` towards ``goal`` (the hand follows rigidly)."""
        return self.move(self.env.eef_pos + (np.asarray(goal) - obj), yaw, 1.0)


class LiftExpert(RobosuiteExpert):
    LIFT_MARGIN = 0.06  # m above robosuite's success height

    def _plan(self) -> np.ndarray:
        env = self.env
        cube = env.object_pos()
        action = self.pick(cube, lambda: self.choose_yaw(env.object_yaw(), np.pi / 2, "grasp"))
        if action is not None:
            return action
        target = env.eef_pos
        target[2] += env.task_info["success_z"] + self.LIFT_MARGIN - cube[2]
        return self.move(target, None, 1.0)


class PickPlaceCanExpert(RobosuiteExpert):
    GRASP_MISS_OFFSET = 0.065
    GRASP_DZ = 0.015  # m above the can's centre: lower, the palm lands on the can's top
    CARRY_MARGIN = 0.02  # m above the lift height while moving across
    DROP_MARGIN = 0.05  # m from the compartment's walls: the can goes down at the corner nearest the robot
    RELEASE_HEIGHT = 0.035  # m above the can's resting height where it is let go
    WALL_CLEARANCE = 0.035  # m: a can centred this far inside the compartment clears its walls going down

    def _grasp_yaw(self, can: np.ndarray) -> float:
        """Closing axis parallel to the nearer wall of the bin the can is in, so the fingers clear the walls."""
        suite = self.env.suite_env
        centre = np.asarray(suite.bin1_pos[:2] if can[1] < 0.0 else suite.bin2_pos[:2], dtype=float)
        margin = np.asarray(suite.bin_size[:2], dtype=float) / 2 - np.abs(can[:2] - centre)
        return self.choose_yaw(np.pi / 2 if margin[0] < margin[1] else 0.0, np.pi, "grasp")

    def _plan(self) -> np.ndarray:
        env = self.env
        task = env.task_info
        can = env.object_pos()
        low, high = phases.target_region(env)
        in_target = bool(np.all(can[:2] > low + 0.01) and np.all(can[:2] < high - 0.01))
        release_z = task["rest_z"] + self.RELEASE_HEIGHT
        letting_go = env.gripper_command < 0.99 and can[2] < task["lift_z"]
        if in_target and (can[2] < release_z + 0.012 or letting_go):
            return self._retreat(can)
        action = self.pick(can + np.array([0.0, 0.0, self.GRASP_DZ]), lambda: self._grasp_yaw(can))
        if action is not None:
            return action
        # The compartment's centre is at the edge of the Panda's reach; its corner nearest the robot is not.
        drop = np.clip(env.robot_base_pos[:2], low + self.DROP_MARGIN, high - self.DROP_MARGIN)
        target = np.array([drop[0], drop[1], task["lift_z"] + self.CARRY_MARGIN])
        xy_error = float(np.linalg.norm(target[:2] - can[:2]))
        inside = bool(np.all(can[:2] > low + self.WALL_CLEARANCE) and np.all(can[:2] < high - self.WALL_CLEARANCE))
        if xy_error > 0.012 and not inside:
            if can[2] < task["lift_z"]:  # straight up out of the bin first
                return self.carry(can, np.array([can[0], can[1], target[2]]))
            return self.carry(can, target)
        return self.carry(can, np.array([target[0], target[1], release_z]))

    def _retreat(self, can: np.ndarray) -> np.ndarray:
        env = self.env
        self._closing = False
        self._held_steps = 0
        eef = env.eef_pos
        if env.is_grasped() or env.gripper_opening < phases.CAN_WIDTH + 0.01:
            return self.hold(-1.0)
        return self.move(np.array([eef[0], eef[1], can[2] + 0.15]), None, -1.0)


class NutAssemblySquareExpert(RobosuiteExpert):
    GRASP_DZ = 0.008  # m above the handle's mid-plane: the fingertips stay clear of the table
    CARRY_MARGIN = 0.03  # m above the clearance height while aligning

    def _target_nut_yaw(self, peg: np.ndarray) -> float:
        """The nut heading (a quarter turn: the peg is square) that points the handle most nearly at the robot.
        The peg is at the edge of the arm's reach: the hand, holding the handle, must not be beyond it."""
        towards = self.env.robot_base_pos[:2] - peg[:2]
        return float(np.round(np.arctan2(towards[1], towards[0]) / (np.pi / 2)) * (np.pi / 2))

    def _grasp_yaw(self, nut_yaw: float, turn: float) -> float:
        """Fingers close across the handle (along the nut's y axis); of the two hand headings that do, the one
        from which the later ``turn`` of the nut keeps the last joint in range."""

        def then_turnable(heading: float) -> bool:
            joint7 = self.joint7_after(heading)
            return any(abs(joint7 - (turn + k * 2 * np.pi)) < JOINT7_LIMIT for k in (-1, 0, 1))

        return self.choose_yaw(nut_yaw + np.pi / 2, np.pi, "grasp", then_turnable)

    def _plan(self) -> np.ndarray:
        env = self.env
        task = env.task_info
        nut, peg = env.object_pos(), phases.peg_pos(env)
        nut_yaw = env.object_yaw()
        if bool(np.all(np.abs(nut[:2] - peg[:2]) < 0.03)) and nut[2] < task["success_z"] - 0.01:
            return self._let_go(task)  # down the peg
        turn = wrap_angle(self._target_nut_yaw(peg) - nut_yaw)
        grasp = phases.nut_handle(env) + np.array([0.0, 0.0, self.GRASP_DZ])
        outward = env.object_xmat()[:, 0]  # missed grasps land beyond the handle's tip (inwards, on the ring)
        action = self.pick(grasp, lambda: self._grasp_yaw(nut_yaw, turn), miss_axis=outward)
        if action is not None:
            return action
        # Turn the nut (away from the peg, where the arm is not stretched), centre it over the peg, lower it.
        current = env.gripper_yaw
        hand_yaw = self.choose_yaw(current + turn, 2 * np.pi, "align")
        turn = hand_yaw - current
        carry_z = task["clear_z"] + self.CARRY_MARGIN
        xy_error = float(np.linalg.norm(peg[:2] - nut[:2]))
        on_peg = bool(np.all(np.abs(nut[:2] - peg[:2]) < 0.02)) and nut[2] < task["clear_z"]
        if not on_peg and (xy_error > 0.004 or abs(turn) > 0.04):
            if nut[2] < task["clear_z"] + 0.01:  # straight up first, without turning
                return self.carry(nut, np.array([nut[0], nut[1], carry_z]))
            if abs(turn) > 0.1 and xy_error > 0.05:
                return self.carry(nut, np.array([nut[0], nut[1], carry_z]), hand_yaw)
            return self.carry(nut, np.array([peg[0], peg[1], carry_z]), hand_yaw)
        return self.carry(nut, np.array([peg[0], peg[1], task["rest_z"]]), hand_yaw)

    def _let_go(self, task: dict[str, Any]) -> np.ndarray:
        env = self.env
        self._closing = False
        if env.is_grasped() or env.gripper_opening < phases.NUT_HANDLE_WIDTH + 0.01:
            return self.hold(-1.0)
        eef = env.eef_pos
        return self.move(np.array([eef[0], eef[1], task["clear_z"] + 0.05]), None, -1.0)
