"""The robots a fleet runs, by kind: each kind is a config class and a slot factory, registered in ``ROBOTS``.

A fleet config lists its robots, each with a kind, a name and its own settings, e.g.
``robots: [{kind: sim, count: 8}, {kind: fake, name: bench_arm}, {kind: ros2, name: arm_left, joint_names: [...],
safety: {...}}]``; ``robots: 8`` is the shorthand for eight sim robots. Sim robots run in the fleet's worker processes
(or Ray actors). Every other kind is a hardware slot: a `Robot` the fleet drives from its own process, always behind
the safety filter (`SafeRobot`), which must present the task's observation and action features: one that does not is
refused at start, naming the feature (`check_features`).

A new kind is one module holding its config class (a `RobotKindConfig`) and its slot factory
(``(config, names, context) -> list[Worker]``, usually `vla_recover.fleet.backends.hardware_workers` over the robots
it builds), and one ``ROBOTS.register`` line.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Literal

from pydantic import Field, model_validator

from vla_recover.config import FrozenConfig, validate_nested
from vla_recover.hardware.safety import SafetyConfig
from vla_recover.registry import Registry
from vla_recover.ros2.features import TopicSource, feature_shapes

__all__ = [
    "ROBOTS",
    "FakeRobotsConfig",
    "HardwareConfig",
    "LeRobotRobotConfig",
    "RobotFeatureError",
    "RobotKindConfig",
    "Ros2RobotConfig",
    "Ros2Topics",
    "SimRobotsConfig",
    "check_features",
    "robot_configs",
    "slot_names",
]

NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,39}$"
VARIANT_FIELD = {"sim": "task", "lerobot": "type"}  # kind:<variant> fills this field


class RobotKindConfig(FrozenConfig):
    """One entry of a fleet's ``robots`` list: ``count`` robots of one kind."""

    kind: str = Field(description="a kind registered in vla_recover.fleet.robots.ROBOTS")
    name: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="the robot's name in the fleet (with count > 1, a prefix numbered 00, 01, ...); None: the kind "
        "numbered across the fleet (sim00, fake00, ...)",
    )
    count: int = Field(1, ge=1, le=256, description="how many robots of this kind and settings")


class SimRobotsConfig(RobotKindConfig):
    kind: Literal["sim"] = Field(default="sim", description="the kind, as registered in ROBOTS")
    task: str | None = Field(None, description="sim:<task> names it; it must be the fleet's task")


class HardwareConfig(RobotKindConfig):
    """A robot the fleet drives through a `Robot` driver, behind the safety filter."""

    safety: SafetyConfig | None = Field(
        None,
        description="the safety filter's limits for this robot; None: end-effector deltas within [-1, 1], the "
        "gripper last, at the task's control rate",
    )
    operator_resets: bool = Field(
        True,
        description="after homing, the robot stays resetting until the floor operator has reset its scene and "
        "confirmed it (console, or a simulated floor operator); false: it starts its next episode once home",
    )


class FakeRobotsConfig(HardwareConfig):
    kind: Literal["fake"] = Field(default="fake", description="the kind, as registered in ROBOTS")
    workspace: float = Field(0.4, gt=0.0, le=5.0, description="half-width of the fake arm's reachable box, metres")
    operator_resets: bool = Field(False, description="a fake arm has no scene to reset; true: rehearse the wait")


class Ros2Topics(FrozenConfig):
    joint_states: str = Field(
        default="/joint_states", description="sensor_msgs/JointState the arm publishes (without an observation map)"
    )
    command: str = Field(default="/joint_trajectory", description="where the arm's commands are published")
    home: str | None = Field(
        default=None, description="std_msgs/String topic that homes the arm; None: home by commanding home_position"
    )


class Ros2RobotConfig(HardwareConfig):
    kind: Literal["ros2"] = Field(default="ros2", description="the kind, as registered in ROBOTS")
    safety: SafetyConfig = Field(description="the arm's safety limits (joint limits for its absolute joint commands)")
    joint_names: list[str] = Field(
        default_factory=list,
        description="the arm's joints, in the order of its action; needed for joint_trajectory commands and "
        "without an observation map",
    )
    observation: dict[str, list[TopicSource]] | None = Field(
        None,
        description="each observation feature of the task as the topics it is read from, vectors concatenated in "
        "order; None: state is the joint positions on topics.joint_states",
    )
    topics: Ros2Topics = Field(Ros2Topics(), description="the arm's ROS 2 topics")
    command_type: Literal["joint_trajectory", "float64_multi_array"] = Field(
        "joint_trajectory", description="trajectory_msgs/JointTrajectory or std_msgs/Float64MultiArray commands"
    )
    home_position: list[float] | None = Field(None, description="joint positions of the start pose; None: zeros")
    transport: Literal["auto", "dds", "rclpy"] = Field(
        "auto",
        description="dds: Cyclone DDS directly (no ROS 2 install needed); rclpy: a sourced ROS 2; auto: rclpy where "
        "it is installed, else dds",
    )
    connect_timeout_s: float = Field(5.0, gt=0.0, le=600.0, description="wait this long for the first joint state")
    domain_id: int | None = Field(None, ge=0, le=232, description="ROS_DOMAIN_ID; None: the environment's, else 0")
    dds_config: str | None = Field(
        None, description="dds transport: a Cyclone DDS XML file (e.g. to pin the interface); None: Cyclone's own"
    )

    @model_validator(mode="after")
    def _joints_when_needed(self) -> Ros2RobotConfig:
        if not self.joint_names and (self.command_type == "joint_trajectory" or self.observation is None):
            raise ValueError("joint_names: needed for joint_trajectory commands and without an observation map")
        if self.observation is not None:
            feature_shapes(self.observation)
        return self


