"""The shared machinery of the MJCF tasks: scene, gripper, failure injection and exact state capture.

The contract every task keeps (ground truth in ``info``, instructions, exact save/restore, an expert) is
`vla_recover.envs.task.Task`; `MujocoTaskEnv` keeps it for the MJCF scenes, capturing MuJoCo's full integration state
(warm start included) with the step counter, the random generator and the failure injector.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np

from vla_recover.config import validate_config
from vla_recover.envs.config import MujocoTaskConfig
from vla_recover.envs.failures import FailureInjector
from vla_recover.envs.mjcf import FINGER_OPEN, GRIPPER_HOME, TCP_BELOW_PALM
from vla_recover.envs.plain_copy import plain_copy
from vla_recover.envs.task import SimState, Task

__all__ = [
    "MujocoTaskEnv",
    "SimState",
    "TaskStatus",
    "capture_physics",
    "checked_action",
    "gripper_command",
    "gripper_target",
    "restore_physics",
    "step_info",
]

_FULL_STATE = mujoco.mjtState.mjSTATE_INTEGRATION
_HOME = np.array(GRIPPER_HOME)
_TCP_OFFSET = np.array([0.0, 0.0, -TCP_BELOW_PALM])


GRIPPER_BAND = 0.25  # commands at or beyond ±GRIPPER_BAND fully close / open the gripper


def gripper_target(command: float) -> float:
    """Finger half-opening for a gripper command in [-1, 1] (+1 closed).

    Commands past ±GRIPPER_BAND saturate, as a parallel gripper's open/close button does, so a learned policy's
    0.7 grips as firmly as a demonstrator's 1.0; the narrow band between maps linearly for fine control.
    """
    fraction = (GRIPPER_BAND - command) / (2.0 * GRIPPER_BAND)
    return FINGER_OPEN * min(1.0, max(0.0, fraction))


def gripper_command(target: float) -> float:
    """The command whose finger target is ``target`` (inverse of :func:`gripper_target` inside the band)."""
    return GRIPPER_BAND - 2.0 * GRIPPER_BAND * target / FINGER_OPEN


def checked_action(action: np.ndarray, dim: int) -> np.ndarray:
    """The action as a flat float64 array, or a ValueError naming what is wrong with it."""
    try:
        action = np.asarray(action, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:  # strings, mappings, ragged lists: numpy's message names no field
        raise ValueError(f"action: not an array of numbers ({exc})") from None
    if action.shape != (dim,):
        raise ValueError(f"action: expected shape ({dim},), got {action.shape}")
    if not np.all(np.isfinite(action)):
        raise ValueError(f"action: contains NaN or Inf: {action.tolist()}")
    return action


def capture_physics(model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
    """MuJoCo's full integration state (warm start included): what bit-exact replay needs."""
    physics = np.empty(mujoco.mj_stateSize(model, _FULL_STATE), dtype=np.float64)
    mujoco.mj_getState(model, data, physics, _FULL_STATE)
    return physics


def restore_physics(model: mujoco.MjModel, data: mujoco.MjData, physics: np.ndarray) -> None:
    expected = mujoco.mj_stateSize(model, _FULL_STATE)
    if physics.shape != (expected,):
        raise ValueError(f"state.physics: expected shape ({expected},), got {physics.shape}")
    mujoco.mj_setState(model, data, physics, _FULL_STATE)


def step_info(
    status: TaskStatus,
    phases: tuple[str, ...],
    fired: list[Any],
    injector: FailureInjector,
    instruction: str,
    step: int,
) -> dict[str, Any]:
    """The per-step ground truth every task reports in ``info``."""
    progress = 1.0 if status.success else (status.phase_index + status.fraction) / len(phases)
    return {
        "phase": phases[status.phase_index],
        "phase_index": status.phase_index,
        "progress": float(np.clip(progress, 0.0, 1.0)),
        "is_success": status.success,
        "failure": fired[0].kind if fired else "",
        "failures": injector.events,
        "instruction": instruction,
        "step": step,
    }


