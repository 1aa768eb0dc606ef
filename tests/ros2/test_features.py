"""Observation features read from ROS 2 topics: joints picked by name, arrays and images checked before use."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from vla_recover.ros2.features import TopicSource, feature_shapes, read_message


def source(**fields: object) -> TopicSource:
    return TopicSource.model_validate({"topic": "/arm/x", **fields})


def test_joint_states_are_read_by_name_in_the_configured_order() -> None:
    joints = source(type="joint_state", names=["b", "a"])
    message = SimpleNamespace(name=["a", "b", "c"], position=[1.0, 2.0, 3.0], velocity=[], effort=[])
    np.testing.assert_array_equal(read_message(joints, message), [2.0, 1.0])
    with pytest.raises(ValueError, match=r"joints \['b'\] missing from \['a', 'c'\]"):
        read_message(joints, SimpleNamespace(name=["a", "c"], position=[1.0, 3.0]))
    speeds = source(type="joint_state", field="velocity", shape=[2])
    np.testing.assert_array_equal(read_message(speeds, SimpleNamespace(name=[], velocity=[0.5, -0.5])), [0.5, -0.5])


def test_arrays_of_the_wrong_size_or_with_non_finite_values_are_refused() -> None:
    poses = source(type="float_array", shape=[3])
    np.testing.assert_array_equal(read_message(poses, SimpleNamespace(data=[1.0, 2.0, 3.0])), [1, 2, 3])
    with pytest.raises(ValueError, match="2 values, expected 3"):
        read_message(poses, SimpleNamespace(data=[1.0, 2.0]))
    with pytest.raises(ValueError, match="non-finite"):
        read_message(poses, SimpleNamespace(data=[1.0, np.inf, 3.0]))


def test_images_are_rgb_of_the_declared_size() -> None:
    camera = source(type="image", shape=[2, 3, 3])
    frame = np.arange(18, dtype=np.uint8).reshape(2, 3, 3)
    message = SimpleNamespace(height=2, width=3, encoding="bgr8", step=9, data=frame[..., ::-1].tobytes())
    np.testing.assert_array_equal(read_message(camera, message), frame)
    with pytest.raises(ValueError, match="image of 4x3, expected 2x3"):
        read_message(camera, SimpleNamespace(height=4, width=3, encoding="rgb8", step=9, data=b""))
    with pytest.raises(ValueError, match="encoding 'mono8'"):
        read_message(camera, SimpleNamespace(height=2, width=3, encoding="mono8", step=3, data=b""))


def test_a_feature_concatenates_vectors_and_takes_one_image() -> None:
    arm, objects = source(type="joint_state", names=["a", "b"]), source(type="float_array", shape=[4])
    assert feature_shapes({"state": [arm, objects]}) == {"state": (6,)}
    with pytest.raises(ValueError, match=r"observation.images.front: an image feature is one image topic"):
        feature_shapes({"images.front": [source(type="image", shape=[2, 2, 3]), objects]})
