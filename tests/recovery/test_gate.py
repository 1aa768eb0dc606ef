"""The recovery gate's labels, the detector score against known verdicts, and a gate that finds a visible failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from vla_recover.data import EpisodeData, EpisodeStore
from vla_recover.data.schema import ACTORS
from vla_recover.recovery import (
    NEEDS_CORRECTION,
    UNLABELLED,
    GateConfig,
    RecoveryGate,
    branch_alerts,
    correction_labels,
    score_detector,
    train_gate,
)

DT = 0.05


def _failure(onset: int, end: int, recoverable: bool | None = True) -> dict[str, Any]:
    return {"kind": "slip", "onset_row": onset, "end_row": end, "recoverable_at_onset": recoverable}


def _episode(actors: list[str], failures: list[dict[str, Any]] | None, seed: int, failing: float = 3.0) -> EpisodeData:
    """States whose first coordinate jumps by ``failing`` inside each failure window: a failure one can see."""
    rng = np.random.default_rng(seed)
    n = len(actors)
    state = rng.normal(scale=0.3, size=(n, 4)).astype(np.float32)
    for failure in failures or []:
        state[failure["onset_row"] : failure["end_row"], 0] += failing
    info = {} if failures is None else {"failures": failures}
    return EpisodeData(
        task="LiftCube",
        steps={"obs.state": state, "action": np.zeros((n, 2), np.float32),
               "sim_time": (np.arange(n) * DT).astype(np.float32)},
        outcome="success",
        actor=actors,
        info=info,
    )  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> EpisodeStore:
    """A demonstration (no records), an episode with a recoverable failure at rows 10-20 then a takeover, one with
    an unrecoverable failure at 5-15, and one without failures."""
    with EpisodeStore(tmp_path / "s", mode="a") as s:
        s.append_episode(_episode(["scripted"] * 30, None, 0))  # rows 0-29
        s.append_episode(_episode(["policy"] * 20 + ["human"] * 10, [_failure(10, 20)], 1))  # rows 30-59
        s.append_episode(_episode(["policy"] * 30, [_failure(5, 15, recoverable=False)], 2))  # rows 60-89
        s.append_episode(_episode(["policy"] * 30, [], 3))  # rows 90-119
    return EpisodeStore(tmp_path / "s")


def test_labels_mark_the_recoverable_failure_windows_of_policy_rows(store: EpisodeStore) -> None:
    labels = correction_labels(store)
    assert (labels[0:30] == UNLABELLED).all()  # a demonstration carries no failure records
    assert (labels[30:40] == 0).all() and (labels[40:50] == NEEDS_CORRECTION).all()
    assert (labels[50:60] == UNLABELLED).all()  # the human's rows
    assert (labels[65:75] == UNLABELLED).all() and (labels[60:65] == 0).all()  # past saving: neither
    assert (labels[90:120] == 0).all()
    assert (correction_labels(store, episodes=[3])[30:90] == UNLABELLED).all()


def test_the_score_counts_alerts_failures_and_latency(store: EpisodeStore) -> None:
    verdicts = np.zeros(store.n_steps, dtype=bool)
    verdicts[33:35] = True  # a false alarm 7 rows before the onset (lead 0.25 s = 5 rows)
    verdicts[42:46] = True  # detected 2 rows (0.1 s) after the onset: one alert
    verdicts[50:55] = True  # human rows: never a verdict
    verdicts[70:72] = True  # inside the unrecoverable failure: neither right nor wrong
    verdicts[100] = True  # a false alarm in a clean episode
    score = score_detector(store, verdicts, lead_s=0.25)
    assert (score.episodes, score.failures, score.detected, score.recall) == (3, 1, 1, 1.0)
    assert (score.alerts, score.true_alerts, score.precision) == (3, 1, round(1 / 3, 4))
    assert score.latency_s_p50 == pytest.approx(0.1)
    verdicts[36] = True  # now 4 rows before the onset: inside the lead, an early detection
    early = score_detector(store, verdicts, lead_s=0.25)
    assert early.latency_s_p50 == pytest.approx(-0.2) and early.true_alerts == 2


def test_branch_verdicts_forget_what_a_rewind_undid() -> None:
    actor = np.array([ACTORS.index(a) for a in ["policy", "policy", "rewind", "policy", "policy"]])
    values = np.array([0.0, 9.0, 9.0, 0.0, 0.0])
    seen: list[list[float]] = []
    verdicts = branch_alerts(values, actor, lambda branch: seen.append(list(branch)) or max(branch) > 1.0)
    assert seen == [[0.0], [0.0, 9.0], [0.0, 0.0], [0.0, 0.0, 0.0]]  # the rewind took the 9 off the branch
    assert verdicts.tolist() == [False, True, False, False, False]


def test_a_gate_learns_a_failure_it_can_see_and_picks_its_threshold(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "fleet", mode="a") as s:
        for seed in range(24):
            onset = 8 + seed % 10
            s.append_episode(_episode(["policy"] * 40 + ["human"] * 5, [_failure(onset, onset + 12)], seed))
    config = GateConfig(fit={"steps": 300, "batch_size": 256, "hidden": (32,)}, validation_share=0.25)
    with EpisodeStore(tmp_path / "fleet") as fleet:
        gate = train_gate(fleet, config=config)
        score = gate.score(fleet)
        assert (score.recall or 0.0) >= 0.9 and (score.precision or 0.0) >= 0.8
        assert score.latency_s_p50 is not None and score.latency_s_p50 <= 3 * DT  # within the smoothing window
        assert gate.metrics["threshold_choice"]["held_back_episodes"] == 6
        loaded = RecoveryGate.load(gate.save(tmp_path / "gate"))
        np.testing.assert_allclose(loaded.store_probability(fleet), gate.store_probability(fleet), rtol=1e-6)
        assert loaded.threshold == gate.threshold


def test_a_gate_without_both_kinds_of_rows_or_a_folder_says_so(store: EpisodeStore, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs fleet episodes with both"):
        train_gate(store, episodes=[3])
    with pytest.raises(FileNotFoundError, match="not a recovery gate directory"):
        RecoveryGate.load(tmp_path)


def test_the_fleet_rates_each_new_branch_step_and_keeps_the_verdict(tmp_path: Path) -> None:
    from types import SimpleNamespace

    import torch

    from vla_recover.critic.values import ValueNet
    from vla_recover.fleet.progress import GateRater

    spread = np.array([[-1.0] * 8, [1.0] * 8], np.float32)  # standardisation: mean 0, std 1
    net = ValueNet(spread, ())
    with torch.no_grad():
        net.net[0].weight.zero_()
        net.net[0].weight[0, 0] = 10.0  # P(needs correction) = σ(10·(x0 − 0.5)): high once x0 passes 0.5
        net.net[0].bias.fill_(-5.0)
    RecoveryGate(net, GateConfig(smooth_steps=2), 0.5, {}).save(tmp_path / "gate")
    rater = GateRater(tmp_path / "gate", ["obs.state"])
    rows = [{"obs.state": np.array([x, 0, 0, 0], np.float32)} for x in (0.0, 0.0, 2.0, 2.0)]
    slot = SimpleNamespace(attempt=SimpleNamespace(rows=rows), branch_rows=[0, 1], branch_gate=[], gate_raised=False)
    rater.rate_new_steps([slot])
    assert len(slot.branch_gate) == 2 and max(slot.branch_gate) < 0.01 and not slot.gate_raised
    slot.branch_rows += [2]
    rater.rate_new_steps([slot])  # only the new step is rated: mean of the last two is ~0.5
    assert len(slot.branch_gate) == 3 and slot.branch_gate[-1] > 0.99 and slot.gate_raised
    with pytest.raises(ValueError, match=r"reads obs\.state, but the fleet records only obs\.image"):
        GateRater(tmp_path / "gate", ["obs.image"])