@dataclass(frozen=True)
class TaskStatus:
    """Ground truth at one instant: the phase reached, the fraction of it done, and success."""

    phase_index: int
    fraction: float
    success: bool


class MujocoTaskEnv(Task):
    """A gantry-gripper task in MJCF. Subclasses define the scene, phases, instructions and ground truth.

    Action (5,) in [-1, 1]: end-effector deltas ``dx, dy, dz`` (scaled by ``MAX_TRANSLATION`` m), ``dyaw``
    (scaled by ``MAX_ROTATION`` rad) and the gripper command (-1 open … +1 closed, see :func:`gripper_target`).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}  # noqa: RUF012 (gymnasium's convention)
    CONFIG: ClassVar[type[MujocoTaskConfig]] = MujocoTaskConfig
    PHASES: ClassVar[tuple[str, ...]] = ()
    INSTRUCTIONS: ClassVar[tuple[str, ...]] = ()
    OBJECT: ClassVar[str] = ""  # body that failures act on, unless the task state names an "object"
    STATE_LABELS_OBJECT: ClassVar[tuple[str, ...]] = ()

    CONTROL_HZ: ClassVar[int] = 20
    MAX_TRANSLATION: ClassVar[float] = 0.02
    MAX_ROTATION: ClassVar[float] = 0.15
    GRIPPER_INDEX: ClassVar[int] = 4
    PROPRIO_LABELS: ClassVar[tuple[str, ...]] = (
        "tcp_x", "tcp_y", "tcp_z", "yaw_sin", "yaw_cos", "finger_opening", "tcp_vx", "tcp_vy", "tcp_vz",
    )  # fmt: skip

    def __init__(self, config: MujocoTaskConfig | dict[str, Any] | None = None, render_mode: str | None = None):
        self.config = validate_config(self.CONFIG, config, source=type(self).__name__)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode: got {render_mode!r}; valid choices: None, 'rgb_array'")
        self.render_mode = render_mode
        self.render_size = 256  # pixels of the square frames render() returns; set before rendering to change
        self.model = mujoco.MjModel.from_xml_string(self._scene_xml())
        self.data = mujoco.MjData(self.model)
        self._substeps = round(1.0 / (self.CONTROL_HZ * self.model.opt.timestep))
        self._injector = FailureInjector(self.config.failures, self.PHASES)
        self._renderers: dict[tuple[int, int, bool, bool, bool], mujoco.Renderer] = {}  # by render_view's arguments
        self._step = 0
        self._task: dict[str, Any] = {}
        self._status = TaskStatus(0, 0.0, False)
        self._bind_ids()

        n_state = len(self.PROPRIO_LABELS) + len(self.STATE_LABELS_OBJECT)
        spaces: dict[str, gym.Space[Any]] = {
            "state": gym.spaces.Box(-np.inf, np.inf, shape=(n_state,), dtype=np.float32)
        }
        size = self.config.image_size
        for cam in self.config.cameras:
            spaces[f"images.{cam}"] = gym.spaces.Box(0, 255, shape=(size, size, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(5,), dtype=np.float32)

    # -- subclass hooks ----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def _scene_xml(self) -> str:
        """The task's complete MJCF model."""

    @abc.abstractmethod
    def _randomize(self, rng: np.random.Generator) -> dict[str, Any]:
        """Place objects for a new episode; return the task's Python-side state (instruction included)."""

    @abc.abstractmethod
    def _object_state(self) -> np.ndarray:
        """The task part of ``obs["state"]``, labelled by ``STATE_LABELS_OBJECT``."""

    @abc.abstractmethod
    def _evaluate(self) -> TaskStatus:
        """Ground-truth phase, fraction of it done and success, from the simulator state alone."""

    # -- ids and privileged accessors (used by the tasks and their scripted experts) ---------------------------
    def _bind_ids(self) -> None:
        m = self.model
        self._tcp_site = m.site("tcp").id
        self._gripper_body = m.body("gripper").id
        self._finger_qpos = [m.jnt_qposadr[m.joint(n).id] for n in ("finger_left", "finger_right")]
        self._finger_geoms = (m.geom("finger_left").id, m.geom("finger_right").id)
        self._arm_qpos = [m.jnt_qposadr[m.joint(n).id] for n in ("x", "y", "z", "yaw")]
        self._arm_dof = [m.jnt_dofadr[m.joint(n).id] for n in ("x", "y", "z")]
        self._object_body = m.body(self.OBJECT).id if self.OBJECT else -1

    def _bind_target(self) -> None:
        """The object that failures act on and ``is_grasped()`` checks: per episode when the task chooses it."""
        name = self._task.get("object", self.OBJECT)
        self._object_body = self.model.body(name).id if name else -1

    @property
    def tcp_pos(self) -> np.ndarray:
        return self.data.site_xpos[self._tcp_site].copy()

    @property
    def gripper_yaw(self) -> float:
        return float(self.data.qpos[self._arm_qpos[3]])

    @property
    def finger_opening(self) -> float:
        """Mean half-opening of the fingers, m (0 closed, FINGER_OPEN fully open)."""
        return float(self.data.qpos[self._finger_qpos].mean())

    def body_pos(self, name: str) -> np.ndarray:
        return self.data.xpos[self.model.body(name).id].copy()

    def body_yaw(self, name: str) -> float:
        w, x, y, z = self.data.xquat[self.model.body(name).id]
        return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))

    def is_grasped(self, body: str | None = None) -> bool:
        """Both fingers touch the body, or one does while the fingers stand at the body's width.

        The second case keeps a firm grasp from flickering off when one contact drops for a physics step.
        """
        body_id = self.model.body(body).id if body else self._object_body
        n = self.data.ncon
        if n == 0:
            return False
        contact = self.data.contact
        g1, g2 = contact.geom1[:n], contact.geom2[:n]
        b1, b2 = self.model.geom_bodyid[g1], self.model.geom_bodyid[g2]
        touching = [
            bool(np.any(((g1 == finger) & (b2 == body_id)) | ((g2 == finger) & (b1 == body_id))))
            for finger in self._finger_geoms
        ]
        if touching[0] and touching[1]:
            return True
        if not (touching[0] or touching[1]):
            return False
        return abs(self.finger_opening - self._object_half_width(body_id)) < 0.003

    @property
    def instruction(self) -> str:
        return str(self._task.get("instruction", ""))

    @property
    def phase(self) -> str:
        return self.PHASES[self._status.phase_index]

    # -- gymnasium API -----------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[self._finger_qpos] = FINGER_OPEN
        self.data.ctrl[4:6] = FINGER_OPEN
        self._task = self._randomize(self.np_random)
        self._task.setdefault("instruction", self.INSTRUCTIONS[0] if self.INSTRUCTIONS else "")
        self._bind_target()
        mujoco.mj_forward(self.model, self.data)
        self._injector.reset(self.np_random)
        self._step = 0
        self._status = self._evaluate()
        return self._observe(), self._info(fired=[])

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        action = checked_action(action, 5)
        rng = self.np_random
        fired = self._injector.begin_step(self._step, self._status.phase_index, rng, self._away_from_gripper())
        shift = self._injector.pose_shift()
        if shift is not None:
            self._shift_object(shift)
        action = self._injector.filter_action(np.clip(action, -1.0, 1.0), self.GRIPPER_INDEX, self._loose_grip(), rng)
        self._apply_action(action)
        force = self._injector.object_force()
        if self._object_body >= 0:
            self.data.xfrc_applied[self._object_body, :3] = 0.0 if force is None else force
        mujoco.mj_step(self.model, self.data, nstep=self._substeps)
        self._injector.end_step()
        self._step += 1
        self._status = self._evaluate()
        success = self._status.success
        terminated = success and self.config.terminate_on_success
        truncated = (not terminated) and self._step >= self.config.horizon
        return self._observe(), float(success), terminated, truncated, self._info(fired)

    def _apply_action(self, action: np.ndarray) -> None:
        qpos = self.data.qpos
        target = qpos[self._arm_qpos[:3]] + action[:3] * self.MAX_TRANSLATION
        self.data.ctrl[:3] = np.clip(target, self.model.actuator_ctrlrange[:3, 0], self.model.actuator_ctrlrange[:3, 1])
        yaw = qpos[self._arm_qpos[3]] + action[3] * self.MAX_ROTATION
        self.data.ctrl[3] = np.clip(yaw, *self.model.actuator_ctrlrange[3])
        self.data.ctrl[4:6] = gripper_target(action[4])

    def _object_half_width(self, body_id: int) -> float:
        return float(self.model.geom_size[self.model.body_geomadr[body_id], :2].min())

    def _loose_grip(self) -> float:
        """Gripper command whose finger target sits 4 mm outside the object's faces."""
        if self._object_body < 0:
            return -1.0
        return gripper_command(self._object_half_width(self._object_body) + 0.004)

    def _away_from_gripper(self) -> np.ndarray:
        if self._object_body < 0:
            return np.array([1.0, 0.0])
        offset = self.data.xpos[self._object_body, :2] - self.data.site_xpos[self._tcp_site, :2]
        norm = float(np.hypot(*offset))
        return offset / norm if norm > 1e-6 else np.array([1.0, 0.0])

    def _shift_object(self, offset: np.ndarray) -> None:
        joint = self.model.body_jntadr[self._object_body]
        adr = self.model.jnt_qposadr[joint]
        xy = self.data.qpos[adr : adr + 2] + offset
        self.data.qpos[adr : adr + 2] = np.clip(xy, -0.2, 0.2)  # stays on the table, inside the workspace
        mujoco.mj_forward(self.model, self.data)

    def _observe(self) -> dict[str, np.ndarray]:
        d = self.data
        yaw = d.qpos[self._arm_qpos[3]]
        proprio = np.concatenate(
            [
                d.site_xpos[self._tcp_site],
                [np.sin(yaw), np.cos(yaw), d.qpos[self._finger_qpos].mean()],
                d.qvel[self._arm_dof],
            ]
        )
        obs = {"state": np.concatenate([proprio, self._object_state()]).astype(np.float32)}
        for cam in self.config.cameras:
            obs[f"images.{cam}"] = self._render_camera(cam, self.config.image_size)
        return obs

    def _info(self, fired: list[Any]) -> dict[str, Any]:
        return step_info(self._status, self.PHASES, fired, self._injector, self.instruction, self._step)

    # -- state save / restore ------------------------------------------------------------------------------------
    def get_state(self) -> SimState:
        physics = capture_physics(self.model, self.data)
        task = plain_copy(self._task)
        task["_failures"] = self._injector.state_dict()
        return SimState(physics, self._step, plain_copy(dict(self.np_random.bit_generator.state)), task)

    def set_state(self, state: SimState) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Restore ``state`` exactly; returns the observation and info at that instant."""
        restore_physics(self.model, self.data, state.physics)
        mujoco.mj_forward(self.model, self.data)
        self.np_random.bit_generator.state = plain_copy(dict(state.rng))
        task = plain_copy(state.task)
        self._injector.load_state_dict(task.pop("_failures", {"pending": [], "active": {}, "events": []}))
        self._task = task
        self._bind_target()
        self._step = state.step
        self._status = self._evaluate()
        return self._observe(), self._info(fired=[])

    # -- rendering -----------------------------------------------------------------------------------------------
    def _render_camera(self, camera: str, size: int) -> np.ndarray:
        return self.render_view(camera, size, size)

    def render_view(
        self,
        camera: str,
        width: int,
        height: int,
        antialias: bool = True,
        shadows: bool = True,
        reflections: bool = True,
    ) -> np.ndarray:
        """``camera`` at ``width`` × ``height``: the observation's cameras (everything on), and views for people (the
        console turns off what a software renderer pays most for: multisampling about 40% of a frame, shadows half of
        what is left, the floor's reflections a further third)."""
        key = (width, height, antialias, shadows, reflections)
        renderer = self._renderers.get(key)
        if renderer is None:
            quality, samples = self.model.vis.quality, self.model.vis.quality.offsamples
            try:
                quality.offsamples = samples if antialias else 0  # read once, when the renderer's context is made
                renderer = self._renderers[key] = mujoco.Renderer(self.model, height, width)
            except mujoco.FatalError as exc:
                raise RuntimeError(
                    f"cannot render camera {camera!r}: no OpenGL context ({exc}). MuJoCo picks its backend when "
                    "first imported: set MUJOCO_GL=osmesa (or egl) in the environment, or import vla_recover "
                    "before mujoco; OSMesa comes from Debian's libosmesa6."
                ) from exc
            finally:
                quality.offsamples = samples
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = shadows  # kept by every later update_scene
            renderer.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = reflections
        renderer.update_scene(self.data, camera=camera)
        return renderer.render()

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return self._render_camera("front", self.render_size)

    def close(self) -> None:
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers.clear()

    @property
    def state_labels(self) -> tuple[str, ...]:
        """Names of the entries of ``obs["state"]``, in order."""
        return self.PROPRIO_LABELS + self.STATE_LABELS_OBJECT

    @property
    def robot_state_size(self) -> int:
        """How many leading entries of ``obs["state"]`` describe the robot; the rest describe the objects."""
        return len(self.PROPRIO_LABELS)

    # -- helpers for subclasses ------------------------------------------------------------------------------
    def _place_mocap(self, name: str, pos: np.ndarray, yaw: float) -> None:
        """Fixtures are mocap bodies so their per-episode pose is part of the saved state."""
        mocap = self.model.body_mocapid[self.model.body(name).id]
        self.data.mocap_pos[mocap] = pos
        self.data.mocap_quat[mocap] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]

    def _place_free_body(self, name: str, pos: np.ndarray, yaw: float) -> None:
        joint = self.model.body_jntadr[self.model.body(name).id]
        adr = self.model.jnt_qposadr[joint]
        self.data.qpos[adr : adr + 3] = pos
        self.data.qpos[adr + 3 : adr + 7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]

    def _choose_instruction(self, rng: np.random.Generator, **fields: str) -> str:
        template = self.INSTRUCTIONS[int(rng.integers(len(self.INSTRUCTIONS)))]
        return template.format(**fields)

    @staticmethod
    def home_tcp() -> np.ndarray:
        return _HOME + _TCP_OFFSET

    def _approach_status(self, grasp_point: np.ndarray, object_half_width: float) -> TaskStatus:
        """Phases 0 (reach) and 1 (grasp), shared by every pick task.

        Reach progress is the fraction of the start distance (``task["reach0"]``) covered; grasp progress is how
        far the fingers have closed towards the object once the tool centre point is at the grasp point.
        """
        tcp = self.data.site_xpos[self._tcp_site]
        offset = tcp - grasp_point
        if np.hypot(offset[0], offset[1]) < 0.012 and abs(offset[2]) < 0.012:
            closed = (FINGER_OPEN - self.finger_opening) / (FINGER_OPEN - object_half_width)
            return TaskStatus(1, float(np.clip(closed, 0.0, 1.0)), False)
        covered = 1.0 - float(np.linalg.norm(offset)) / self._task["reach0"]
        return TaskStatus(0, float(np.clip(covered, 0.0, 1.0)), False)

    def _reach_distance(self, grasp_point: np.ndarray) -> float:
        """Distance from the home pose to ``grasp_point``: the normaliser of reach progress."""
        return max(float(np.linalg.norm(self.home_tcp() - grasp_point)), 1e-3)
