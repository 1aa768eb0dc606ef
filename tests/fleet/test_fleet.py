"""The fleet end to end with real sim worker processes: recording, operators, faults, bad actions, leases."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vla_recover.config import ConfigError, validate_config
from vla_recover.data import EpisodeStore
from vla_recover.data.schema import ACTORS
from vla_recover.execution import chunk_seed
from vla_recover.fleet import FleetConfig, FleetManager, SlotState, build_fleet
from vla_recover.fleet.worker import WorkerProcess
from vla_recover.teleop.devices import ScriptedDevice
from vla_recover.teleop.lease import LeaseError

S = SlotState
DOWN = [0.0, 0.0, -0.3, 0.0, -1.0]  # drives the gripper into the table: a policy that never makes progress


def fleet_config(tmp_path: Path, **overrides: Any) -> FleetConfig:
    raw: dict[str, Any] = {
        "task": "LiftCube",
        "robots": 2,
        "episodes": 2,
        "constant_action": DOWN,
        "store": str(tmp_path / "store"),
        "task_config": {"horizon": 40},
        "floor_operator": {"enabled": False},
        "teleoperator": {"enabled": False},
        "run_ahead_steps": 1,  # the step-exact operator tests are in lockstep; run-ahead has tests of its own
    }
    for key, value in overrides.items():
        raw[key] = {**raw[key], **value} if isinstance(value, dict) and key in raw else value
    return validate_config(FleetConfig, raw)


def tick_until(fleet: FleetManager, condition: Any, limit: int = 500) -> None:
    for _ in range(limit):
        if condition():
            return
        fleet.tick()
    raise AssertionError("condition not reached")


def test_fleet_records_every_attempt_with_segments_and_events(tmp_path: Path) -> None:
    summary = build_fleet(fleet_config(tmp_path, episodes=3)).run()
    assert summary["episodes"] == 3 and summary["outcomes"] == {"truncated": 3}
    with EpisodeStore(tmp_path / "store") as store:
        rows = store.episodes()
        assert [r.length for r in rows] == [40, 40, 40] and {r.robot for r in rows} == {"sim00", "sim01"}
        segments = store.segments()
        assert {(s.start, s.stop, s.kind) for s in segments} == {(0, 40, "autonomous")}
        kinds = [e.kind for e in store.events()]
        assert kinds.count("episode_started") == 3 and kinds.count("episode_recorded") == 3
        states = [e.payload["state"] for e in store.events(robot="sim00", kind="slot_state")]
        assert states[:4] == ["resetting", "idle", "autonomous", "episode_done"]


def test_simulated_operators_take_over_rewind_and_hand_back(tmp_path: Path) -> None:
    config = fleet_config(
        tmp_path,
        episodes=3,  # two robots: the third episode needs the floor operator's reset
        task_config={"horizon": 150},
        floor_operator={"enabled": True, "stall_steps": 10, "reaction_s": 0.2, "reset_s": 1.0},
        teleoperator={"enabled": True, "reaction_s": 0.2, "rewind": "steps", "rewind_steps": 5},
    )
    summary = build_fleet(config).run()
    assert summary["interventions"] >= 2 and summary["rewinds"] >= 2
    assert summary["operator_s"]["floor"] > 0 and summary["operator_s"]["teleop"] > 0
    assert summary["successes_per_operator_hour"] is not None
    with EpisodeStore(tmp_path / "store") as store:
        kinds = {s.kind for s in store.segments()}
        assert {"autonomous", "intervention", "rewind"} <= kinds
        episode = store.episode(store.episodes()[0].id)
        actors = [ACTORS[a] for a in episode["actor"]]
        assert set(actors) == {"policy", "human", "hold", "rewind"}  # one attempt: who chose each step, or no one
        intervention = episode["intervention"]
        assert all(intervention[i] for i, a in enumerate(actors) if a in ("human", "rewind"))
        assert not any(intervention[i] for i, a in enumerate(actors) if a == "policy")
        # the teleoperator's reaction time is a hold inside the takeover, chosen by no one
        first_hold = actors.index("hold")
        assert intervention[first_hold] and actors[first_hold - 1] == "policy"
        events = {e.kind for e in store.events()}
        assert {"takeover_requested", "takeover_granted", "rewind", "takeover_released", "reset"} <= events


def run_killing_one_worker(fleet: FleetManager, robot: str, after_steps: int) -> int:
    """Run the fleet to the end, killing ``robot``'s worker once it has taken ``after_steps`` steps; the fault is
    seen once the replies the worker sent before dying have landed (the steps it was running ahead), and a reset
    starts."""
    fleet.start()
    try:
        tick_until(fleet, lambda: len(fleet.slots[robot].branch_rows) == after_steps)
        in_flight = len(fleet.slots[robot].pending)
        fleet.slots[robot].worker.kill()
        for _ in range(in_flight + 1):
            fleet.tick()
            if fleet.slots[robot].state is not S.AUTONOMOUS:
                break
        assert fleet.slots[robot].state in (S.RESETTING, S.IDLE)
        kept = len(fleet.slots[robot].branch_rows)  # every step that came back, the reset has not begun
        assert after_steps <= kept <= after_steps + in_flight
        tick_until(fleet, lambda: fleet.finished)
    finally:
        fleet.close()
    return kept


def test_sigkill_of_a_worker_mid_episode_loses_nothing_else(tmp_path: Path) -> None:
    fleet = build_fleet(fleet_config(tmp_path, episodes=3, task_config={"horizon": 30}, run_ahead_steps=3))
    kept = run_killing_one_worker(fleet, "sim00", 12)
    with EpisodeStore(tmp_path / "store") as store:
        rows = store.episodes()
        aborted = [r for r in rows if r.outcome == "aborted"]
        assert len(aborted) == 1 and aborted[0].robot == "sim00" and aborted[0].length == kept
        assert sorted(r.outcome for r in rows) == ["aborted", "truncated", "truncated"]
        assert [r.length for r in rows if r.outcome == "truncated"] == [30, 30]
        assert any(e.kind == "fault" for e in store.events(robot="sim00"))


def _stored(store_path: Path) -> list[tuple[str, str, int, np.ndarray, np.ndarray]]:
    with EpisodeStore(store_path) as store:
        return [
            (row.robot, row.outcome, row.length, store.episode(row.id)["obs.state"], store.episode(row.id)["action"])
            for row in sorted(store.episodes(), key=lambda r: (r.robot, r.id))
        ]


def test_running_ahead_records_exactly_what_lockstep_records(tmp_path: Path) -> None:
    """Same seeds, same open-loop actions: with steps in flight the fleet stores the same episodes, step for step,
    and drops what the sims ran past the end of an episode."""
    for depth in (1, 4):
        config = fleet_config(
            tmp_path / f"r{depth}", robots=3, episodes=5, task_config={"horizon": 17}, run_ahead_steps=depth
        )
        build_fleet(config).run()
    lockstep, ahead = _stored(tmp_path / "r1" / "store"), _stored(tmp_path / "r4" / "store")
    assert [e[:3] for e in ahead] == [e[:3] for e in lockstep] and len(ahead) == 5
    for (*_, states, actions), (*_, states_ahead, actions_ahead) in zip(lockstep, ahead, strict=True):
        np.testing.assert_array_equal(states_ahead, states)
        np.testing.assert_array_equal(actions_ahead, actions)


def test_sims_are_topped_up_in_bursts_and_never_run_past_the_chunk(tmp_path: Path, monkeypatch: Any) -> None:
    """Steps in flight are topped up once half have landed, so a worker gets several per message, and never more
    than the chunk being executed holds."""
    sizes: list[int] = []
    flush = WorkerProcess.flush

    def counting_flush(self: WorkerProcess) -> None:
        sizes.append(len(self._pending))
        flush(self)

    monkeypatch.setattr(WorkerProcess, "flush", counting_flush)
    fleet = build_fleet(fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 60}, run_ahead_steps=6))
    fleet.start()
    tick_until(fleet, lambda: len(fleet.slots["sim00"].branch_rows) == 40)
    fleet.close()
    steps = [size for size in sizes if size]
    assert max(steps) <= 6 and sum(steps) / len(steps) >= 2  # one step per message when topped up every tick
    sizes.clear()  # an odd run-ahead: a chunk of 8 goes out as 5 (one sent, four topped up), then 2, then its last
    fleet = build_fleet(
        fleet_config(tmp_path / "odd", robots=1, episodes=1, task_config={"horizon": 60}, run_ahead_steps=5)
    )
    fleet.start()
    tick_until(fleet, lambda: len(fleet.slots["sim00"].branch_rows) == 40)
    fleet.close()
    steps = [size for size in sizes if size]
    assert steps[0] == 1 and steps[1:7] == [5, 2, 1, 5, 2, 1]  # the reset, then two chunks


def test_a_takeover_starts_after_the_steps_in_flight_and_sees_the_latest_observation(tmp_path: Path) -> None:
    fleet = build_fleet(fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 60}, run_ahead_steps=3))
    fleet.start()
    slot = fleet.slots["sim00"]
    tick_until(fleet, lambda: len(slot.branch_rows) == 10)
    flying = len(slot.pending)  # planned steps already on their way
    assert flying >= 1
    seen: list[dict[str, np.ndarray]] = []

    def command(observation: dict[str, np.ndarray]) -> np.ndarray:
        seen.append(observation)
        return np.array([0.0, 0.5, 0.0, 0.0, -1.0])

    fleet.grant_takeover("sim00", "alice", ScriptedDevice(command))
    for _ in range(flying):  # the steps in flight land as the policy's
        fleet.tick()
    landed = 10 + flying
    assert not seen and len(slot.branch_rows) == landed and not slot.pending
    fleet.tick()  # the first command, read from the observation after the last step in flight
    assert slot.attempt is not None
    assert slot.attempt.segments == [(0, landed, "autonomous"), (landed, landed + 1, "intervention")]
    np.testing.assert_array_equal(seen[0]["state"], slot.attempt.rows[landed]["obs.state"])
    assert slot.attempt.rows[landed - 1]["actor"] == "policy" and slot.attempt.rows[landed]["actor"] == "human"
    fleet.close()


def test_landing_the_steps_in_flight_records_them_and_leaves_nothing_pending(tmp_path: Path) -> None:
    fleet = build_fleet(fleet_config(tmp_path, robots=2, episodes=2, task_config={"horizon": 60}, run_ahead_steps=6))
    fleet.start()
    tick_until(fleet, lambda: all(len(s.branch_rows) >= 10 for s in fleet.slots.values()))
    recorded = {robot: len(slot.branch_rows) for robot, slot in fleet.slots.items()}
    flying = {robot: len(slot.pending) for robot, slot in fleet.slots.items()}
    assert all(flying.values())
    assert fleet.land_in_flight() == sum(flying.values())
    for robot, slot in fleet.slots.items():
        assert not slot.pending and len(slot.branch_rows) == recorded[robot] + flying[robot]
    assert fleet.land_in_flight() == 0
    fleet.close()


class ScriptedChunks:
    """A chunk source for tests: ``chunks(robots)`` says what the ``calls``-th forward returns."""

    obs_horizon, action_exec, action_horizon, version = 1, 4, 4, "scripted"
    obs_keys: tuple[str, ...] = ("state",)
    calls = 0

    def __init__(self) -> None:
        self.seen: list[tuple[list[np.ndarray], list[int]]] = []  # per forward: each row's latest state, its seed

    def predict(
        self, windows: list[deque[dict[str, np.ndarray]]], instructions: list[str], seeds: list[int] | None = None
    ) -> np.ndarray:
        self.calls += 1
        self.seen.append(([window[-1]["state"].copy() for window in windows], list(seeds or [])))
        return self.chunks(len(windows))

    def chunks(self, robots: int) -> np.ndarray:
        raise NotImplementedError


class BadChunks(ScriptedChunks):
    """Chunks whose first action is NaN, then out of range, alternately."""

    def chunks(self, robots: int) -> np.ndarray:
        chunk = np.zeros((robots, 4, 5))
        chunk[:, 0, 0] = np.nan if self.calls % 2 else 3.0
        return chunk


def test_nan_and_out_of_range_actions_are_rejected_and_the_robot_holds(tmp_path: Path) -> None:
    config = fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 8})
    fleet = FleetManager(config, source=BadChunks())
    fleet.run()
    assert fleet.ledger.rejected_actions == 8  # a rejected action discards its chunk: every tick asks anew
    with EpisodeStore(tmp_path / "store") as store:
        actions = store.episode(0)["action"]
        assert np.isfinite(actions).all() and np.abs(actions).max() <= 1.0
        np.testing.assert_array_equal(actions[0], [0, 0, 0, 0, -1.0])  # the hold keeps the gripper as it was
        reasons = [e.payload["reason"] for e in store.events(kind="action_rejected")]
        assert any("NaN" in r for r in reasons) and any("out of range" in r for r in reasons)


class OvershootingChunks(ScriptedChunks):
    """A sampled chunk a little outside the bounds, as generative policies produce."""

    def chunks(self, robots: int) -> np.ndarray:
        chunk = np.zeros((robots, 4, 5))
        chunk[:, :, 2] = -1.4
        return chunk


def test_slightly_overshooting_policy_actions_are_clipped_not_rejected(tmp_path: Path) -> None:
    config = fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 8})
    fleet = FleetManager(config, source=OvershootingChunks())
    fleet.run()
    assert fleet.ledger.rejected_actions == 0 and fleet.ledger.clipped_actions == 8
    with EpisodeStore(tmp_path / "store") as store:
        np.testing.assert_array_equal(store.episode(0)["action"][:, 2], -1.0)


def test_device_disconnect_puts_the_robot_in_hold_within_one_tick(tmp_path: Path) -> None:
    fleet = FleetManager(fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 60}))
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["sim00"].state is S.AUTONOMOUS)
        right = np.array([0.0, 0.8, 0.0, 0.0, -1.0])
        fleet.grant_takeover("sim00", "alice", ScriptedDevice([right] * 100, disconnect_after=3))
        for _ in range(5):
            fleet.tick()
        slot = fleet.slots["sim00"]
        assert slot.hold and slot.lease is None
        actions = np.stack([row["action"] for row in slot.attempt.rows])  # type: ignore[union-attr]
        np.testing.assert_allclose(actions[-5:-2], [right] * 3)
        np.testing.assert_allclose(actions[-2:], [[0, 0, 0, 0, -1.0]] * 2)  # held from the very next tick
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:
        assert any("disconnected" in e.payload["reason"] for e in store.events(kind="lease_lost"))


def test_lease_expiry_during_teleop_holds_the_robot_and_refuses_stale_commands(tmp_path: Path) -> None:
    fleet = FleetManager(fleet_config(tmp_path, robots=1, episodes=1, lease_ttl_s=0.2, task_config={"horizon": 60}))
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["sim00"].state is S.AUTONOMOUS)
        lease = fleet.grant_takeover("sim00", "alice", ScriptedDevice(lambda obs: np.array([0.5, 0, 0, 0, -1.0])))
        for _ in range(5):  # 0.25 s at 20 Hz: past the 0.2 s lease
            fleet.tick()
        assert fleet.slots["sim00"].hold
        with pytest.raises(LeaseError, match="no valid lease"):
            fleet.release_takeover("sim00", lease.token)
        with pytest.raises(LeaseError, match=r"held by alice|cannot take over"):
            fleet.grant_takeover("sim00", "bob", ScriptedDevice([]))
    finally:
        fleet.close()


def test_two_teleoperators_contending_for_one_robot(tmp_path: Path) -> None:
    fleet = FleetManager(fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 60}))
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["sim00"].state is S.AUTONOMOUS)
        fleet.request_takeover("sim00", "floor")
        fleet.grant_takeover("sim00", "alice", ScriptedDevice([]))
        with pytest.raises(LeaseError):
            fleet.grant_takeover("sim00", "bob", ScriptedDevice([]))
        assert fleet.leases.holder("sim00").operator == "alice"  # type: ignore[union-attr]
    finally:
        fleet.close()


def test_fleet_config_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="constant_action"):
        validate_config(FleetConfig, {"store": str(tmp_path)})
    with pytest.raises(ConfigError, match="robots"):
        validate_config(FleetConfig, {"robots": 0, "constant_action": DOWN})
    with pytest.raises(ConfigError, match="backend"):
        validate_config(FleetConfig, {"backend": "kubernetes", "constant_action": DOWN})
    with pytest.raises(ConfigError, match=r"inference_lead_steps: got 2; removed"):
        validate_config(FleetConfig, {"inference_lead_steps": 2, "constant_action": DOWN})


class CountingChunks(ScriptedChunks):
    """Chunk ``c`` has x-actions ``c/10 + i/100`` (i = index in the chunk): the recording shows which was used."""

    action_horizon = 8

    def chunks(self, robots: int) -> np.ndarray:
        chunk = np.zeros((robots, 8, 5))
        chunk[:, :, 0] = self.calls / 10 + np.arange(8) / 100
        chunk[:, :, 4] = -1.0
        return chunk


@pytest.mark.parametrize("run_ahead", [1, 3])
def test_every_chunk_is_planned_from_the_observation_where_it_starts(tmp_path: Path, run_ahead: int) -> None:
    """Whatever the run-ahead, a chunk is planned once the steps before it have landed, from the observation at its
    first step and with that step's seed, and its first ``action_exec`` actions run: as evaluation runs a policy."""
    config = fleet_config(tmp_path, robots=1, episodes=1, run_ahead_steps=run_ahead, task_config={"horizon": 12})
    source = CountingChunks()
    FleetManager(config, source=source).run()
    with EpisodeStore(tmp_path / "store") as store:
        episode = store.episode(0)
        seed = store.episodes()[0].info["seed"]
    used = [round(float(x), 2) for x in episode["action"][:, 0]]
    assert used == [0.1, 0.11, 0.12, 0.13, 0.2, 0.21, 0.22, 0.23, 0.3, 0.31, 0.32, 0.33]
    assert source.calls == 3
    for (states, seeds), start in zip(source.seen, (0, 4, 8), strict=True):
        np.testing.assert_array_equal(states[0], episode["obs.state"][start])
        assert seeds == [chunk_seed(seed, start)]