class LeRobotRobotConfig(HardwareConfig):
    kind: Literal["lerobot"] = Field(default="lerobot", description="the kind, as registered in ROBOTS")
    safety: SafetyConfig = Field(description="the arm's safety limits (joint limits for its absolute joint commands)")
    type: str = Field(description="LeRobot's robot type (lerobot:<type>), e.g. so101_follower, koch_follower")
    port: str = Field(description="the arm's serial port, e.g. /dev/ttyACM0")
    settings: dict[str, Any] = Field(default_factory=dict, description="more fields of LeRobot's robot config")


ROBOTS: Registry[RobotKindConfig] = Registry("robot kind")
ROBOTS.register("sim", SimRobotsConfig, "vla_recover.fleet.backends:sim_workers", "the task in MuJoCo")
ROBOTS.register("fake", FakeRobotsConfig, "vla_recover.fleet.backends:fake_workers", "hardware.FakeRobot")
ROBOTS.register("ros2", Ros2RobotConfig, "vla_recover.fleet.backends:ros2_workers", "an arm on a ROS 2 graph")
ROBOTS.register("lerobot", LeRobotRobotConfig, "vla_recover.fleet.backends:lerobot_workers", "a LeRobot robot")


def robot_configs(robots: int | list[Any], fake_robots: int = 0) -> list[RobotKindConfig]:
    """A fleet config's ``robots`` (a sim count or a list of entries) as validated configs, ``fake_robots: N`` (the
    older shorthand) becoming ``{kind: fake, count: N}``; a `NestedConfigError` names ``robots[i].<field>``."""
    if isinstance(robots, int):
        if not 0 <= robots <= 256:
            raise ValueError(f"robots: got {robots}; a number of sim robots is 0 to 256 (or list the robots)")
        entries: list[Any] = [{"kind": "sim", "count": robots}] if robots else []
    else:
        if fake_robots:
            raise ValueError(
                f"fake_robots: got {fake_robots} beside a robots list; list them there: {{kind: fake, count: "
                f"{fake_robots}}}"
            )
        entries = list(robots)
    entries += [{"kind": "fake", "count": fake_robots}] if fake_robots else []
    configs = []
    for i, entry in enumerate(entries):
        field = f"robots[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("kind"), str):
            raise ValueError(f"{field}: expected a mapping with a kind, got {entry!r}")
        kind, _, variant = entry["kind"].partition(":")
        if kind not in ROBOTS:
            raise ValueError(f"{field}.kind: unknown robot kind {kind!r}; valid choices: {', '.join(ROBOTS.names())}")
        fields = {**entry, "kind": kind}
        if variant:  # sim:<task>, lerobot:<type>
            if kind not in VARIANT_FIELD:
                raise ValueError(f"{field}.kind: got {entry['kind']!r}; a {kind} robot takes no ':<variant>'")
            fields[VARIANT_FIELD[kind]] = variant
        configs.append(validate_nested(ROBOTS.get(kind).config_cls, fields, field))
    return configs


def slot_names(configs: list[RobotKindConfig]) -> list[list[str]]:
    """Each entry's robot names: its name (numbered when it counts several), or its kind numbered across the fleet;
    a name given twice is refused."""
    numbered: Counter[str] = Counter()
    names = []
    for config in configs:
        if config.name is not None and config.count == 1:
            names.append([config.name])
            continue
        prefix = config.name or config.kind
        first = numbered[prefix]
        numbered[prefix] += config.count
        names.append([f"{prefix}{first + i:02d}" for i in range(config.count)])
    repeated = sorted(name for name, n in Counter(n for group in names for n in group).items() if n > 1)
    if repeated:
        raise ValueError(f"robots: the names {repeated} are given to more than one robot")
    return names


class RobotFeatureError(ValueError):
    """A robot that does not present the task's observation or action features."""


def check_features(robot: Any, kind: str, task: str, observation: dict[str, tuple[int, ...]], action_dim: int) -> None:
    """Refuse ``robot`` (a `Robot`) unless it declares every observation feature of the task with its shape, and
    actions of the task's size; the error names the robot, the feature and both shapes."""
    declared = {key: tuple(shape) for key, shape in robot.observation_features.items()}
    for key, shape in observation.items():
        if key not in declared:
            raise RobotFeatureError(
                f"robot {robot.name!r} ({kind}) lacks the observation feature {key!r} {shape} that {task} needs; it "
                f"declares {declared}"
            )
        if declared[key] != tuple(shape):
            raise RobotFeatureError(
                f"robot {robot.name!r} ({kind}): observation feature {key!r} has shape {declared[key]}, {task} needs "
                f"{tuple(shape)}"
            )
    size = sum(math.prod(shape) for shape in robot.action_features.values())
    if size != action_dim:
        raise RobotFeatureError(
            f"robot {robot.name!r} ({kind}): its actions {dict(robot.action_features)} have {size} values, {task}'s "
            f"have {action_dim}"
        )
