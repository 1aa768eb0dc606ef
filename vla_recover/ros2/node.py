"""The policy node: a promoted policy driving a robot over ROS 2 topics, behind the safety filter.

Subscribes joint states (``sensor_msgs/JointState``), cameras (``sensor_msgs/Image``), the instruction
(``std_msgs/String``), an e-stop (``std_msgs/Bool``: true latches it) and an e-stop reset (``std_msgs/String``: who
clears it); publishes the command as ``trajectory_msgs/JointTrajectory`` (the rest of the chunk, ``time_from_start``
per point) or ``std_msgs/Float64MultiArray`` (the position for now), and ``diagnostic_msgs/DiagnosticArray``.

Chunks run asynchronously: an inference thread computes the next chunk from a joint state that has just arrived
while the control loop keeps executing the current one; the new chunk's first action goes out as soon as it is
ready, and the control loop continues at its rate from there. A chunk is stamped with its observation's time,
action i being meant for ``t_obs + i / control_hz``; when it arrives, the actions whose time has already passed are
skipped, so the robot never snaps back to where it was when the observation was taken. Every command passes the
safety filter (joint limits, reach, velocity, e-stop latch); when joint states stop for ``safety.watchdog_s`` the
node commands a hold.
Malformed messages (NaN, wrong length, unknown joints) are rejected with a logged reason and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, model_validator

from vla_recover.config import FrozenConfig
from vla_recover.devices import DEVICE_HELP, DeviceName
from vla_recover.hardware.safety import SafetyConfig, SafetyFilter
from vla_recover.ros2 import idl
from vla_recover.ros2.commands import CommandType, command_struct, joint_command
from vla_recover.ros2.transport import Profile, Transport

__all__ = ["NodeConfig", "PolicyNode", "load_node_config"]

log = logging.getLogger(__name__)


class NodeConfig(FrozenConfig):
    joint_names: list[str] = Field(min_length=1, description="the joints of obs.state, in order")
    device: DeviceName = Field(default="auto", description=f"where the policy runs: {DEVICE_HELP}")
    joint_states_topic: str = Field(
        default="/joint_states",
        description="sensor_msgs/JointState in: the joint positions the policy reads and the watchdog waits on",
    )
    camera_topics: dict[str, str] = Field(default_factory=dict, description="policy image key → Image topic")
    instruction_topic: str = Field(default="/instruction", description="std_msgs/String in: the language instruction")
    instruction: str = Field("", description="used until an instruction arrives")
    estop_topic: str = Field(default="/estop", description="std_msgs/Bool in: true latches the e-stop")
    estop_reset_topic: str = Field(
        default="/estop_reset", description="std_msgs/String in: who clears the e-stop (empty is rejected)"
    )
    command_topic: str = Field(default="/joint_trajectory", description="out: the commands, as command_type")
    command_type: CommandType = Field(
        default="joint_trajectory",
        description="joint_trajectory: trajectory_msgs/JointTrajectory with the rest of the chunk; "
        "float64_multi_array: std_msgs/Float64MultiArray with the position for now",
    )
    diagnostics_topic: str = Field(default="/diagnostics", description="diagnostic_msgs/DiagnosticArray out")
    control_hz: float = Field(
        30.0, gt=0.0, le=1000.0, description="commands per second; the safety filter runs at this rate too"
    )
    diagnostics_period_s: float = Field(1.0, gt=0.0, description="seconds between diagnostics messages")
    sensor_qos: Profile = Field(
        default="sensor_data",
        description="QoS of the joint-state and camera subscriptions: sensor_data (best effort, keep last 5) or "
        "default (reliable, keep last 10)",
    )
    inference_lead_steps: int = Field(2, ge=0, description="ask for the next chunk this many actions early")
    safety: SafetyConfig = Field(
        description="the safety filter every command passes (joint_position: joint limits, velocity, watchdog_s); "
        "its control_hz and position_indices are the node's"
    )

    @model_validator(mode="after")
    def _joint_safety(self) -> NodeConfig:
        if self.safety.command != "joint_position":
            raise ValueError("safety.command: the node sends joint positions; use joint_position")
        if self.safety.low is not None and len(self.safety.low) != len(self.joint_names):
            raise ValueError(f"safety.low: {len(self.safety.low)} limits for {len(self.joint_names)} joints")
        return self


class PolicyNode:
    """``source`` is a chunk source (vla_recover.fleet.inference.PolicyChunks for a checkpoint)."""

    def __init__(self, config: NodeConfig, source: Any, transport: Transport) -> None:
        self.config, self.source, self.transport = config, source, transport
        self.dt = 1.0 / config.control_hz
        safety = config.safety.model_copy(
            update={"control_hz": config.control_hz, "position_indices": list(range(len(config.joint_names)))}
        )
        self.safety = SafetyFilter(safety, len(config.joint_names), on_event=self._on_safety_event)
        self.counts: Counter[str] = Counter()
        self.instruction = config.instruction
        self.images: dict[str, np.ndarray] = {}
        self.window: deque[dict[str, np.ndarray]] = deque(maxlen=source.obs_horizon)
        self.last_state_time = -np.inf
        self.chunk: deque[tuple[float, np.ndarray]] = deque()  # (meant-for time, action)
        self.latencies: deque[float] = deque(maxlen=500)  # inference seconds
        self.obs_to_command: deque[float] = deque(maxlen=500)  # seconds from a joint state's stamp to its first command
        self.last_state_stamp_ns = 0
        self._fresh_chunk_stamp_ns: int | None = None
        self.sent: deque[float] = deque(maxlen=200)  # times commands went out, for the rate
        self.received: deque[float] = deque(maxlen=200)
        self._lock = threading.Lock()
        self._wake_inference = threading.Event()
        self._tick_now = threading.Event()  # a fresh chunk: tick now rather than at the next period
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._publish_command: Any = None
        self._publish_diagnostics: Any = None

    # -- lifecycle --------------------------------------------------------------------------------------------------
    def start(self) -> None:
        missing = [
            key for key in self.source.obs_keys if key != "state" and f"obs.{key}" not in self.config.camera_topics
        ]
        if missing:
            raise ValueError(f"camera_topics: the policy reads obs.{missing[0]}; map it to an Image topic")
        t, c = self.transport, self.config
        self._publish_command = t.publisher(c.command_topic, command_struct(c.command_type))
        self._publish_diagnostics = t.publisher(c.diagnostics_topic, idl.DiagnosticArray)
        t.subscribe(c.joint_states_topic, idl.JointState, self._on_joint_state, profile=c.sensor_qos)
        for key, topic in c.camera_topics.items():
            t.subscribe(topic, idl.Image, self._image_callback(key), profile=c.sensor_qos)
        t.subscribe(c.instruction_topic, idl.String, self._on_instruction)
        t.subscribe(c.estop_topic, idl.Bool, self._on_estop)
        t.subscribe(c.estop_reset_topic, idl.String, self._on_estop_reset)
        for target, name in ((self._control_loop, "control"), (self._inference_loop, "inference")):
            thread = threading.Thread(target=target, name=f"policy-node-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._wake_inference.set()
        self._tick_now.set()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self.transport.close()

    # -- inputs -----------------------------------------------------------------------------------------------------
    def _reject(self, what: str, reason: str) -> None:
        self.counts[f"rejected_{what}"] += 1
        log.warning("rejected %s: %s", what, reason)

    def _on_joint_state(self, message: idl.JointState) -> None:
        names, positions = list(message.name), np.asarray(message.position, dtype=np.float64)
        if len(positions) != len(names) and names:
            return self._reject("joint_state", f"{len(names)} names but {len(positions)} positions")
        if names:
            unknown = [n for n in self.config.joint_names if n not in names]
            if unknown:
                return self._reject("joint_state", f"no joint {unknown[0]!r} (has {', '.join(names)})")
            positions = positions[[names.index(n) for n in self.config.joint_names]]
        elif len(positions) != len(self.config.joint_names):
            return self._reject("joint_state", f"{len(positions)} positions for {len(self.config.joint_names)} joints")
        if not np.all(np.isfinite(positions)):
            return self._reject("joint_state", f"non-finite positions {positions.tolist()}")
        now = time.monotonic()
        with self._lock:
            observation = {"state": positions.astype(np.float32), **self.images}
            if not self.window:
                self.window.extend([observation] * (self.window.maxlen or 1))
            self.window.append(observation)
            self.last_state_time = now
            self.last_state_stamp_ns = message.header.stamp.to_ns() or time.time_ns()
            self.received.append(now)
            self.safety.observe({"state": positions})
        self._wake_inference.set()
        return None

    def _image_callback(self, key: str) -> Any:
        return lambda message: self._on_image(key, message)

    def _on_image(self, key: str, message: idl.Image) -> None:
        from vla_recover.ros2.messages import IMAGE, from_message

        try:
            frame = from_message(message, IMAGE)
        except ValueError as problem:
            return self._reject("image", str(problem))
        with self._lock:
            self.images[key.removeprefix("obs.")] = np.asarray(frame)
        return None

    def _on_instruction(self, message: idl.String) -> None:
        with self._lock:
            self.instruction = message.data

    def _on_estop(self, message: idl.Bool) -> None:
        if message.data:
            with self._lock:
                self.safety.estop("ros2", f"{self.config.estop_topic} is true")
                self.chunk.clear()
            self._send(self.safety.hold(), [])

    def _on_estop_reset(self, message: idl.String) -> None:
        who = message.data.strip()
        if not who:
            return self._reject("estop_reset", "an e-stop reset must name who clears it")
        with self._lock:
            self.safety.clear_estop(who)
        return None

    def _on_safety_event(self, kind: str, payload: dict[str, Any]) -> None:
        self.counts[f"safety_{kind}"] += 1

    # -- the loops --------------------------------------------------------------------------------------------------
    def _inference_loop(self) -> None:
        while not self._stop.is_set():
            self._wake_inference.wait(timeout=0.1)
            self._wake_inference.clear()
            with self._lock:
                ready = bool(self.window) and not self.safety.estopped
                needed = len(self.chunk) <= self.config.inference_lead_steps
                window, instruction, observed_at = list(self.window), self.instruction, self.last_state_time
                observed_stamp_ns = self.last_state_stamp_ns
            # plan from a joint state that just arrived (the next one wakes this loop), not one a period old
            if not (ready and needed) or time.monotonic() - observed_at > self.dt / 4:
                continue
            started = time.monotonic()
            chunk = np.asarray(self.source.predict([deque(window)], [instruction])[0], dtype=np.float64)
            chunk = chunk[: max(self.source.action_exec, self.config.inference_lead_steps + 1)]
            done = time.monotonic()
            self.latencies.append(done - started)
            schedule = [(observed_at + i * self.dt, action) for i, action in enumerate(chunk)]
            fresh = [(t, a) for t, a in schedule if t >= done - self.dt / 2]
            self.counts["skipped_stale_actions"] += len(schedule) - len(fresh)
            with self._lock:
                if not self.safety.estopped:
                    self.chunk = deque(fresh)
                    self._fresh_chunk_stamp_ns = observed_stamp_ns
                    self.counts["chunks"] += 1
            self._tick_now.set()  # its first action goes out now; the control loop re-phases to it

    def _control_loop(self) -> None:
        next_tick, next_diagnostics = time.monotonic(), time.monotonic() + self.config.diagnostics_period_s
        while not self._stop.is_set():
            early = self._tick_now.wait(max(0.0, next_tick - time.monotonic()))
            self._tick_now.clear()
            if self._stop.is_set():
                break
            now = time.monotonic()
            next_tick = (now if early else next_tick) + self.dt
            with self._lock:
                if now - self.last_state_time > self.config.safety.watchdog_s and np.isfinite(self.last_state_time):
                    command, rest = self.safety.watchdog(), []
                    self.chunk.clear()
                else:
                    while self.chunk and self.chunk[0][0] < now - self.dt / 2:  # late: its time has passed
                        self.chunk.popleft()
                    if self.chunk and np.isfinite(self.last_state_time):
                        _, action = self.chunk.popleft()
                        command, rest = self.safety.filter(action), [a for _, a in self.chunk]
                        if self._fresh_chunk_stamp_ns is not None:  # the first command planned from that observation
                            self.obs_to_command.append((time.time_ns() - self._fresh_chunk_stamp_ns) / 1e9)
                            self._fresh_chunk_stamp_ns = None
                    else:
                        command, rest = None, []
                if len(self.chunk) <= self.config.inference_lead_steps:
                    self._wake_inference.set()
            if command is not None:
                self._send(command, rest)
            if now >= next_diagnostics:
                self._publish_diagnostics(self.diagnostics())
                next_diagnostics = now + self.config.diagnostics_period_s

    # -- outputs ----------------------------------------------------------------------------------------------------
    def _send(self, command: np.ndarray, rest: list[np.ndarray]) -> None:
        points = [command, *self.safety.bound_following(command, rest)]
        self._publish_command(joint_command(points, self.config.joint_names, self.dt, self.config.command_type))
        self.sent.append(time.monotonic())

    @staticmethod
    def _rate(times: deque[float]) -> float:
        if len(times) < 2 or times[-1] == times[0]:
            return 0.0
        return (len(times) - 1) / (times[-1] - times[0])

    def diagnostics(self) -> idl.DiagnosticArray:
        latencies = np.asarray(self.latencies) * 1e3
        obs_to_command = np.asarray(self.obs_to_command) * 1e3
        values = {
            "obs_to_command_p50_ms": f"{np.percentile(obs_to_command, 50):.1f}" if obs_to_command.size else "nan",
            "obs_to_command_p99_ms": f"{np.percentile(obs_to_command, 99):.1f}" if obs_to_command.size else "nan",
            "command_rate_hz": f"{self._rate(self.sent):.1f}",
            "joint_state_rate_hz": f"{self._rate(self.received):.1f}",
            "inference_p50_ms": f"{np.percentile(latencies, 50):.1f}" if latencies.size else "nan",
            "inference_p99_ms": f"{np.percentile(latencies, 99):.1f}" if latencies.size else "nan",
            "estopped": str(self.safety.estopped).lower(),
            **{key: str(value) for key, value in sorted((self.counts + self.safety.counts).items())},
        }
        stale = time.monotonic() - self.last_state_time > self.config.safety.watchdog_s
        level, text = (2, "e-stopped") if self.safety.estopped else (1, "joint states stale") if stale else (0, "ok")
        status = idl.DiagnosticStatus(
            level, "vla_recover/policy_node", text, "", [idl.KeyValue(k, v) for k, v in values.items()]
        )
        return idl.DiagnosticArray(idl.Header(idl.Time.from_ns(time.time_ns()), ""), [status])


def load_node_config(path: str | Path) -> NodeConfig:
    from vla_recover.config import load_yaml, validate_config

    return validate_config(NodeConfig, load_yaml(path), source=str(path))
