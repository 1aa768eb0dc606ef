"""The simulated operators' model (counts, resets, what a busy floor operator sees) and the failure response report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from vla_recover.config import validate_config
from vla_recover.data import EpisodeStore
from vla_recover.data.schema import ACTORS
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
    gate_raised: bool = False
    awaiting_reset: bool = False
    machine: Any = None
    lease: Any = None


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


@pytest.mark.slow  # whole episodes through the simulated operators: 10 s on two cores
def test_automatic_resets_take_no_operator_time(tmp_path: Path) -> None:
    calm = {"task_config": {"horizon": 80}, "teleoperator": {"enabled": False}}  # no failures: only resets to do
    summary = build_fleet(_config(tmp_path, floor_operator={"resets": "automatic"}, **calm)).run()
    assert summary["episodes"] == 4 and "floor" not in summary["operator_s"]
    physical = build_fleet(_config(tmp_path / "p", **calm)).run()
    assert physical["operator_s"]["floor"] >= 2 * 5.0  # two robots, four episodes: at least two resets by hand
    # a wage is paid for the whole shift, busy or watching: presence is the sim clock, per operator on shift
    for run in (summary, physical):
        assert run["operator_present_s"] == {"floor": pytest.approx(run["sim_s"], abs=0.1)}
        assert run["successes_per_present_hour"] == pytest.approx(run["successes"] / (run["sim_s"] / 3600), rel=1e-2)


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
    # no hand-back time, so a teleoperator is free the moment it releases a robot: the grant latency is the floor's
    teleoperator = {"count": 2, "handback_s": 0.0}
    config = _config(tmp_path, floor_operator={"count": 2, "resets": "automatic"}, teleoperator=teleoperator)
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
    pushed = [f for f in fleet.failure_watch.failures if f.kind == "push"]
    assert pushed and all(f.requested_s is not None and f.granted_s is not None for f in pushed)
    # each failure is stored with its episode, in that episode's rows: the onset is a policy row, the takeover
    # (an intervention) begins where the failure ended
    with EpisodeStore(config.store) as store:
        attempts = [row for row in store.episodes() if not row.info.get("correction")]
        stored = [(row, f) for row in attempts for f in row.info.get("failures", [])]
        assert len(stored) == len(fleet.failure_watch.failures)
        assert sum(f["end"] == "takeover" for _, f in stored) >= 4
        for row, failure in stored:
            assert failure["kind"] in ("push", "progress_drop") and failure["end"] != "open"
            if failure["end"] != "takeover":
                continue
            actors = store.read("actor", row.start + failure["onset_row"], row.start + failure["end_row"] + 1)
            assert actors[0] == ACTORS.index("policy")
            starts = [seg.start for seg in store.segments(episode=row.id) if seg.kind == "intervention"]
            assert failure["end_row"] in starts or failure["end_row"] + 1 in starts


def _failure(onset: float, granted: float | None, end: str, at_onset: bool, at_grant: bool | None) -> Failure:
    return Failure("r", 0, 10, onset, "progress_drop", 0.5, 0.2, None, granted, end, at_onset, at_grant)


def test_the_failure_report_counts_waits_that_never_ended() -> None:
    failures = [
        _failure(1.0, 2.0, "takeover", True, True),
        _failure(1.0, 4.0, "takeover", True, False),  # granted too late to save it
        _failure(1.0, None, "recovered_by_policy", True, None),  # needed no one
        _failure(1.0, None, "attempt_ended", False, None),  # lost at its onset already: no takeover could help
        _failure(1.0, None, "attempt_ended", True, None),  # could have been saved, and no one came
    ]
    report = failure_report(failures)
    assert report["failures"] == 5 and report["taken_over"] == 2 and report["recovered_by_policy"] == 1
    assert report["onset_to_grant_s_p50"] == 3.0  # of 1, 3 and a wait without end
    assert report["onset_to_grant_s_p90"] is None  # the wait without end decides the 90th percentile
    assert (report["recoverable_needing_takeover"], report["rescued_in_time"]) == (3, 1)
    assert report["rescued_in_time_share"] == 0.3333


class _Lease:
    token = "t"
    since = 0.0  # as a slot machine's time of entering its state


class _TeleopFleet(_Fleet):
    """A fleet whose one robot, once taken over, shows the phases and progress a test scripts, step by step."""

    def __init__(self, script: list[tuple[int, float, bool]]) -> None:
        super().__init__({"r": _Slot(state="takeover_requested", branch_progress=[0.1, 0.3, 0.2], machine=_Lease())})
        self.script, self.released_after = script, None  # (phase, progress, success) after each corrective step
        self.slots["r"].info = {"phase_index": 0, "progress": 0.2}

    def grant_takeover(self, robot: str, operator: str, device: Any) -> _Lease:
        self.slots[robot].state = "teleop"
        self.slots[robot].lease = _Lease()
        return _Lease()

    def renew_lease(self, robot: str, token: str) -> None:
        pass

    def rewind(self, robot: str, token: str, steps: int | None = None) -> int:
        return 0

    def release_takeover(self, robot: str, token: str) -> None:
        self.slots[robot].state = "autonomous"


def _released_after(script: list[tuple[int, float, bool]], **config: Any) -> int:
    from vla_recover.fleet import TeleoperatorConfig
    from vla_recover.teleop.operators import SimTeleoperator

    fleet = _TeleopFleet(script)
    teleop = SimTeleoperator(TeleoperatorConfig(reaction_s=0.0, rewind="none", **config))
    teleop.act(fleet)  # the grant
    teleop.act(fleet)  # no rewind asked for: the correction starts
    for step, (phase, progress, success) in enumerate(script, start=1):
        fleet.slots["r"].info = {"phase_index": phase, "progress": progress, "is_success": success}
        teleop.act(fleet)
        if fleet.slots["r"].state == "autonomous":
            return step
    return -1


SCRIPT = [(0, 0.20, False), (0, 0.25, False), (1, 0.30, False), (0, 0.28, False), (1, 0.32, False),
          (1, 0.36, False), (1, 0.40, False), (2, 0.60, False), (2, 0.80, False), (2, 1.0, True)]  # fmt: skip


def test_each_release_rule_hands_back_where_it_says() -> None:
    assert _released_after(SCRIPT, release="phase_advanced") == 3  # the first step past the starting phase
    assert _released_after(SCRIPT, release="phase_held", release_steps=3) == 7  # three in a row: steps 5-7
    # the best before the takeover was 0.3: passed at step 5 (0.32), then two more steps
    assert _released_after(SCRIPT, release="progress_regained", release_steps=2) == 7
    assert _released_after(SCRIPT, release="success") == 10
    assert _released_after(SCRIPT, release="success", max_steps=4) == 4


def test_the_operator_fields_name_a_bad_value() -> None:
    import pytest

    from vla_recover.config import ConfigError
    from vla_recover.train.dataset import DatasetConfig

    cases = [
        ({"floor_operator": {"count": 0}}, "floor_operator.count': got 0"),
        ({"floor_operator": {"resets": "magic"}}, "floor_operator.resets': got 'magic'"),
        ({"teleoperator": {"count": 65}}, "teleoperator.count': got 65"),
        ({"teleoperator": {"release": "whenever"}}, "teleoperator.release': got 'whenever'"),
        ({"teleoperator": {"release_steps": 0}}, "teleoperator.release_steps': got 0"),
        ({"failure_progress_drop": 0}, "failure_progress_drop': got 0"),
        ({"probe_recoverability": "maybe"}, "probe_recoverability': got 'maybe'"),
    ]
    for fields, message in cases:
        with pytest.raises(ConfigError, match=message):
            validate_config(FleetConfig, {"constant_action": [0.0] * 5, **fields})
    with pytest.raises(ConfigError, match="cross_boundary_targets': got 'sometimes'"):
        validate_config(DatasetConfig, {"cross_boundary_targets": "sometimes"})


def test_a_person_watching_beside_the_critic_sees_what_the_critic_misses() -> None:
    steady = [0.2, 0.3, 0.4, 0.5, 0.6, 0.7]  # the critic rates the robot as doing fine
    for detector, expected in (("critic", []), ("critic_or_ground_truth", [(1.0, "request", "b")])):
        fleet = _Fleet({"b": _Slot(branch_critic=steady)})
        config = FloorOperatorConfig(detector=detector, reaction_s=1.0, critic_smooth_steps=1)  # type: ignore[arg-type]
        _run(fleet, SimFloorOperator(config), fail_at=0.0, until=2.0)  # the ground truth sees b drop the cube
        assert fleet.calls == expected, detector


def test_the_gate_detector_asks_for_a_takeover_on_its_verdict_alone_unless_a_person_watches_too() -> None:
    cases = (
        ("gate", True, False, [(1.0, "request", "b")]),  # the gate's verdict: a takeover with nothing else seen
        ("gate", False, True, []),  # the gate alone misses what the ground truth sees
        ("gate_or_ground_truth", False, True, [(1.0, "request", "b")]),
    )
    for detector, raised, drop, expected in cases:
        fleet = _Fleet({"b": _Slot(gate_raised=raised)})
        config = FloorOperatorConfig(detector=detector, reaction_s=1.0)  # type: ignore[arg-type]
        _run(fleet, SimFloorOperator(config), fail_at=0.0 if drop else -1.0, until=2.0)
        assert fleet.calls == expected, (detector, raised, drop)


def test_a_gate_detector_needs_a_gate() -> None:
    import pytest

    from vla_recover.config import ConfigError

    with pytest.raises(ConfigError, match="'gate' needs gate"):
        validate_config(FleetConfig, {"constant_action": [0.0] * 5, "floor_operator": {"detector": "gate"}})


def test_human_effort_is_counted_step_by_step_and_returned_as_rohe(tmp_path: Path) -> None:
    from vla_recover.data import EpisodeStore
    from vla_recover.data.schema import ACTORS

    summary = build_fleet(_config(tmp_path, floor_operator={"resets": "automatic"})).run()
    with EpisodeStore(tmp_path / "store") as store:
        actors = [ACTORS[a] for _, columns in store.iter_episodes() for a in columns["actor"]]
    assert summary["human_steps"] > 0  # every attempt's push is taken over
    assert summary["human_steps"] == actors.count("human")
    # every stored row but a rewind's restores is a step a robot executed; no attempt is left unstored here
    assert summary["steps"] == len(actors) - actors.count("rewind")
    assert summary["intervention_rate"] == pytest.approx(summary["human_steps"] / summary["steps"], abs=1e-4)
    # one floor operator and one teleoperator for two robots
    expected = summary["successes"] / (1 + summary["human_steps"]) * (2 / 2)
    assert summary["rohe"] == pytest.approx(expected, abs=1e-4)


def test_rohe_is_output_per_robot_over_effort_per_human_and_undefined_without_robots() -> None:
    from vla_recover.fleet.accounting import return_on_human_effort

    assert return_on_human_effort(10, 9, humans=1, robots=4) == 0.25
    assert return_on_human_effort(10, 9, humans=2, robots=4) == 0.5  # the same effort, shared by two people
    assert return_on_human_effort(0, 0, humans=1, robots=1) == 0.0
    assert return_on_human_effort(3, 0, humans=1, robots=0) is None


@pytest.mark.slow  # whole episodes of two robots through the simulated operators: 10 s on two cores
def test_a_teleoperator_handing_a_robot_back_takes_the_next_only_after_the_hand_back(tmp_path: Path) -> None:
    from vla_recover.data import EpisodeStore

    # four robots pushed in every attempt, long enough to wait: the one teleoperator always has a robot waiting
    push = {"kind": "push", "phase": "reach", "probability": 1.0, "delay": [3, 3]}
    config = _config(
        tmp_path,
        robots=4,
        episodes=4,
        task_config={"horizon": 240, "failures": [push]},
        teleoperator={"handback_s": 1.5, "max_steps": 10},
    )
    summary = build_fleet(config).run()
    with EpisodeStore(tmp_path / "store") as store:
        events = [e for e in store.events() if e.kind in ("takeover_granted", "takeover_released")]
    released = [e.payload["sim_time"] for e in events if e.kind == "takeover_released"]
    granted = [e.payload["sim_time"] for e in events if e.kind == "takeover_granted"]
    assert len(released) >= 3
    assert all(grant >= release + 1.5 - 1e-6 for release, grant in zip(released, granted[1:], strict=False))
    # busy seconds fit in the time on shift: the hand-back is on the clock
    assert summary["operator_s"]["teleop"] <= summary["operator_present_s"]["teleop"] + 1.5
