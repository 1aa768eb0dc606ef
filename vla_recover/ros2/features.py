"""Which ROS 2 topics make up a robot's observation features, and how each message becomes (part of) an array.

A feature is one or more `TopicSource`s: vectors concatenate in the order listed (e.g. ``state`` = the arm's
``JointState`` positions, then the objects' poses as a ``Float64MultiArray``); an image feature is one
``sensor_msgs/Image`` topic. Shapes are declared in the config, so the features are known before connecting, as a
`Robot`'s must be. This module needs no DDS: the messages it reads are any objects with the ROS 2 fields.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from vla_recover.config import FrozenConfig

__all__ = ["TopicSource", "feature_shapes", "read_message"]


class TopicSource(FrozenConfig):
    """One topic's part of an observation feature."""

    topic: str = Field(pattern=r"^/", description="absolute ROS 2 topic, e.g. /arm_left/joint_states")
    type: Literal["joint_state", "float_array", "image"] = Field(
        description="sensor_msgs/JointState, std_msgs/Float64MultiArray or sensor_msgs/Image (rgb8 or bgr8)"
    )
    names: list[str] | None = Field(
        None, description="joint_state: these joints, in this order (None: every joint, in the message's order)"
    )
    field: Literal["position", "velocity", "effort"] = Field("position", description="joint_state: which values")
    shape: list[int] | None = Field(
        None,
        description="the values' shape: [n] for vectors, [height, width, 3] for images; joint_state with names: "
        "[len(names)] when omitted",
    )

    @model_validator(mode="after")
    def _shape_known(self) -> TopicSource:
        if self.shape is None and not (self.type == "joint_state" and self.names):
            raise ValueError(f"shape: {self.topic} needs its shape ([n], or [height, width, 3] for an image)")
        if self.type == "image" and (len(self.feature_shape) != 3 or self.feature_shape[2] != 3):
            raise ValueError(f"shape: an image is [height, width, 3], got {list(self.feature_shape)}")
        if self.type != "image" and len(self.feature_shape) != 1:
            raise ValueError(f"shape: a {self.type} is a vector [n], got {list(self.feature_shape)}")
        if any(n < 1 for n in self.feature_shape):
            raise ValueError(f"shape: sizes must be positive, got {list(self.feature_shape)}")
        return self

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return tuple(self.shape) if self.shape is not None else (len(self.names or []),)


def feature_shapes(observation: dict[str, list[TopicSource]]) -> dict[str, tuple[int, ...]]:
    """Each feature's shape: its vectors' sizes summed, or its one image's shape; a mix is refused."""
    shapes = {}
    for key, sources in observation.items():
        if not sources:
            raise ValueError(f"observation.{key}: no topics")
        images = [s for s in sources if s.type == "image"]
        if images and len(sources) > 1:
            raise ValueError(f"observation.{key}: an image feature is one image topic, got {len(sources)} topics")
        shapes[key] = images[0].feature_shape if images else (sum(s.feature_shape[0] for s in sources),)
    return shapes


def read_message(source: TopicSource, message: Any) -> np.ndarray:
    """The values ``message`` carries for ``source``; a ValueError says why it cannot be used (a missing joint, the
    wrong size, a non-finite value, an unknown image encoding)."""
    if source.type == "image":
        return _read_image(source, message)
    if source.type == "joint_state":
        values = np.asarray(getattr(message, source.field), dtype=np.float64)
        names = list(message.name)
        if source.names:
            missing = [n for n in source.names if n not in names]
            if missing or len(names) != len(values):
                raise ValueError(f"joints {missing or source.names} missing from {names} ({len(values)} values)")
            values = values[[names.index(n) for n in source.names]]
    else:
        values = np.asarray(message.data, dtype=np.float64)
    if values.shape != source.feature_shape:
        raise ValueError(f"{values.size} values, expected {math.prod(source.feature_shape)}")
    if not np.all(np.isfinite(values)):
        raise ValueError(f"non-finite values {values.tolist()}")
    return values


def _read_image(source: TopicSource, message: Any) -> np.ndarray:
    height, width, _ = source.feature_shape
    if (int(message.height), int(message.width)) != (height, width):
        raise ValueError(f"image of {message.height}x{message.width}, expected {height}x{width}")
    if message.encoding not in ("rgb8", "bgr8"):
        raise ValueError(f"image encoding {message.encoding!r} (rgb8, bgr8)")
    data = np.frombuffer(bytes(message.data), dtype=np.uint8)
    if data.size != int(message.step) * height or int(message.step) < 3 * width:
        raise ValueError(f"image data of {data.size} bytes for step {message.step} and height {height}")
    frame = data.reshape(height, int(message.step))[:, : 3 * width].reshape(height, width, 3)
    return frame[..., ::-1].copy() if message.encoding == "bgr8" else frame.copy()
