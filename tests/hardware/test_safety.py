"""The safety filter: no output ever breaks the configured limits whatever the input; watchdog and e-stop latch."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_recover.config import ConfigError, validate_config
from vla_recover.hardware.robot import FakeRobot
from vla_recover.hardware.safety import SafeRobot, SafetyConfig, SafetyFilter

EPS = 1e-9
numbers = st.floats(allow_nan=True, allow_infinity=True, width=64) | st.floats(-10.0, 10.0)
commands = st.lists(numbers, min_size=0, max_size=8) | st.lists(st.floats(-3.0, 3.0), min_size=6, max_size=6)

JOINTS = validate_config(
    SafetyConfig,
    {"command": "joint_position", "low": [-1.5, -1.0, -2.0, -1.0, -1.0, 0.0], "high": [1.5, 1.0, 2.0, 1.0, 1.0, 0.8],
     "max_relative_target": 0.1, "max_velocity": 1.0, "position_indices": [0, 1, 2, 3, 4, 5]},
)  # fmt: skip
# measured positions the filter accepts: inside the joint limits, or no further outside than its margin
positions = st.tuples(
    *(st.floats(lo - 0.05, hi + 0.05) for lo, hi in zip(JOINTS.low or [], JOINTS.high or [], strict=True))
)
EE = validate_config(
    SafetyConfig,
    {"command": "ee_delta", "workspace": {"low": [-0.3, -0.3, 0.0], "high": [0.3, 0.3, 0.4]}, "max_velocity": 20.0},
)


@settings(max_examples=300, deadline=None)
@given(present=positions, sequence=st.lists(commands, min_size=1, max_size=6))
def test_joint_commands_never_leave_the_limits(present: tuple[float, ...], sequence: list[list[float]]) -> None:
    safety = SafetyFilter(JOINTS, 6)
    assert safety.observe({"state": np.asarray(present)})
    here = np.asarray(present)
    for command in sequence:
        previous = safety.previous
        out = safety.filter(command)
        assert out.shape == (6,) and np.all(np.isfinite(out))
        assert np.all(out >= safety.low - EPS) and np.all(out <= safety.high + EPS)
        # where the limits can all be met, they are: near the present position, a bounded step from the last command
        lo = np.maximum.reduce([safety.low, here - 0.1, (previous if previous is not None else here) - 1.0 / 20])
        hi = np.minimum.reduce([safety.high, here + 0.1, (previous if previous is not None else here) + 1.0 / 20])
        feasible = lo <= hi
        assert np.all(out[feasible] >= lo[feasible] - EPS) and np.all(out[feasible] <= hi[feasible] + EPS)


@settings(max_examples=300, deadline=None)
@given(
    present=st.tuples(st.floats(-0.3, 0.3), st.floats(-0.3, 0.3), st.floats(0.0, 0.4)),
    sequence=st.lists(commands.map(lambda c: c[:5] if len(c) >= 5 else c), min_size=1, max_size=6),
)
def test_ee_commands_keep_the_target_in_the_workspace(present: tuple[float, ...], sequence: list[list[float]]) -> None:
    safety = SafetyFilter(EE, 5)
    safety.observe({"state": np.asarray([*present, 0, 1, 0.04])})
    for command in sequence:
        out = safety.filter(command)
        assert out.shape == (5,) and np.all(np.isfinite(out)) and np.all(np.abs(out) <= 1 + EPS)
        target = np.asarray(present) + out[:3] * EE.translation_per_unit
        assert np.all(target >= np.asarray(EE.workspace.low) - 1e-9)  # type: ignore[union-attr]
        assert np.all(target <= np.asarray(EE.workspace.high) + 1e-9)  # type: ignore[union-attr]


def test_bad_commands_hold_and_are_counted_with_a_reason() -> None:
    events: list[tuple[str, dict]] = []
    safety = SafetyFilter(EE, 5, on_event=lambda kind, payload: events.append((kind, payload)))
    safety.observe({"state": np.asarray([0.0, 0.0, 0.2, 0, 1, 0.04])})
    safety.filter([0, 0, 0, 0, 1.0])  # close the gripper
    for bad in ([np.nan, 0, 0, 0, 0], [0, 0, 0], "go left", [np.inf] * 5):
        np.testing.assert_array_equal(safety.filter(bad), [0, 0, 0, 0, 1.0])  # hold, the grip kept
    assert safety.counts["rejected"] == 4
    assert all(kind == "rejected" and "finite numbers" in payload["reason"] for kind, payload in events)


def test_the_estop_latch_holds_until_an_explicit_clear() -> None:
    safety = SafetyFilter(JOINTS, 6)
    safety.observe({"state": np.full(6, 0.3)})
    safety.estop("floor-1", "person in the cell")
    for _ in range(3):
        np.testing.assert_allclose(safety.filter([0.35] * 6), [0.3] * 6)
    assert safety.counts["estop_hold"] == 3
    safety.clear_estop("admin")
    assert safety.filter([0.35] * 6)[0] == pytest.approx(0.35)
    assert safety.counts["estop"] == 1 and safety.counts["estop_cleared"] == 1


def test_a_stale_observation_or_an_implausible_measured_position_holds_the_robot() -> None:
    events: list[tuple[str, dict]] = []
    safety = SafetyFilter(JOINTS, 6, on_event=lambda kind, payload: events.append((kind, payload)))
    assert safety.observe({"state": np.full(6, 0.3)})
    assert safety.filter([0.35] * 6, observation_age=0.01)[0] == pytest.approx(0.35)
    np.testing.assert_allclose(safety.filter([0.4] * 6, observation_age=JOINTS.watchdog_s + 0.01), [0.3] * 6)
    assert not safety.observe({"state": np.array([0.3, 0.3, 9.0, 0.3, 0.3, 0.3])})  # a joint far past its limit
    np.testing.assert_allclose(safety.filter([0.4] * 6), [0.3] * 6)  # held at the last plausible position
    assert [kind for kind, _ in events] == ["watchdog_hold", "observation_rejected", "watchdog_hold"]
    assert "outside the limits" in events[1][1]["reason"] and "rejected" in events[2][1]["reason"]
    assert safety.observe({"state": np.full(6, 0.35)})
    assert safety.filter([0.4] * 6)[0] == pytest.approx(0.35)  # a good reading resumes control, a bounded step on


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="joint_position commands need joint limits"):
        validate_config(SafetyConfig, {"command": "joint_position"})
    with pytest.raises(ConfigError, match="workspace"):
        validate_config(SafetyConfig, {"workspace": {"low": [0, 0, 1], "high": [1, 1, 0]}})


def test_a_safe_robot_holds_within_one_watchdog_period_when_commands_stop() -> None:
    robot = SafeRobot(FakeRobot("arm"), validate_config(SafetyConfig, {"watchdog_s": 0.1, "workspace": EE.workspace}))
    with robot:
        for _ in range(5):
            sent = robot.send_action(np.array([1.0, 0, 0, 0, 1.0]))
            robot.get_observation()
        assert sent[0] > 0
        before = robot.robot.pose()["pos"].copy()  # type: ignore[attr-defined]
        deadline = time.monotonic() + 0.1 + 0.1 / 4 + 0.05
        while robot.filter.counts["watchdog_hold"] == 0 and time.monotonic() < deadline + 1.0:
            time.sleep(0.005)
        assert robot.filter.counts["watchdog_hold"] >= 1
        assert time.monotonic() <= deadline + 0.05  # held within one period (plus the watchdog's own tick)
        np.testing.assert_allclose(robot.robot.pose()["pos"], before, atol=1e-12)  # type: ignore[attr-defined]
        assert robot.robot.pose()["opening"] == 0.0  # type: ignore[attr-defined]  # the grip kept while holding