def test_estop_stops_every_robot_stores_their_attempts_and_clearing_resets(tmp_path: Path) -> None:
    fleet = FleetManager(fleet_config(tmp_path, robots=2, episodes=4, task_config={"horizon": 60}))
    fleet.start()
    try:
        tick_until(fleet, lambda: len(fleet.slots["sim01"].branch_rows) == 5)
        fleet.grant_takeover("sim00", "alice", ScriptedDevice([]))
        fleet.estop("floor")
        assert {s.state for s in fleet.slots.values()} == {S.ESTOPPED}
        assert fleet.leases.holder("sim00") is None
        for _ in range(3):
            fleet.tick()  # nothing moves while e-stopped
        assert all(s.attempt is None for s in fleet.slots.values())
        fleet.clear_estop("sim00", "floor")
        tick_until(fleet, lambda: fleet.slots["sim00"].state is S.AUTONOMOUS)
        assert fleet.slots["sim01"].state is S.ESTOPPED
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:
        assert [(r.robot, r.outcome, r.length) for r in store.episodes()] == [
            ("sim00", "aborted", 5),
            ("sim01", "aborted", 5),
        ]


def test_rewind_to_the_last_in_distribution_state_and_corrections_as_episodes(tmp_path: Path) -> None:
    config = fleet_config(tmp_path, robots=1, episodes=1, emit_corrections=True, task_config={"horizon": 40})
    fleet = FleetManager(config)
    fleet.start()
    try:
        tick_until(fleet, lambda: len(fleet.slots["sim00"].branch_rows) == 10)
        slot = fleet.slots["sim00"]
        slot.branch_progress[:] = [0.1, 0.2, 0.3, 0.4, 0.4, 0.2, 0.1, 0.1, 0.1, 0.1]  # best reached at step 4
        lease = fleet.grant_takeover("sim00", "alice", ScriptedDevice(lambda obs: np.array([0, 0, 0.2, 0, -1.0])))
        assert fleet.rewind("sim00", lease.token) == 5  # back to the state after step 4
        assert len(slot.branch_rows) == 5 and len(slot.attempt.rows) == 10 + 5  # type: ignore[union-attr]
        landed = slot.attempt.rows[5]["obs.state"]  # type: ignore[union-attr]
        # the same physical state; after mj_step positions lag qpos by one 2 ms substep, after a restore they do not
        np.testing.assert_allclose(slot.obs["state"], landed, atol=5e-4)  # type: ignore[index]
        for _ in range(3):
            fleet.tick()
        fleet.release_takeover("sim00", lease.token)
        tick_until(fleet, lambda: fleet.finished)
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:
        full, correction = store.episodes()
        # 10 steps, 5 rewound (recorded in reverse), then env steps 5..39 again: 10 + 5 + 35
        assert full.length == 50 and correction.length == 3 and correction.info["correction"]
        kinds = [(s.start, s.stop, s.kind) for s in store.segments(episode=full.id)]
        assert kinds == [(0, 10, "autonomous"), (10, 15, "rewind"), (15, 18, "intervention"), (18, 50, "autonomous")]
        assert [(s.start, s.stop, s.kind) for s in store.segments(episode=correction.id)] == [(0, 3, "intervention")]


