"""What backs each fleet slot, one factory per robot kind (``ROBOTS`` in vla_recover.fleet.robots names them): sim
workers (processes or Ray actors) and hardware robots, each of those behind the safety filter."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from vla_recover.envs import make_task, task_features
from vla_recover.fleet.robot_backend import RobotWorker
from vla_recover.fleet.robots import (
    FakeRobotsConfig,
    HardwareConfig,
    LeRobotRobotConfig,
    Ros2RobotConfig,
    SimRobotsConfig,
    check_features,
)
from vla_recover.fleet.worker import SimWorkerSpec, Worker, WorkerHandle, WorkerProcess
from vla_recover.hardware.robot import FakeRobot, Robot
from vla_recover.hardware.safety import SafeRobot, SafetyConfig

if TYPE_CHECKING:
    from vla_recover.fleet.config import FleetConfig

__all__ = [
    "SafetyTally",
    "SlotContext",
    "fake_workers",
    "hardware_workers",
    "lerobot_workers",
    "ros2_workers",
    "sim_workers",
]


class SafetyTally:
    """The safety filters' interventions per robot, counted by kind with the first and last reason, handed out as
    one summary per robot at a time (the fleet logs one event a second, not one a command). Filters report from
    their watchdog threads too, hence the lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, dict[str, dict[str, Any]]] = {}

    def reporter(self, robot: str) -> Callable[[str, dict[str, Any]], None]:
        def record(kind: str, payload: dict[str, Any]) -> None:
            reason = str(payload.get("reason") or payload.get("stale") or payload.get("requested") or "")
            with self._lock:
                tally = self._open.setdefault(robot, {}).setdefault(kind, {"count": 0, "first": reason})
                tally["count"] += 1
                tally["last"] = reason

        return record

    def take(self) -> dict[str, dict[str, dict[str, Any]]]:
        """Per robot, per kind: count, first and last reason since the last take."""
        with self._lock:
            taken, self._open = self._open, {}
        return taken


@dataclass
class SlotContext:
    """What a slot factory needs from the fleet: its config, the task, the sim workers' spec, and (read from a
    throwaway env only when a hardware slot asks) the task's features, horizon, instruction and start scene."""

    fleet: FleetConfig
    task: str
    dt: float
    spec: SimWorkerSpec
    action_dim: int
    safety: SafetyTally = field(default_factory=SafetyTally)

    @cached_property
    def probe(self) -> dict[str, Any]:
        env = make_task(self.task, self.fleet.task_config)
        try:
            observation, info = env.reset(seed=self.fleet.seed)
            return {
                "observation": task_features(env)[0],
                "horizon": int(env.unwrapped.config.horizon),
                "instruction": info["instruction"],
                "start": observation,
            }
        finally:
            env.close()


def sim_workers(config: SimRobotsConfig, names: list[str], context: SlotContext) -> list[Worker]:
    """One worker per sim robot: Ray actors, or slots of worker processes ``robots_per_process`` at a time."""
    fleet = context.fleet
    if fleet.backend == "ray":
        from vla_recover.fleet.ray_backend import RayWorkerHandle, init_ray

        init_ray(fleet.ray_address)
        return [RayWorkerHandle(context.spec, f"fleet-{name}", robot=name) for name in names]
    workers: list[Worker] = []
    per_process = fleet.robots_per_process
    for first in range(0, len(names), per_process):
        group = names[first : first + per_process]
        name = "fleet-" + "-".join(dict.fromkeys([group[0], group[-1]]))
        process = WorkerProcess(context.spec, len(group), name, robots=group)
        workers += [WorkerHandle(context.spec, f"fleet-{name}", process, i) for i, name in enumerate(group)]
    return workers


def hardware_workers(
    robots: list[Robot], config: HardwareConfig, names: list[str], context: SlotContext
) -> list[Worker]:
    """Each robot checked against the task's features, put behind its safety filter, and run as a fleet worker."""
    safety = config.safety or SafetyConfig(gripper_index=context.action_dim - 1, control_hz=1.0 / context.dt)
    workers: list[Worker] = []
    for robot, name in zip(robots, names, strict=True):
        check_features(robot, config.kind, context.task, context.probe["observation"], context.action_dim)
        safe = SafeRobot(robot, safety, on_event=context.safety.reporter(name))
        workers.append(
            RobotWorker(
                safe,
                name,
                context.probe["horizon"],
                context.probe["instruction"],
                command=safety.command,
                operator_resets=config.operator_resets,
            )
        )
    return workers


def fake_workers(config: FakeRobotsConfig, names: list[str], context: SlotContext) -> list[Worker]:
    """FakeRobot arms whose observations have the task's shape (the scene part fixed at the task's reset)."""
    scene = np.asarray(context.probe["start"]["state"][FakeRobot.PROPRIO_DIMS :])
    robots: list[Robot] = [
        FakeRobot(name, control_hz=1.0 / context.dt, workspace=config.workspace, scene=scene) for name in names
    ]
    return hardware_workers(robots, config, names, context)


def ros2_workers(config: Ros2RobotConfig, names: list[str], context: SlotContext) -> list[Worker]:
    """Arms on a ROS 2 graph, over Cyclone DDS directly or a sourced rclpy."""
    from vla_recover.ros2.arm import Ros2Arm
    from vla_recover.ros2.transport import make_transport

    robots: list[Robot] = [
        Ros2Arm(
            partial(make_transport, config.transport, f"vla_recover_{name}", config.domain_id, config.dds_config),
            config.joint_names,
            name=name,
            joint_states_topic=config.topics.joint_states,
            command_topic=config.topics.command,
            command_type=config.command_type,
            control_hz=1.0 / context.dt,
            home_position=config.home_position,
            connect_timeout_s=config.connect_timeout_s,
            observation=config.observation,
            action_size=len(config.joint_names) or context.action_dim,
            home_topic=config.topics.home,
            on_event=context.safety.reporter(name),  # its rejected messages, tallied with the filter's holds
        )
        for name in names
    ]
    return hardware_workers(robots, config, names, context)


def lerobot_workers(config: LeRobotRobotConfig, names: list[str], context: SlotContext) -> list[Worker]:
    """LeRobot robots built by LeRobot's own factory (where LeRobot is installed)."""
    from vla_recover.hardware.lerobot_robot import LeRobotRobot

    robots: list[Robot] = []
    for name in names:
        robot = LeRobotRobot.from_lerobot(config.type, config.port, **config.settings)
        robot.name = name
        robots.append(robot)
    return hardware_workers(robots, config, names, context)
