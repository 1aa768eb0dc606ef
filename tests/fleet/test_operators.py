"""The simulated operators' model (counts, resets, what a busy floor operator sees) and the failure response report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_recover.config import validate_config
from vla_recover.fleet import FleetConfig, FloorOperatorConfig, SlotState, build_fleet
from vla_recover.fleet.accounting import EffortLedger
from vla_recover.fleet.failures import Failure, failure_report
from vla_recover.teleop.operators import SimFloorOperator


@dataclass
class _Slot:
    state: str = "autonomous"
    info: dict[str, Any] = field(default_factory=dict)
    branch_progress: list[float] = field(default_factory=lambda: [0.1, 0.3])
    branch_critic: list[float] = field(default_factory=list)


class _Fleet:
    """What a floor operator reads and calls, on a clock the test sets."""

    failure_progress_drop, dt, phases = 0.15, 0.05, ("reach",)

    def __init__(self, slots: dict[str, _Slot]) -> None:
        self.slots, self.ledger, self.time = slots, EffortLedger(), 0.0
        self.calls: list[tuple[float, str, str]] = []

    def now(self) -> float:
        return self.time

    def request_takeover(self, robot: str, operator: str, reason: str = "") -> None:
        self.calls.append((self.time, "request", robot))
        self.slots[robot].state = "takeover_requested"

    def reset(self, robot: str, operator: str, seconds: float = 0.0) -> None:
        self.calls.append((self.time, "reset", robot))
        self.slots[robot].state = "resetting"


def _run(fleet: _Fleet, operator: SimFloorOperator, fail_at: float, until: float) -> None:
    while fleet.time <= until + 1e-9:
        if abs(fleet.time - fail_at) < 1e-9:
            fleet.slots["b"].branch_progress.append(0.05)  # b drops what it held: a failure
        operator.act(fleet)
        fleet.time = round(fleet.time + fleet.dt, 6)


def test_a_floor_operator_away_resetting_a_robot_sees_a_failure_only_when_back() -> None:
    config = FloorOperatorConfig(detector="ground_truth", reaction_s=1.0, reset_s=3.0, request_cost_s=2.0)
    away = _Fleet({"a": _Slot(state="episode_done"), "b": _Slot()})
    _run(away, SimFloorOperator(config), fail_at=1.0, until=6.0)
    assert away.calls == [(0.0, "reset", "a"), (4.0, "request", "b")]  # back at 3 s, then its reaction time
    assert away.ledger.operator_s == {"floor": 3.0 + 2.0}
    # at the console, busy with a request, it sees the failure at once and asks as soon as it is free
    console = _Fleet({"a": _Slot(), "b": _Slot()})
    console.slots["a"].branch_progress.append(0.05)
    _run(console, SimFloorOperator(config), fail_at=0.5, until=6.0)
    assert console.calls == [(1.0, "request", "a"), (3.0, "request", "b")]  # b seen at 0.5 s, asked when free


def test_automatic_resets_take_no_operator_time(tmp_path: Path) -> None:
    calm = {"task_config": {"horizon": 80}, "teleoperator": {"enabled": False}}  # no failures: only resets to do
    summary = build_fleet(_config(tmp_path, floor_operator={"resets": "automatic"}, **calm)).run()
    assert summary["episodes"] == 4 and "floor" not in summary["operator_s"]
    physical = build_fleet(_config(tmp_path / "p", **calm)).run()
    assert physical["operator_s"]["floor"] >= 2 * 5.0  # two robots, four episodes: at least two resets by hand


def _config(tmp_path: Path, **overrides: Any) -> FleetConfig:
    raw: dict[str, Any] = {
        "task": "LiftCube", "robots": 2, "episodes": 4, "constant_action": [0.0, 0.0, -0.3, 0.0, -1.0],
        "store": str(tmp_path / "store"), "run_ahead_steps": 1,
        # every attempt: the cube is pushed away during the reach, an injected failure the ground truth flags
        "task_config": {"horizon": 80, "failures": [{"kind": "push", "phase": "reach", "probability": 1.0,
                                                      "delay": [3, 3]}]},
        "floor_operator": {"detector": "ground_truth", "reaction_s": 0.2, "request_cost_s": 0.1, "reset_s": 5.0},
        "teleoperator": {"reaction_s": 0.2, "rewind": "none", "max_steps": 30},
    }  # fmt: skip
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and key != "task_config" else value
    return validate_config(FleetConfig, raw)


def test_two_teleoperators_serve_two_failing_robots_at_once_and_the_response_is_reported(tmp_path: Path) -> None:
    config = _config(tmp_path, floor_operator={"count": 2, "resets": "automatic"}, teleoperator={"count": 2})
    fleet = build_fleet(config)
    assert [op.name for op in fleet.operators] == ["floor-1", "floor-2", "teleop-1", "teleop-2"]
    fleet.start()
    both = False
    try:
        while not fleet.finished:
            fleet.tick()
            held = [s.lease.operator for s in fleet.slots.values() if s.state is SlotState.TELEOP and s.lease]
            both = both or sorted(held) == ["teleop-1", "teleop-2"]
    finally:
        fleet.close()
    assert both
    response = fleet.summary(1.0)["failure_response"]
    assert response["failures"] >= 4 and response["taken_over"] >= 4  # every attempt's push, each taken over
    assert response["recoverable_at_onset"] >= 1 and response["not_probed"] == 0
    # seen at once, 0.2 s to react, 0.1 s for the request: granted under half a second after the onset
    assert response["onset_to_grant_s_p90"] is not None and response["onset_to_grant_s_p90"] <= 0.5
    pushed = [f for f in fleet.failures if f.kind == "push"]
    assert pushed and all(f.requested_s is not None and f.granted_s is not None for f in pushed)


def _failure(onset: float, granted: float | None, end: str, at_onset: bool, at_grant: bool | None) -> Failure:
    return Failure("r", 0, 10, onset, "progress_drop", 0.5, 0.2, None, granted, end, at_onset, at_grant)


def test_the_failure_report_counts_waits_that_never_ended() -> None:
    failures = [
        _failure(1.0, 2.0, "takeover", True, True),
        _failure(1.0, 4.0, "takeover", True, False),  # granted too late to save it
        _failure(1.0, None, "recovered_by_policy", True, None),  # needed no one
        _failure(1.0, None, "attempt_ended", False, None),  # lost at its onset already
    ]
    report = failure_report(failures)
    assert report["failures"] == 4 and report["taken_over"] == 2 and report["recovered_by_policy"] == 1
    assert report["onset_to_grant_s_p50"] == 3.0  # of 1, 3 and a wait without end
    assert report["onset_to_grant_s_p90"] is None  # the wait without end decides the 90th percentile
    assert (report["recoverable_needing_takeover"], report["rescued_in_time"]) == (2, 1)
    assert report["rescued_in_time_share"] == 0.5
