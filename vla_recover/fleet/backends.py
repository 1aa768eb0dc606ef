"""What backs each fleet slot: sim workers (processes or Ray actors) and hardware robots."""

from __future__ import annotations

from vla_recover.envs import make_task
from vla_recover.fleet.config import FleetConfig
from vla_recover.fleet.robot_backend import RobotWorker
from vla_recover.fleet.worker import SimWorkerSpec, Worker, WorkerHandle, WorkerProcess
from vla_recover.hardware.robot import FakeRobot

__all__ = ["fake_robot_workers", "sim_workers"]


def sim_workers(config: FleetConfig, spec: SimWorkerSpec) -> list[Worker]:
    """One worker per sim robot: Ray actors, or slots of worker processes ``robots_per_process`` at a time."""
    count = config.robots
    if config.backend == "ray":
        from vla_recover.fleet.ray_backend import RayWorkerHandle, init_ray

        init_ray(config.ray_address)
        return [RayWorkerHandle(spec, f"fleet-sim{i:02d}") for i in range(count)]
    workers: list[Worker] = []
    per_process = config.robots_per_process
    for first in range(0, count, per_process):
        size = min(per_process, count - first)
        process = WorkerProcess(spec, size, f"fleet-sim{first:02d}" + (f"-{first + size - 1:02d}" if size > 1 else ""))
        workers += [WorkerHandle(spec, f"fleet-sim{first + i:02d}", process, i) for i in range(size)]
    return workers


def fake_robot_workers(config: FleetConfig, task: str, dt: float) -> list[tuple[str, Worker]]:
    """FakeRobot slots whose observations have the task's shape (the scene part fixed at the task's reset)."""
    if not config.fake_robots:
        return []
    probe = make_task(task, config.task_config)
    try:
        obs, info = probe.reset(seed=config.seed)
        horizon = int(probe.unwrapped.config.horizon)
    finally:
        probe.close()
    scene = obs["state"][FakeRobot.PROPRIO_DIMS :]
    workers: list[tuple[str, Worker]] = []
    for i in range(config.fake_robots):
        robot = f"fake{i:02d}"
        arm = FakeRobot(robot, control_hz=1.0 / dt, scene=scene)
        workers.append((robot, RobotWorker(arm, robot, horizon, info["instruction"])))
    return workers
