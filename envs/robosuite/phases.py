"""The robosuite tasks' definitions (:class:`TaskSpec`) and ground-truth phases, from the simulator state alone.

Every task starts with ``reach`` (the hand closes in on the grasp point; fraction = share of the initial distance
covered) and ``grasp`` (the hand is at the grasp point; fraction = how far the fingers have closed onto the object).
Once the object is held, the later phases measure height gained, horizontal distance covered and descent. Success
is robosuite's own ``_check_success``. The per-episode facts (rest height, initial distances) are fixed at reset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vla_recover.envs.base import TaskStatus

if TYPE_CHECKING:
    from vla_recover.envs.robosuite.env import RobosuiteTaskEnv

__all__ = ["LIFT", "NUT_ASSEMBLY_SQUARE", "PICK_PLACE_CAN", "TaskSpec", "nut_handle", "peg_pos", "target_region"]

GRASP_REGION = 0.02  # m: the hand is "at" the grasp point within this distance horizontally and vertically
LIFT_SUCCESS = 0.04  # m above the table (robosuite's Lift threshold)
CAN_LIFT = 0.10  # m the can must rise before carrying: its bottom then clears the bins' walls
NUT_CLEAR = 0.02  # m the nut's bottom face must clear the peg's top before aligning
RELEASE_DISTANCE = 0.0425  # m: robosuite counts a placed object only once the hand is this far from it
CUBE_WIDTH = 0.043
CAN_WIDTH = 0.05
NUT_HANDLE_WIDTH = 0.0318
NUT_HALF_THICKNESS = 0.01
PEG_HALF_HEIGHT = 0.1


def _clip01(value: float) -> float:
    return float(np.clip(value, 0.0, 1.0))


def closing_fraction(opening: float, object_width: float, fully_open: float) -> float:
    return _clip01((fully_open - opening) / (fully_open - object_width))


def in_grasp_region(eef: np.ndarray, grasp_point: np.ndarray) -> bool:
    return bool(
        np.linalg.norm(eef[:2] - grasp_point[:2]) < GRASP_REGION and abs(eef[2] - grasp_point[2]) < GRASP_REGION
    )


def holding(env: RobosuiteTaskEnv, grasp_point: np.ndarray, object_width: float) -> bool:
    """The gripper is closing or closed, and robosuite's grasp test holds or the fingers are closed to the
    object's width around the grasp point (contacts flicker while the grip tightens; this keeps the phase steady)."""
    if env.gripper_command <= 0.0:  # opening (or open): whatever touches the fingers is not held
        return False
    if env.is_grasped():
        return True
    return env.gripper_opening < object_width + 0.006 and in_grasp_region(env.eef_pos, grasp_point)


def _reach_or_grasp(
    env: RobosuiteTaskEnv, grasp_point: np.ndarray, width: float, reach0: float, rest_z: float
) -> TaskStatus:
    eef = env.eef_pos
    if in_grasp_region(eef, grasp_point):
        return TaskStatus(1, closing_fraction(env.gripper_opening, width, env.GRIPPER_OPEN), False)
    # robosuite drops objects from a few centimetres at reset: measure to where they come to rest.
    resting = np.array([grasp_point[0], grasp_point[1], min(grasp_point[2], rest_z)])
    distance = float(np.linalg.norm(eef - resting))
    return TaskStatus(0, _clip01(1.0 - distance / max(reach0, 1e-6)), False)


def _released_fraction(env: RobosuiteTaskEnv, obj: np.ndarray) -> float:
    return _clip01(float(np.linalg.norm(env.eef_pos - obj)) / RELEASE_DISTANCE)


# -- Lift ----------------------------------------------------------------------------------------------------------
def lift_task(env: RobosuiteTaskEnv) -> dict[str, Any]:
    suite = env.suite_env
    table_z = float(suite.model.mujoco_arena.table_offset[2])
    rest = env.object_pos()
    rest[2] = table_z + float(suite.cube.size[2])
    return {
        "rest_z": float(rest[2]),
        "success_z": table_z + LIFT_SUCCESS,
        "reach0": float(np.linalg.norm(env.eef_pos - rest)),
    }


