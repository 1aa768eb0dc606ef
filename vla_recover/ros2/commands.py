"""The command messages a joint-position arm takes, built in one place for the policy node and `Ros2Arm`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from vla_recover.ros2 import idl

__all__ = ["CommandType", "command_struct", "joint_command"]

CommandType = Literal["joint_trajectory", "float64_multi_array"]


def command_struct(command_type: CommandType) -> type:
    return idl.JointTrajectory if command_type == "joint_trajectory" else idl.Float64MultiArray


def joint_command(
    points: Sequence[np.ndarray], joint_names: Sequence[str], dt: float, command_type: CommandType
) -> Any:
    """A JointTrajectory with point i due ``(i + 1) * dt`` from now, or a Float64MultiArray of the first point."""
    if command_type == "float64_multi_array":
        values = [float(v) for v in points[0]]
        return idl.Float64MultiArray(
            idl.MultiArrayLayout([idl.MultiArrayDimension("joints", len(values), len(values))], 0), values
        )
    trajectory = [
        idl.JointTrajectoryPoint([float(v) for v in point], [], [], [], idl.Duration.from_ns(round((i + 1) * dt * 1e9)))
        for i, point in enumerate(points)
    ]
    return idl.JointTrajectory(idl.Header(idl.Time.from_ns(time.time_ns()), ""), list(joint_names), trajectory)
