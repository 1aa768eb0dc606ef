"""The fleet runs a policy exactly as evaluation does: same chunks, same seeds, same filter, step for step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.train.test_evaluate import untrained_lift_policy
from vla_recover import evaluate
from vla_recover.config import validate_config
from vla_recover.data import EpisodeStore
from vla_recover.envs import make_task
from vla_recover.evaluate import evaluate_policy
from vla_recover.fleet import FleetConfig, build_fleet
from vla_recover.policies.common.checkpoint import checkpoint_version, load_policy, save_policy

SEEDS = [100_000, 100_001, 100_002]
HORIZON = 30


@pytest.fixture(scope="module")
def wild_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained LiftCube policy whose actions often overshoot [-1, 1], sometimes far enough to be rejected."""
    policy = untrained_lift_policy("flow", action_range=1.4)
    return save_policy(policy, tmp_path_factory.mktemp("wild") / "policy")


def evaluated_actions(policy_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[int, np.ndarray], Any]:
    """What evaluation executed in each seed's episode, and its result."""
    executed: dict[int, list[np.ndarray]] = {}

    def recording_task(*args: Any, **kwargs: Any) -> Any:
        env = make_task(*args, **kwargs)
        reset, step = env.reset, env.step
        actions: list[np.ndarray] = []

        def on_reset(seed: int, **rest: Any) -> Any:
            executed[seed] = actions
            return reset(seed=seed, **rest)

        def on_step(action: np.ndarray) -> Any:
            actions.append(np.array(action, dtype=np.float32))
            return step(action)

        env.reset, env.step = on_reset, on_step
        return env

    monkeypatch.setattr(evaluate, "make_task", recording_task)
    policy, embedder, _ = load_policy(policy_dir)
    result = evaluate_policy(policy, embedder, "LiftCube", SEEDS, batch=2, task_config={"horizon": HORIZON})
    return {seed: np.stack(actions) for seed, actions in executed.items()}, result


def test_the_fleet_executes_what_evaluation_executes(
    wild_policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Running ahead included: two robots, three seeds, up to three steps in flight."""
    expected, result = evaluated_actions(wild_policy, monkeypatch)
    assert result["clipped_actions"] > 0 and result["rejected_chunks"] > 0  # the filter's both branches are used
    config = validate_config(
        FleetConfig,
        {"task": "LiftCube", "task_config": {"horizon": HORIZON}, "robots": 2, "episodes": 3, "seed": SEEDS[0],
         "policy": str(wild_policy), "store": str(tmp_path / "store"), "run_ahead_steps": 3,
         "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False}},
    )  # fmt: skip
    fleet = build_fleet(config)
    fleet.run()
    with EpisodeStore(tmp_path / "store") as store:
        stored = {row.info["seed"]: store.episode(row.id)["action"] for row in store.episodes()}
        # every step the policy chose carries the checkpoint's own version, not its folder's name
        assert set(store.names("policy_version").values()) == {checkpoint_version(wild_policy)}
        assert {row.info["policy_version"] for row in store.episodes()} == {checkpoint_version(wild_policy)}
    assert sorted(stored) == SEEDS
    for seed in SEEDS:
        np.testing.assert_allclose(stored[seed], expected[seed], atol=1e-4, err_msg=f"seed {seed}")
    assert fleet.ledger.clipped_actions == result["clipped_actions"]
    assert fleet.ledger.rejected_actions == result["rejected_chunks"]
    assert result["seeds"] == SEEDS and len(result["outcomes"]) == 3


class HistoryChunks:
    """Three observations of history, moving actions; remembers each window it was asked to plan from."""

    obs_horizon, action_exec, action_horizon, version = 3, 4, 4, "history"
    obs_keys: tuple[str, ...] = ("state",)

    def __init__(self) -> None:
        self.windows: list[np.ndarray] = []

    def predict(self, windows: list[Any], instructions: list[str], seeds: list[int] | None = None) -> np.ndarray:
        self.windows += [np.stack([obs["state"] for obs in window]) for window in windows]
        chunk = np.zeros((len(windows), 4, 5))
        chunk[:, :, 0] = np.where(len(self.windows) % 2, 0.6, -0.6)
        chunk[:, :, 4] = -1.0
        return chunk


def test_a_policy_sees_the_same_history_at_a_hand_back_in_the_fleet_and_in_training(tmp_path: Path) -> None:
    """One attempt: the policy, a takeover, a rewind, one corrective step, the hand-back, the policy again. Every
    window the fleet planned from is the window training builds at that row."""
    from vla_recover.data import WindowSampler, WindowSpec
    from vla_recover.fleet import FleetManager
    from vla_recover.teleop.devices import ScriptedDevice

    config = validate_config(
        FleetConfig,
        {"task": "LiftCube", "task_config": {"horizon": 40}, "robots": 1, "episodes": 1, "store": str(tmp_path),
         "constant_action": [0.0] * 5, "run_ahead_steps": 1,
         "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False}},
    )  # fmt: skip
    source = HistoryChunks()
    fleet = FleetManager(config, source=source)
    slot = fleet.slots["sim00"]
    planned_at: list[int] = []  # the attempt row each chunk was planned at

    def tick() -> None:
        rows, calls = len(slot.attempt.rows) if slot.attempt else 0, len(source.windows)
        fleet.tick()
        planned_at.extend([rows] * (len(source.windows) - calls))

    fleet.start()
    try:
        while len(slot.branch_rows) < 9:
            tick()
        lease = fleet.grant_takeover("sim00", "alice", ScriptedDevice(lambda obs: np.array([0, 0.4, 0, 0, -1.0])))
        for _ in range(5):
            tick()
        assert fleet.rewind("sim00", lease.token, steps=3) == 3
        tick()  # one corrective step, then the hand-back
        fleet.release_takeover("sim00", lease.token)
        while not fleet.finished:
            tick()
    finally:
        fleet.close()
    with EpisodeStore(tmp_path) as store:
        segments = [s.kind for s in store.segments()]
        assert segments == ["autonomous", "intervention", "rewind", "intervention", "autonomous"]
        start = store.episodes()[0].start
        sampler = WindowSampler(store, WindowSpec(("obs.state",), obs_horizon=3, action_horizon=4))
        trained = sampler.gather(start + np.array(planned_at))["obs.state"]
    # rows: the policy 0-8, the human 9-13, the rewind 14-16, the corrective step 17, the policy again from 18
    assert 18 in planned_at and planned_at[0] == 0
    for row, fleet_window, training_window in zip(planned_at, source.windows, trained, strict=True):
        np.testing.assert_array_equal(fleet_window, training_window, err_msg=f"row {row}")