def evaluate_lift(env: RobosuiteTaskEnv) -> TaskStatus:
    task = env._task
    cube = env.object_pos()
    if env.suite_success():
        return TaskStatus(2, 1.0, True)
    if holding(env, cube, CUBE_WIDTH):
        rise = (cube[2] - task["rest_z"]) / (task["success_z"] - task["rest_z"])
        return TaskStatus(2, _clip01(rise), False)
    return _reach_or_grasp(env, cube, CUBE_WIDTH, task["reach0"], task["rest_z"])


# -- PickPlaceCan --------------------------------------------------------------------------------------------------
def target_region(env: RobosuiteTaskEnv) -> tuple[np.ndarray, np.ndarray]:
    """Corners (low, high) in xy of the target bin's compartment for the can (robosuite's ``not_in_bin``)."""
    suite = env.suite_env
    bin_id = int(suite.object_id)
    size = np.asarray(suite.bin_size[:2], dtype=float)
    low = np.array(suite.bin2_pos[:2], dtype=float)
    if bin_id in (0, 2):
        low[0] -= size[0] / 2
    if bin_id < 2:
        low[1] -= size[1] / 2
    return low, low + size / 2


def pick_place_task(env: RobosuiteTaskEnv) -> dict[str, Any]:
    suite = env.suite_env
    obj = env.object_pos()
    rest_z = float(suite.bin1_pos[2] - suite.objects[suite.object_id].bottom_offset[2])
    target = np.asarray(suite.target_bin_placements[suite.object_id][:2], dtype=float)
    grasp_point = np.array([obj[0], obj[1], rest_z])
    return {
        "rest_z": rest_z,
        "lift_z": rest_z + CAN_LIFT,
        "target_xy": target.tolist(),
        "reach0": float(np.linalg.norm(env.eef_pos - grasp_point)),
        "carry0": float(np.linalg.norm(obj[:2] - target)),
    }


def evaluate_pick_place(env: RobosuiteTaskEnv) -> TaskStatus:
    task = env._task
    can = env.object_pos()
    if env.suite_success():
        return TaskStatus(4, 1.0, True)
    held = holding(env, can, CAN_WIDTH)
    low, high = target_region(env)
    if np.all(can[:2] > low) and np.all(can[:2] < high):
        if held:  # lowering into the compartment
            return TaskStatus(4, 0.5 * _clip01((task["lift_z"] - can[2]) / CAN_LIFT), False)
        return TaskStatus(4, 0.5 + 0.5 * _released_fraction(env, can), False)
    if held and can[2] >= task["lift_z"]:
        distance = float(np.linalg.norm(can[:2] - np.asarray(task["target_xy"])))
        return TaskStatus(3, _clip01(1.0 - distance / max(task["carry0"], 1e-6)), False)
    if held:
        return TaskStatus(2, _clip01((can[2] - task["rest_z"]) / CAN_LIFT), False)
    return _reach_or_grasp(env, can, CAN_WIDTH, task["reach0"], task["rest_z"])


# -- NutAssemblySquare ---------------------------------------------------------------------------------------------
def nut_handle(env: RobosuiteTaskEnv) -> np.ndarray:
    suite = env.suite_env
    return env.site_pos(suite.nuts[suite.nut_id].important_sites["handle"])


def peg_pos(env: RobosuiteTaskEnv) -> np.ndarray:
    suite = env.suite_env
    return suite.sim.data.body_xpos[suite.peg1_body_id].copy()


