"""robosuite's Lift, PickPlaceCan and NutAssemblySquare behind the contract of the MJCF tasks (see ``envs/base.py``).

Panda with robosuite's OSC_POSE controller. Action (7,) in [-1, 1]: hand position deltas (x 0.05 m) and axis-angle
rotation deltas (x 0.5 rad) in the robot base frame, then the gripper (-1 open, +1 closed; robosuite ramps the finger
targets 0.2 per step towards it). ``obs["state"]`` is robosuite's ``robot0_proprio-state`` then its ``object-state``.

Beyond plain robosuite: placement and initial joint noise come from a seed drawn from ``self.np_random`` (numpy's
global generator, robosuite's source, is saved and restored around it); kinematics and observations are refreshed
after each step; episodes truncate at ``config.horizon``; images are upright; save/restore includes the controllers'
Python-side state (OSC goal, gripper ramp), so replays after ``set_state`` are bit-exact.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np

from vla_recover.config import ConfigError, validate_config
from vla_recover.envs.base import TaskStatus, capture_physics, checked_action, restore_physics, step_info
from vla_recover.envs.failures import FailureInjector
from vla_recover.envs.robosuite import phases
from vla_recover.envs.robosuite.config import (
    RobosuiteConfig,
    RobosuiteLiftConfig,
    RobosuiteNutAssemblySquareConfig,
    RobosuitePickPlaceCanConfig,
)
from vla_recover.envs.task import SimState, Task

__all__ = ["RobosuiteLiftEnv", "RobosuiteNutAssemblySquareEnv", "RobosuitePickPlaceCanEnv", "RobosuiteTaskEnv"]

CAMERAS = {"front": "agentview", "side": "sideview", "wrist": "robot0_eye_in_hand"}
# Attributes of robosuite's part controllers that carry over from one step to the next.
_CONTROLLER_ATTRS = ("goal_pos", "goal_ori", "initial_joint", "goal_qvel", "kp", "kd", "_goal_update_mode")
REFERENCE_MASS = 0.05  # kg: the MJCF tasks' objects, which the default failure forces are sized for
_IMPORT_NOISE = ("private macro file", "setup_macros.py", "robosuite_models", "mink-based")


def _drop_import_noise(record: logging.LogRecord) -> bool:
    return not any(part in record.getMessage() for part in _IMPORT_NOISE)


_LOGGER = logging.getLogger("robosuite_logs")  # robosuite's import-time advice about its optional extras
_LOGGER.addFilter(_drop_import_noise)
try:
    import robosuite
    from robosuite.controllers import load_composite_controller_config
except ImportError as exc:
    message = "the robosuite tasks need robosuite: pip install 'vla-recover[robosuite]'"
    raise ImportError(message, name=exc.name) from exc
_LOGGER.setLevel(logging.WARNING)  # robosuite logs every controller load at INFO


@contextlib.contextmanager
def _global_numpy_seed(seed: int) -> Iterator[None]:
    """Seed numpy's global generator (robosuite's source of randomness) and restore it afterwards."""
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(saved)


def _controller_config() -> dict[str, Any]:
    config: dict[str, Any] = load_composite_controller_config(controller="BASIC", robot="Panda")
    arm = dict(config["body_parts"]["right"])
    if arm.get("type") != "OSC_POSE":
        raise RuntimeError(f"robosuite {robosuite.__version__}: expected OSC_POSE for the Panda arm, got {arm}")
    config["body_parts"] = {"right": arm}  # only the parts a Panda has: no warnings about the others
    return config


class RobosuiteTaskEnv(Task):
    """A robosuite manipulation env with ground-truth phases, failure injection and exact save/restore."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}  # noqa: RUF012 (gymnasium's convention)
    CONFIG: ClassVar[type[RobosuiteConfig]] = RobosuiteConfig
    TASK: ClassVar[phases.TaskSpec]
    PHASES: ClassVar[tuple[str, ...]] = ()
    GRIPPER_INDEX: ClassVar[int] = 6
    CONTROL_HZ: ClassVar[int] = 20  # robosuite's control_freq default; a task_config may set another
    MAX_TRANSLATION: ClassVar[float] = 0.05  # m per unit action (OSC_POSE output_max)
    MAX_ROTATION: ClassVar[float] = 0.5  # rad per unit action
    GRIPPER_OPEN: ClassVar[float] = 0.08  # m between the fingers when fully open

    def __init__(self, config: RobosuiteConfig | dict[str, Any] | None = None, render_mode: str | None = None):
        self.config = validate_config(self.CONFIG, config, source=type(self).__name__)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode: got {render_mode!r}; valid choices: None, 'rgb_array'")
        if len(set(self.config.cameras)) != len(self.config.cameras):
            problem = f"field 'cameras': got {list(self.config.cameras)!r}; cameras must be unique"
            raise ConfigError(type(self).__name__, [problem])
        self.render_mode = render_mode
        try:  # checks the failures' phases: before the seconds robosuite takes to build the scene
            self._injector = FailureInjector(self.config.failures, self.PHASES)
        except ValueError as exc:
            raise ConfigError(type(self).__name__, [str(exc)]) from None
        renders = bool(self.config.cameras) or render_mode == "rgb_array"
        with _global_numpy_seed(0):  # the same model in every instance (Lift draws its cube's size here)
            self._suite = robosuite.make(
                self.TASK.suite_env, robots=self.config.robot, controller_configs=_controller_config(),
                control_freq=self.config.control_freq, has_renderer=False, has_offscreen_renderer=renders,
                use_camera_obs=False, horizon=10**9, ignore_done=True, hard_reset=False, reward_shaping=False,
            )  # fmt: skip
        self._sim = self._suite.sim
        self._model: mujoco.MjModel = self._sim.model._model
        self._data: mujoco.MjData = self._sim.data._data
        self._robot = self._suite.robots[0]
        self._objects = {obj.name: obj for obj in self._suite.model.mujoco_objects}
        self._object_body = self._body_id(self.TASK.obj)
        self._step = 0
        self._task: dict[str, Any] = {}
        self._status = TaskStatus(0, 0.0, False)

        self._reset_suite(0)
        self._proprio_key = f"{self._robot.robot_model.naming_prefix}proprio"
        self._robot_labels = self._observable_labels(self._proprio_key)
        self._labels = self._robot_labels + self._observable_labels("object")
        spaces: dict[str, gym.Space[Any]] = {
            "state": gym.spaces.Box(-np.inf, np.inf, shape=(len(self._labels),), dtype=np.float32)
        }
        size = self.config.image_size
        for cam in self.config.cameras:
            spaces[f"images.{cam}"] = gym.spaces.Box(0, 255, shape=(size, size, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(7,), dtype=np.float32)

    # -- privileged accessors (ground truth and scripted experts) ------------------------------------------------
    @property
    def suite_env(self) -> Any:
        """The wrapped robosuite environment."""
        return self._suite

    @property
    def sim(self) -> Any:
        """robosuite's ``MjSim`` (``sim.model._model`` and ``sim.data._data`` are MuJoCo's own structs)."""
        return self._sim

    def _body_id(self, name: str) -> int:
        return int(self._model.body(self._objects[name].root_body).id)

    @property
    def eef_pos(self) -> np.ndarray:
        return self._data.site_xpos[self._robot.eef_site_id["right"]].copy()

    @property
    def eef_vel(self) -> np.ndarray:
        """Linear velocity of the grip site in the world frame, m/s."""
        velocity = np.empty(6)
        site = self._robot.eef_site_id["right"]
        mujoco.mj_objectVelocity(self._model, self._data, mujoco.mjtObj.mjOBJ_SITE, site, velocity, 0)
        return velocity[3:].copy()

    @property
    def eef_xmat(self) -> np.ndarray:
        """Rotation of the grip site: column 0 is the fingers' closing axis, column 2 points out of the hand."""
        return self._data.site_xmat[self._robot.eef_site_id["right"]].reshape(3, 3).copy()

    @property
    def gripper_yaw(self) -> float:
        """Heading of the fingers' closing axis in the horizontal plane, rad."""
        axis = self.eef_xmat[:, 0]
        return float(np.arctan2(axis[1], axis[0]))

    @property
    def gripper_opening(self) -> float:
        """Distance between the fingers, m (0 closed, about GRIPPER_OPEN fully open)."""
        qpos = self._data.qpos[self._robot._ref_gripper_joint_pos_indexes["right"]]
        return float(qpos[0] - qpos[1])

    @property
    def gripper_command(self) -> float:
        """robosuite's ramped gripper command in [-1, 1] (+1 fully closed)."""
        return float(np.asarray(self._robot.gripper["right"].current_action).reshape(-1)[-1])

    @property
    def robot_base_pos(self) -> np.ndarray:
        return self._data.xpos[self._model.body(self._robot.robot_model.root_body).id].copy()

    @property
    def arm_qpos(self) -> np.ndarray:
        return self._data.qpos[self._robot._ref_joint_pos_indexes].copy()

    def object_pos(self, name: str | None = None) -> np.ndarray:
        return self._data.xpos[self._body_id(name or self.TASK.obj)].copy()

    def object_xmat(self, name: str | None = None) -> np.ndarray:
        return self._data.xmat[self._body_id(name or self.TASK.obj)].reshape(3, 3).copy()

    def object_yaw(self, name: str | None = None) -> float:
        xmat = self.object_xmat(name)
        return float(np.arctan2(xmat[1, 0], xmat[0, 0]))

    def site_pos(self, name: str) -> np.ndarray:
        return self._data.site_xpos[self._model.site(name).id].copy()

    def is_grasped(self, name: str | None = None) -> bool:
        """robosuite's own test: both finger pads touch the object."""
        return bool(self._suite._check_grasp(self._robot.gripper["right"], self._objects[name or self.TASK.obj]))

    def suite_success(self) -> bool:
        return bool(self._suite._check_success())

    @property
    def task_info(self) -> dict[str, Any]:
        """Per-episode facts set at reset (read-only copy)."""
        return copy.deepcopy(self._task)

    @property
    def instruction(self) -> str:
        return str(self._task.get("instruction", ""))

    @property
    def phase(self) -> str:
        return self.PHASES[self._status.phase_index]

    @property
    def state_labels(self) -> tuple[str, ...]:
        """Names of the entries of ``obs["state"]``, in order: robosuite's observable name, then the index."""
        return self._labels

    @property
    def robot_state_size(self) -> int:
        """How many leading entries of ``obs["state"]`` describe the robot; the rest describe the objects."""
        return len(self._robot_labels)

    # -- gymnasium API -----------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        super().reset(seed=seed)
        rng = self.np_random
        self._reset_suite(int(rng.integers(2**31)))
        task = self.TASK.new_task(self)
        task["instruction"] = self.TASK.instructions[int(rng.integers(len(self.TASK.instructions)))]
        self._task = task
        self._injector.reset(rng)
        self._step = 0
        self._status = self.TASK.evaluate(self)
        return self._observe(), self._info(fired=[])

    def _reset_suite(self, seed: int) -> None:
        with _global_numpy_seed(seed):
            self._suite.reset()
        self._data.xfrc_applied[:] = 0.0
        for controller in self._robot.composite_controller.part_controllers.values():
            controller.new_update = True  # as after any step: the next goal is set from fresh kinematics
        self._sim.forward()

    def step(self, action: np.ndarray) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        action = checked_action(action, 7)
        rng = self.np_random
        fired = self._injector.begin_step(self._step, self._status.phase_index, rng, self._away_from_gripper())
        shift = self._injector.pose_shift()
        if shift is not None:
            self._shift_object(shift)
        loose = self._loose_grip()
        action = self._injector.filter_action(np.clip(action, -1.0, 1.0), self.GRIPPER_INDEX, loose, rng)
        if "slip" in self._injector.state_dict()["active"]:
            # robosuite's command only steers a 0.2-per-step ramp of the finger targets: set the ramp itself to
            # the loose grip, or a few steps of slip would barely loosen it.
            gripper = self._robot.gripper["right"]
            gripper.current_action = np.array([-1.0, 1.0]) * min(self.gripper_command, loose)
        force = self._injector.object_force()
        # Slip and push magnitudes are meant for the MJCF tasks' 50 g objects; robosuite's weigh 16 to 77 g, so
        # scale by mass: the same magnitude gives the same acceleration (a 16 g can is not flung off the table).
        scale = self._model.body_subtreemass[self._object_body] / REFERENCE_MASS
        self._data.xfrc_applied[self._object_body, :3] = 0.0 if force is None else force * scale
        self._suite.step(action)
        self._sim.forward()  # robosuite's lite physics leaves kinematics one substep behind
        self._injector.end_step()
        self._step += 1
        self._status = self.TASK.evaluate(self)
        success = self._status.success
        terminated = success and self.config.terminate_on_success
        truncated = (not terminated) and self._step >= self.config.horizon
        return self._observe(), float(success), terminated, truncated, self._info(fired)

    def _loose_grip(self) -> float:
        """Gripper command whose finger targets sit 4 mm outside the object's faces (opening 0.04 * (1 - c))."""
        return 1.0 - (self.TASK.object_width + 0.008) / (self.GRIPPER_OPEN / 2)

    def _away_from_gripper(self) -> np.ndarray:
        offset = self._data.xpos[self._object_body, :2] - self.eef_pos[:2]
        return offset / max(float(np.hypot(*offset)), 1e-6)

    def _shift_object(self, offset: np.ndarray) -> None:
        joint = self._model.body_jntadr[self._object_body]
        adr = self._model.jnt_qposadr[joint]
        low, high = self.TASK.workspace
        self._data.qpos[adr : adr + 2] = np.clip(self._data.qpos[adr : adr + 2] + offset, low, high)
        self._sim.forward()

    def _observable_labels(self, modality: str) -> tuple[str, ...]:
        labels: list[str] = []
        for name, observable in self._suite._observables.items():
            if observable.modality != modality or not (observable.is_enabled() and observable.is_active()):
                continue
            size = int(np.asarray(observable.obs).size)
            labels += [name] if size == 1 else [f"{name}_{i}" for i in range(size)]
        return tuple(labels)

    def _observe(self) -> dict[str, np.ndarray]:
        # Twice: robosuite computes the object-to-hand poses from its cache before it refreshes the object's pose,
        # so a single pass would mix in the previous observation's values.
        self._suite._update_observables(force=True)
        suite_obs = self._suite._get_observations(force_update=True)
        state = np.concatenate([suite_obs[f"{self._proprio_key}-state"], suite_obs["object-state"]])
        obs = {"state": state.astype(np.float32)}
        for cam in self.config.cameras:
            obs[f"images.{cam}"] = self._render_camera(CAMERAS[cam], self.config.image_size)
        return obs

    def _info(self, fired: list[Any]) -> dict[str, Any]:
        return step_info(self._status, self.PHASES, fired, self._injector, self.instruction, self._step)

    # -- state save / restore ------------------------------------------------------------------------------------
    def _controller_state(self) -> dict[str, Any]:
        controllers = self._robot.composite_controller.part_controllers.items()
        parts = {
            n: {a: copy.deepcopy(getattr(c, a)) for a in _CONTROLLER_ATTRS if hasattr(c, a)} for n, c in controllers
        }
        grippers = {arm: np.array(g.current_action, copy=True) for arm, g in self._robot.gripper.items()}
        return {"parts": parts, "grippers": grippers, "time": (self._suite.cur_time, self._suite.timestep)}

    def _load_controller_state(self, state: dict[str, Any]) -> None:
        for name, controller in self._robot.composite_controller.part_controllers.items():
            for attr, value in state["parts"][name].items():
                setattr(controller, attr, copy.deepcopy(value))
            controller.new_update = True
        for arm, gripper in self._robot.gripper.items():
            gripper.current_action = np.array(state["grippers"][arm], copy=True)
        self._suite.cur_time, self._suite.timestep = state["time"]

    def get_state(self) -> SimState:
        physics = capture_physics(self._model, self._data)
        task = copy.deepcopy(self._task)
        task["_failures"] = self._injector.state_dict()
        task["_controller"] = self._controller_state()
        return SimState(physics, self._step, copy.deepcopy(self.np_random.bit_generator.state), task)

    def set_state(self, state: SimState) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Restore ``state`` exactly; returns the observation and info at that instant."""
        if "_controller" not in state.task:
            raise ValueError("state.task: missing '_controller'; the state was not saved by a robosuite task")
        restore_physics(self._model, self._data, state.physics)
        self._sim.forward()
        self.np_random.bit_generator.state = copy.deepcopy(state.rng)
        task = copy.deepcopy(state.task)
        self._injector.load_state_dict(task.pop("_failures", {"pending": [], "active": {}, "events": []}))
        self._load_controller_state(task.pop("_controller"))
        self._task = task
        self._step = state.step
        self._status = self.TASK.evaluate(self)
        return self._observe(), self._info(fired=[])

    # -- rendering -----------------------------------------------------------------------------------------------
    def _render_camera(self, camera: str, size: int) -> np.ndarray:
        image = self._sim.render(width=size, height=size, camera_name=camera)
        return np.ascontiguousarray(image[::-1])  # robosuite renders in OpenGL order: bottom row first

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        return self._render_camera(CAMERAS["front"], 256)

    def close(self) -> None:
        self._suite.close()


class RobosuiteLiftEnv(RobosuiteTaskEnv):
    CONFIG = RobosuiteLiftConfig
    TASK = phases.LIFT
    PHASES = TASK.phases  # reach, grasp, lift


class RobosuitePickPlaceCanEnv(RobosuiteTaskEnv):
    CONFIG = RobosuitePickPlaceCanConfig
    TASK = phases.PICK_PLACE_CAN
    PHASES = TASK.phases  # reach, grasp, lift, carry, place


class RobosuiteNutAssemblySquareEnv(RobosuiteTaskEnv):
    CONFIG = RobosuiteNutAssemblySquareConfig
    TASK = phases.NUT_ASSEMBLY_SQUARE
    PHASES = TASK.phases  # reach, grasp, lift, align, insert
