"""A stand-in arm: one of the project's MuJoCo tasks on a ROS 2 graph, speaking the topics a real arm's driver speaks.

Under ``namespace`` (``/arm`` below) it publishes
- ``/arm/joint_states`` (sensor_msgs/JointState): the robot's entries of the task's state, named by the task's labels,
- ``/arm/object_poses`` (std_msgs/Float64MultiArray): the rest of the state, the objects' poses,
- ``/arm/camera/<name>/image_raw`` (sensor_msgs/Image, rgb8): each camera of the task config,
- ``/arm/status`` (std_msgs/String): JSON of the episode's step, phase, progress and success, for people and tests;
and takes
- ``/arm/command`` (std_msgs/Float64MultiArray): the task's action; each command steps the sim one control period,
- ``/arm/home`` (std_msgs/String): homes the arm and resets the scene to the next seed (the floor operator's reset),
- ``/arm/fault`` (std_msgs/String): a JSON fault to inject: ``{"kind": "drop", "count": n}`` drops the next n
  observations, ``{"kind": "stall", "seconds": s}`` publishes nothing for s seconds, ``{"kind": "nan" | "out_of_range"
  | "short", "count": n}`` publishes n malformed joint states (a NaN, positions 100 m away, a value missing).
Without commands it republishes its observation at the control rate, as an arm holding still does. So one policy
drives the fleet's sim slots and this ROS 2 slot alike, and the fleet's faults can be rehearsed without an arm.
``trace`` keeps the latest timeline (monotonic seconds): ``("step", t)`` and ``("idle", t)`` observations published
after a command or while holding still, ``("command", t, translation)`` commands as they arrive, which is what
`benchmarks/ros2_latency.py` reads its latencies from.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_recover.ros2 import idl

__all__ = ["StandInArm"]

log = logging.getLogger(__name__)
FAULT_KINDS = ("drop", "stall", "nan", "out_of_range", "short")


@dataclass
class _Faults:
    drop: int = 0
    nan: int = 0
    out_of_range: int = 0
    short: int = 0
    stall_until: float = -math.inf


class StandInArm:
    def __init__(self, task: str, namespace: str = "/arm", task_config: Any = None, seed: int = 0) -> None:
        from vla_recover.envs import make_task, resolve_task_name

        if not namespace.startswith("/") or namespace.endswith("/"):
            raise ValueError(f"namespace: {namespace!r} must start with '/' and not end with one")
        self.task, self.namespace, self.seed = resolve_task_name(task), namespace, seed
        self.env = make_task(self.task, task_config)
        self.control_hz = float(self.env.unwrapped.CONTROL_HZ)
        labels = self.env.unwrapped.state_labels
        self.robot_size = self.env.unwrapped.robot_state_size
        self.joint_names, self.object_size = list(labels[: self.robot_size]), len(labels) - self.robot_size
        self.cameras = [key.removeprefix("images.") for key in self.env.observation_space.spaces if key != "state"]
        self.transport: Any = None
        self._inbox: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.trace: deque[tuple[Any, ...]] = deque(maxlen=100_000)
        self._faults = _Faults()
        self.steps = self.rejected_commands = 0
        self._observation, self._info = self.env.reset(seed=seed)
        self._publish: dict[str, Any] = {}

    def topic(self, name: str) -> str:
        return f"{self.namespace}/{name}"

    def robot_entry(self, name: str) -> dict[str, Any]:
        """The fleet's ``robots`` entry (kind ros2) that maps this arm's topics onto the task's features."""
        state = [
            {"topic": self.topic("joint_states"), "type": "joint_state", "names": self.joint_names},
            {"topic": self.topic("object_poses"), "type": "float_array", "shape": [self.object_size]},
        ]
        observation: dict[str, Any] = {"state": state}
        for camera in self.cameras:
            shape = list(self.env.observation_space.spaces[f"images.{camera}"].shape)
            observation[f"images.{camera}"] = [
                {"topic": self.topic(f"camera/{camera}/image_raw"), "type": "image", "shape": shape}
            ]
        return {
            "kind": "ros2",
            "name": name,
            "observation": observation,
            "topics": {"command": self.topic("command"), "home": self.topic("home")},
            "command_type": "float64_multi_array",
            "transport": "dds",
            "safety": {
                "command": "ee_delta",
                "gripper_index": int(self.env.unwrapped.GRIPPER_INDEX),
                "control_hz": self.control_hz,
            },
        }

    # -- the graph ---------------------------------------------------------------------------------------------------
    def start(self, transport: Any) -> None:
        """Join the graph through ``transport`` (vla_recover.ros2.transport); `run` then serves."""
        self.transport = transport
        publish = transport.publisher
        self._publish = {
            "joint_states": publish(self.topic("joint_states"), idl.JointState, "sensor_data"),
            "object_poses": publish(self.topic("object_poses"), idl.Float64MultiArray, "sensor_data"),
            "status": publish(self.topic("status"), idl.String),
            **{c: publish(self.topic(f"camera/{c}/image_raw"), idl.Image, "sensor_data") for c in self.cameras},
        }
        # callbacks only queue: the loop thread steps the sim and publishes, never a DDS callback
        self.transport.subscribe(self.topic("command"), idl.Float64MultiArray, self._on_command)
        self.transport.subscribe(self.topic("home"), idl.String, lambda m: self._inbox.put(("home", m)))
        self.transport.subscribe(self.topic("fault"), idl.String, lambda m: self._inbox.put(("fault", m)))

    def _on_command(self, message: Any) -> None:
        self.trace.append(("command", time.monotonic(), float(np.abs(np.asarray(message.data[:3])).sum())))
        self._inbox.put(("step", message))

    def run(self, seconds: float | None = None, stop: threading.Event | None = None) -> None:
        """Serve until ``seconds`` pass or ``stop`` is set: step on each command, republish while idle."""
        end = time.monotonic() + seconds if seconds is not None else math.inf
        period = 1.0 / self.control_hz
        self._publish_observation()
        while time.monotonic() < end and not (stop is not None and stop.is_set()):
            try:
                kind, message = self._inbox.get(timeout=period)
            except queue.Empty:
                self._publish_observation("idle")  # holding still
                continue
            if kind == "step":
                self._step(message)
            elif kind == "home":
                self._home(message)
            else:
                self._inject(message)

    def _step(self, message: Any) -> None:
        action = np.asarray(message.data, dtype=np.float64)
        space = self.env.action_space
        if action.shape != space.shape or not np.all(np.isfinite(action)):
            self.rejected_commands += 1  # a driver refuses what it cannot execute; the arm stays put
            log.warning("%s: command of %d values refused", self.namespace, action.size)
        else:
            self._observation, _, terminated, truncated, self._info = self.env.step(
                np.clip(action, space.low, space.high)
            )
            self._info = {**self._info, "terminated": bool(terminated), "truncated": bool(truncated)}
            self.steps += 1
        self._publish_observation("step")

    def _home(self, message: Any) -> None:
        try:
            self.seed = int(json.loads(message.data)["seed"])
        except (ValueError, TypeError, KeyError):
            self.seed += 1
        self._observation, self._info = self.env.reset(seed=self.seed)
        self._publish_observation()

    def _inject(self, message: Any) -> None:
        try:
            fault = json.loads(message.data)
            kind = fault["kind"]
            if kind not in FAULT_KINDS:
                raise ValueError(f"kind {kind!r} (valid: {', '.join(FAULT_KINDS)})")
            if kind == "stall":
                self._faults.stall_until = time.monotonic() + float(fault["seconds"])
            else:
                setattr(self._faults, kind, getattr(self._faults, kind) + int(fault.get("count", 1)))
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("%s: fault %r ignored: %s", self.namespace, message.data, exc)

    # -- publishing ---------------------------------------------------------------------------------------------------
    def _publish_observation(self, why: str = "idle") -> None:
        faults = self._faults
        if time.monotonic() < faults.stall_until:
            return
        if faults.drop > 0:
            faults.drop -= 1
            return
        state = np.asarray(self._observation["state"], dtype=np.float64)
        arm, objects = state[: self.robot_size].copy(), state[self.robot_size :]
        names = list(self.joint_names)
        if faults.nan > 0:
            faults.nan, arm[0] = faults.nan - 1, np.nan
        elif faults.out_of_range > 0:
            faults.out_of_range, arm[:3] = faults.out_of_range - 1, arm[:3] + 100.0
        elif faults.short > 0:
            faults.short, arm, names = faults.short - 1, arm[:-1], names[:-1]
        header = idl.Header(idl.Time.from_ns(time.time_ns()), self.namespace.strip("/"))
        self._publish["joint_states"](idl.JointState(header, names, arm.tolist(), [], []))
        layout = idl.MultiArrayLayout([idl.MultiArrayDimension("objects", len(objects), len(objects))], 0)
        self._publish["object_poses"](idl.Float64MultiArray(layout, objects.tolist()))
        for camera in self.cameras:
            frame = np.ascontiguousarray(self._observation[f"images.{camera}"], dtype=np.uint8)
            height, width, _ = frame.shape
            image = idl.Image(header, height, width, "rgb8", 0, 3 * width, frame.reshape(-1).tolist())
            self._publish[camera](image)
        status = {key: self._info.get(key) for key in ("step", "phase", "progress", "is_success")}
        self._publish["status"](idl.String(json.dumps({**status, "seed": self.seed, "commands": self.steps})))
        self.trace.append((why, time.monotonic()))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.env.close()