def nut_task(env: RobosuiteTaskEnv) -> dict[str, Any]:
    suite = env.suite_env
    table_z = float(suite.table_offset[2])
    nut, handle, peg = env.object_pos(), nut_handle(env), peg_pos(env)
    rest_z = table_z + NUT_HALF_THICKNESS
    handle[2] = rest_z
    return {
        "rest_z": rest_z,
        "clear_z": float(peg[2] + PEG_HALF_HEIGHT + NUT_HALF_THICKNESS + NUT_CLEAR),
        "success_z": table_z + 0.05,  # robosuite's on_peg height
        "reach0": float(np.linalg.norm(env.eef_pos - handle)),
        "align0": float(np.linalg.norm(nut[:2] - peg[:2])),
    }


def evaluate_nut(env: RobosuiteTaskEnv) -> TaskStatus:
    task = env._task
    nut, handle, peg = env.object_pos(), nut_handle(env), peg_pos(env)
    if env.suite_success():
        return TaskStatus(4, 1.0, True)
    held = holding(env, handle, NUT_HANDLE_WIDTH)
    around_peg = bool(np.all(np.abs(nut[:2] - peg[:2]) < 0.03))  # robosuite's on_peg footprint
    if around_peg and (held or nut[2] < task["clear_z"]):
        descent = (task["clear_z"] - nut[2]) / (task["clear_z"] - task["success_z"])
        return TaskStatus(4, _clip01(descent), False)
    if held and nut[2] >= task["clear_z"]:
        distance = float(np.linalg.norm(nut[:2] - peg[:2]))
        return TaskStatus(3, _clip01(1.0 - distance / max(task["align0"], 1e-6)), False)
    if held:
        return TaskStatus(2, _clip01((nut[2] - task["rest_z"]) / (task["clear_z"] - task["rest_z"])), False)
    return _reach_or_grasp(env, handle, NUT_HANDLE_WIDTH, task["reach0"], task["rest_z"])


# -- the tasks -----------------------------------------------------------------------------------------------------
Corners = tuple[tuple[float, float], tuple[float, float]]


@dataclass(frozen=True)
class TaskSpec:
    """What distinguishes one robosuite task: its env, phases, object, instructions and ground truth."""

    suite_env: str
    phases: tuple[str, ...]
    obj: str  # the robosuite object that the phases follow and failures act on
    object_width: float  # m across the object where the fingers hold it
    instructions: tuple[str, ...]
    new_task: Callable[[RobosuiteTaskEnv], dict[str, Any]]  # per-episode facts, fixed at reset
    evaluate: Callable[[RobosuiteTaskEnv], TaskStatus]
    workspace: Corners = ((-0.25, -0.25), (0.25, 0.25))  # xy corners a pose shift keeps the object within, m


LIFT = TaskSpec(
    "Lift",
    ("reach", "grasp", "lift"),
    "cube",
    CUBE_WIDTH,
    (
        "lift the red cube",
        "pick up the red block",
        "grab the cube and raise it off the table",
        "lift the block up",
        "pick the red cube up from the table",
    ),
    lift_task,
    evaluate_lift,
)
PICK_PLACE_CAN = TaskSpec(
    "PickPlaceCan",
    ("reach", "grasp", "lift", "carry", "place"),
    "Can",
    CAN_WIDTH,
    (
        "put the can in its bin",
        "pick up the soda can and place it in the matching bin",
        "move the can to its compartment in the other bin",
        "take the can and drop it into its compartment",
        "pick the can up and put it in the can's section of the other bin",
    ),
    pick_place_task,
    evaluate_pick_place,
    workspace=((-0.07, -0.47), (0.27, 0.5)),  # inside the two bins
)
NUT_ASSEMBLY_SQUARE = TaskSpec(
    "NutAssemblySquare",
    ("reach", "grasp", "lift", "align", "insert"),
    "SquareNut",
    NUT_HANDLE_WIDTH,
    (
        "put the square nut on the square peg",
        "fit the square nut onto its peg",
        "pick up the square nut and slide it down the square peg",
        "place the nut over the square peg",
        "assemble the square nut onto the peg",
    ),
    nut_task,
    evaluate_nut,
)
