"""Arrays ↔ ROS 2 messages, with the ROS 2 type definitions and CDR encoding of the pure-Python `rosbags` library.

Which message carries what: float vectors and arrays as ``std_msgs/msg/Float64MultiArray`` (the layout keeps the
shape), camera frames (H, W, 3) uint8 as ``sensor_msgs/msg/Image`` (``rgb8``), text as ``std_msgs/msg/String``.
Reading also takes ``sensor_msgs/msg/JointState`` (positions) and ``trajectory_msgs/msg/JointTrajectory`` (the
first point's positions), what a real arm's recording holds.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

__all__ = [
    "FLOAT_ARRAY",
    "IMAGE",
    "JOINT_STATE",
    "JOINT_TRAJECTORY",
    "STRING",
    "decode",
    "from_message",
    "message_type",
    "to_message",
    "typestore",
]

FLOAT_ARRAY = "std_msgs/msg/Float64MultiArray"
IMAGE = "sensor_msgs/msg/Image"
STRING = "std_msgs/msg/String"
JOINT_STATE = "sensor_msgs/msg/JointState"
JOINT_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"


@cache
def typestore() -> Any:
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_HUMBLE)


def _stamp(nanoseconds: int) -> Any:
    types = typestore().types
    time = types["builtin_interfaces/msg/Time"](sec=nanoseconds // 10**9, nanosec=nanoseconds % 10**9)
    return types["std_msgs/msg/Header"](stamp=time, frame_id="")


def message_type(value: np.ndarray | str) -> str:
    if isinstance(value, str):
        return STRING
    value = np.asarray(value)
    if value.dtype == np.uint8 and value.ndim == 3 and value.shape[-1] == 3:
        return IMAGE
    return FLOAT_ARRAY


def to_message(value: np.ndarray | str, nanoseconds: int = 0) -> tuple[str, bytes]:
    """(ROS 2 type name, CDR bytes) of one step's value."""
    types = typestore().types
    kind = message_type(value)
    if kind == STRING:
        message = types[STRING](data=value)
    elif kind == IMAGE:
        frame = np.ascontiguousarray(value, dtype=np.uint8)
        height, width, _ = frame.shape
        message = types[IMAGE](header=_stamp(nanoseconds), height=height, width=width, encoding="rgb8",
                               is_bigendian=0, step=3 * width, data=frame.reshape(-1))  # fmt: skip
    else:
        array = np.asarray(value, dtype=np.float64)
        strides = [int(np.prod(array.shape[i:])) for i in range(array.ndim)]  # ROS: elements under each dim
        dims = [types["std_msgs/msg/MultiArrayDimension"](label=f"d{i}", size=int(n), stride=int(s))
                for i, (n, s) in enumerate(zip(array.shape, strides, strict=True))]  # fmt: skip
        layout = types["std_msgs/msg/MultiArrayLayout"](dim=dims, data_offset=0)
        message = types[FLOAT_ARRAY](layout=layout, data=array.reshape(-1))
    return kind, typestore().serialize_cdr(message, kind)


def decode(raw: bytes, kind: str) -> Any:
    return typestore().deserialize_cdr(raw, kind)


def from_message(message: Any, kind: str) -> np.ndarray | str:
    """The array (or text) a message carries."""
    if kind == STRING:
        return str(message.data)
    if kind == IMAGE:
        if message.encoding not in ("rgb8", "bgr8"):
            raise ValueError(f"image encoding: {message.encoding!r} is not supported (rgb8, bgr8)")
        frame = np.asarray(message.data, dtype=np.uint8).reshape(message.height, message.step)[:, : 3 * message.width]
        frame = frame.reshape(message.height, message.width, 3)
        return frame[..., ::-1].copy() if message.encoding == "bgr8" else frame
    if kind == FLOAT_ARRAY:
        shape = tuple(int(d.size) for d in message.layout.dim)
        data = np.asarray(message.data, dtype=np.float64)
        return data.reshape(shape) if shape and int(np.prod(shape)) == data.size else data
    if kind == JOINT_STATE:
        return np.asarray(message.position, dtype=np.float64)
    if kind == JOINT_TRAJECTORY:
        if not message.points:
            raise ValueError("JointTrajectory: no points")
        return np.asarray(message.points[0].positions, dtype=np.float64)
    raise ValueError(f"message type {kind!r} is not supported ({FLOAT_ARRAY}, {IMAGE}, {STRING}, {JOINT_STATE}, "
                     f"{JOINT_TRAJECTORY})")  # fmt: skip