def test_a_rewind_never_undoes_a_correction_already_handed_back(tmp_path: Path) -> None:
    """Else a policy and an expert that replay the same steps from the same state fail, and are rewound, forever."""
    fleet = FleetManager(fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 60}))
    fleet.start()
    try:
        tick_until(fleet, lambda: len(fleet.slots["sim00"].branch_rows) == 10)
        slot = fleet.slots["sim00"]
        device = ScriptedDevice(lambda obs: np.array([0, 0, 0.2, 0, -1.0]))
        lease = fleet.grant_takeover("sim00", "alice", device)
        for _ in range(3):
            fleet.tick()
        fleet.release_takeover("sim00", lease.token)  # handed back after step 13
        tick_until(fleet, lambda: len(slot.branch_rows) >= 18)
        here = len(slot.branch_rows)
        slot.branch_progress[:] = [0.4] * 5 + [0.1] * (here - 5)  # in distribution last at step 4, before the help
        lease = fleet.grant_takeover("sim00", "alice", device)
        assert fleet.rewind("sim00", lease.token) == here - 13 and len(slot.branch_rows) == 13
        assert fleet.rewind("sim00", lease.token) == 0  # nothing before the correction to go back to
    finally:
        fleet.close()


def test_remote_commands_need_the_lease_and_are_checked(tmp_path: Path) -> None:
    from vla_recover.teleop.devices import RemoteDevice

    fleet = FleetManager(fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 60}))
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["sim00"].state is S.AUTONOMOUS)
        lease = fleet.grant_takeover("sim00", "alice", RemoteDevice())
        fleet.command("sim00", lease.token, [0.0, 0.6, 0.0, 0.0, -1.0])
        fleet.tick()
        fleet.tick()  # no new command: hold
        with pytest.raises(LeaseError, match="no valid lease"):
            fleet.command("sim00", "forged-token", [0.0, 0.0, 0.0, 0.0, 1.0])
        with pytest.raises(ValueError, match="action: "):
            fleet.command("sim00", lease.token, [np.inf, 0.0, 0.0, 0.0, -1.0])
        fleet.tick()
        actions = np.stack([row["action"] for row in fleet.slots["sim00"].attempt.rows[-3:]])  # type: ignore[union-attr]
        np.testing.assert_allclose(actions, [[0, 0.6, 0, 0, -1], [0, 0, 0, 0, -1], [0, 0, 0, 0, -1]])
    finally:
        fleet.close()
    with EpisodeStore(tmp_path / "store") as store:
        assert [e.kind for e in store.events(kind="command_refused")] == ["command_refused"]
        assert len(store.events(kind="action_rejected")) == 1


def test_the_fleet_stops_when_the_operator_budget_is_spent(tmp_path: Path) -> None:
    config = fleet_config(
        tmp_path, robots=2, episodes=1000, task_config={"horizon": 8}, operator_budget_s=5.0,
        floor_operator={"enabled": True, "reset_s": 2.0},
    )  # fmt: skip
    fleet = build_fleet(config, source=OvershootingChunks())
    summary = fleet.run()
    assert 5.0 <= sum(summary["operator_s"].values()) < 5.0 + 2.0 + 1e-6
    assert summary["episodes"] < 1000


class GuidedOvershoot(OvershootingChunks):
    actor = "guided"


def test_a_guided_source_is_recorded_as_the_guided_actor_with_the_episode_tags(tmp_path: Path) -> None:
    config = fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 8}, episode_tags={"loop_round": 2})
    build_fleet(config, source=GuidedOvershoot()).run()
    with EpisodeStore(tmp_path / "store") as store:
        row = store.episodes()[0]
        assert row.info["loop_round"] == 2
        episode = store.episode(row.id)
        assert set(episode["actor"].tolist()) == {ACTORS.index("guided")}
        assert not episode["intervention"].any()
        assert [s.kind for s in store.segments(row.id, source="supervision")] == ["autonomous"]
