"""A new robot kind: ``standin`` puts the stand-in arm (a MuJoCo task that speaks ROS 2, vla_recover.ros2.standin)
in the fleet's own process, so one line of a fleet config, ``{kind: standin, name: arm}``, is a ROS 2 arm slot.

A kind is one module and one registry line: a config class (a `HardwareConfig`, so it carries safety limits), the
`Robot` it drives (here a `Ros2Arm` that starts its stand-in on connect and stops it on disconnect), and a slot
factory that hands the robots to `hardware_workers` (the task's feature check, the safety filter, the fleet worker).

    python examples/extending/new_robot.py
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from vla_recover.config import validate_config
from vla_recover.fleet import FleetConfig, FleetManager
from vla_recover.fleet.backends import SlotContext, hardware_workers
from vla_recover.fleet.robots import ROBOTS, HardwareConfig
from vla_recover.fleet.worker import Worker
from vla_recover.hardware.robot import Robot
from vla_recover.ros2.arm import Ros2Arm
from vla_recover.ros2.features import TopicSource
from vla_recover.ros2.standin import StandInArm
from vla_recover.ros2.transport import DdsTransport


class StandInRobotsConfig(HardwareConfig):
    kind: Literal["standin"] = Field(default="standin", description="the kind, as registered in ROBOTS")
    dds_config: str | None = Field(None, description="a Cyclone DDS XML file (e.g. loopback only); None: its default")
    operator_resets: bool = Field(False, description="the stand-in resets its own scene when it is homed")


class StandInRobot(Ros2Arm):
    """A ROS 2 arm whose driver is a stand-in this robot runs on a thread of its own while it is connected."""

    def __init__(self, task: str, name: str, dds_config: str | None, on_event: Any = None) -> None:
        self.standin = StandInArm(task, f"/{name}")
        entry = self.standin.robot_entry(name)  # the ros2 entry that maps the stand-in's topics onto the task
        observation = {
            key: [TopicSource.model_validate(source) for source in sources]
            for key, sources in entry["observation"].items()
        }
        self.dds_config = dds_config
        super().__init__(
            lambda: DdsTransport(config=dds_config),
            [],
            name=name,
            command_topic=entry["topics"]["command"],
            command_type="float64_multi_array",
            control_hz=self.standin.control_hz,
            observation=observation,
            action_size=int(self.standin.env.action_space.shape[0]),
            home_topic=entry["topics"]["home"],
            on_event=on_event,
        )
        self._serving: tuple[threading.Thread, threading.Event] | None = None

    def connect(self) -> None:
        if self._serving is None:
            self.standin.start(DdsTransport(config=self.dds_config))
            stop = threading.Event()
            thread = threading.Thread(target=self.standin.run, kwargs={"stop": stop}, name=f"{self.name}-standin")
            thread.start()
            self._serving = (thread, stop)
        super().connect()

    def disconnect(self) -> None:
        super().disconnect()
        if self._serving is not None:
            thread, stop = self._serving
            stop.set()
            thread.join(timeout=5.0)
            self._serving = None
        self.standin.close()


def standin_workers(config: StandInRobotsConfig, names: list[str], context: SlotContext) -> list[Worker]:
    robots: list[Robot] = [
        StandInRobot(context.task, name, config.dds_config, on_event=context.safety.reporter(name)) for name in names
    ]
    return hardware_workers(robots, config, names, context)


ROBOTS.register("standin", StandInRobotsConfig, f"{__name__}:standin_workers", "the stand-in arm, in-process")


def main(work: Path | None = None, dds_config: str | None = None) -> dict[str, Any]:
    """Two sim robots and a stand-in arm run a constant action for six episodes; the run's summary."""
    with tempfile.TemporaryDirectory() as tmp:
        store = (work or Path(tmp)) / "store"
        config = validate_config(FleetConfig, {
            "task": "LiftCube", "episodes": 6, "store": str(store), "task_config": {"horizon": 30},
            "robots": [{"kind": "sim", "count": 2}, {"kind": "standin", "name": "arm", "dds_config": dds_config}],
            "constant_action": [0.0, 0.0, -0.2, 0.0, -1.0],
            "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False},
        })  # fmt: skip
        return FleetManager(config).run()


if __name__ == "__main__":
    print(main())
