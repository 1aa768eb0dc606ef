"""Weights on hand-built episodes against the formulas: intervention boundaries, classes, the HABC gate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vla_recover.data import EpisodeData, EpisodeStore
from vla_recover.train.dataset import DatasetConfig, build_step_weights
from vla_recover.train.steps import FAILED, SUCCEEDED, UNLABELLED, build_step_table, trajectory_steps_to_go
from vla_recover.train.weighting import HABCWeighter, build_weighter

FAST = {"steps": 200, "batch_size": 64}


def _episode(actors: list[str], outcome: str, segments: list[tuple[int, int, str]], seed: int) -> EpisodeData:
    rng = np.random.default_rng(seed)
    n = len(actors)
    state = np.cumsum(rng.normal(size=(n, 3)), axis=0).astype(np.float32)
    return EpisodeData(
        task="LiftCube",
        steps={"obs.state": state, "action": rng.normal(size=(n, 2)).astype(np.float32)},
        outcome=outcome,
        actor=actors,
        segments=segments,
    )


@pytest.fixture
def store(tmp_path: Path) -> EpisodeStore:
    """A demo, a rescued success (rewind + long takeover), a plain failure, a failure with a short takeover."""
    with EpisodeStore(tmp_path / "s", mode="a") as s:
        s.append_episode(_episode(["scripted"] * 10, "success", [], 0))  # rows 0-9
        rescued = ["policy"] * 20 + ["human"] * 5 + ["human"] * 12 + ["policy"] * 8  # rows 10-54
        s.append_episode(
            _episode(
                rescued,
                "success",
                [(0, 20, "autonomous"), (20, 25, "rewind"), (25, 37, "intervention"), (37, 45, "autonomous")],
                1,
            )
        )
        s.append_episode(_episode(["policy"] * 15, "failure", [(0, 15, "autonomous")], 2))  # rows 55-69
        short = ["policy"] * 30 + ["human"] * 5 + ["policy"] * 10  # rows 70-114
        s.append_episode(
            _episode(short, "failure", [(0, 30, "autonomous"), (30, 35, "intervention"), (35, 45, "autonomous")], 3)
        )
    return EpisodeStore(tmp_path / "s")


def test_step_table_marks_rewinds_successors_and_credit(store: EpisodeStore) -> None:
    table = build_step_table(store)
    assert table.rewind.sum() == 5 and table.rewind[30:35].all()
    assert table.successor[29] == -1 and (table.successor[30:35] == -1).all() and table.successor[35] == 36
    assert table.successor[54] == -1 and table.successor[9] == -1
    # the rescued success: only policy steps after the last long takeover carry the outcome
    assert (table.outcome_label[10:30] == UNLABELLED).all()
    assert (table.outcome_label[47:55] == SUCCEEDED).all()
    # a 5-step takeover is not long enough to cut credit: every policy step of that failure is labelled
    assert (table.outcome_label[70:100] == FAILED).all() and (table.outcome_label[105:115] == FAILED).all()
    assert (table.outcome_label[100:105] == UNLABELLED).all()  # human steps carry no policy label
    assert table.pre_intervention[15:30].all() and not table.pre_intervention[10:15].any()
    assert table.pre_intervention[85:100].all() and table.pre_intervention.sum() == 30
    to_go = trajectory_steps_to_go(table)
    assert to_go[35] == 19 and to_go[54] == 0 and to_go[29] == -1 and to_go[0] == 9


def test_bc_and_iwr(store: EpisodeStore) -> None:
    weights, _ = build_step_weights(store, DatasetConfig(weighter="bc"))
    assert weights.sum() == 110 and (weights[30:35] == 0).all()
    weights, _ = build_step_weights(store, DatasetConfig(weighter="iwr"))
    human = np.r_[35:47, 100:105]
    assert np.allclose(weights[human], (110 - 17) / 17)
    assert weights[human].sum() == pytest.approx(weights.sum() / 2)
    assert (weights[np.r_[0:30, 47:100, 105:115]] == 1).all()


def test_sirius_class_shares(store: EpisodeStore) -> None:
    weights, _ = build_step_weights(store, DatasetConfig(weighter="sirius"))
    table = build_step_table(store)
    rollout = 100.0  # non-demo, non-rewind steps
    human = table.human
    pre = table.pre_intervention
    auto = table.executed & ~pre
    assert weights[table.demo].tolist() == [1.0] * 10
    assert weights[human].sum() == pytest.approx(0.5 * rollout)
    assert weights[pre].sum() == pytest.approx(0.002 * rollout)
    assert weights[auto].sum() == pytest.approx(0.498 * rollout)


def test_awr_weights_follow_the_formula(store: EpisodeStore) -> None:
    table = build_step_table(store)
    eligible = table.included & ~table.rewind
    weighter = build_weighter("awr", {"beta": 0.5, "max_weight": 3.0, "value": FAST})
    weights = weighter.weights(table, eligible)
    rows = np.flatnonzero(eligible)
    expected = np.minimum(np.exp((weighter.returns[rows] - weighter.value.predict(table.state[rows])) / 0.5), 3.0)
    assert np.allclose(weights[rows], expected, rtol=1e-5)
    assert weighter.returns[54] == 1.0 and weighter.returns[35] == pytest.approx(0.99**19)
    assert weighter.returns[29] == 0.0 and (weighter.returns[55:70] == 0).all()


def test_habc_gate_at_the_extremes(store: EpisodeStore) -> None:
    table = build_step_table(store)
    n = table.n
    rising_logit = np.linspace(-3, 3, n).astype(np.float32)
    efficiency = -np.arange(n, 0, -1).astype(np.float32) * 0.5  # gains half a step per step: A_e = -0.5
    # viability hopeless (p_v ~ 0): the gate follows the viability advantage only
    very_low = rising_logit - 60.0
    gate = HABCWeighter.gate(table, very_low, efficiency)
    a_v = very_low[1] - very_low[0]
    assert gate[0] == pytest.approx(1 + np.tanh(a_v), abs=1e-5)
    # viability certain (p_v ~ 1): the gate follows the efficiency advantage only
    very_high = rising_logit + 60.0
    gate = HABCWeighter.gate(table, very_high, efficiency)
    assert gate[0] == pytest.approx(1 + np.tanh(-1 + 0.5), abs=1e-5)
    assert gate[29] == 1.0  # its branch ended in a rewind: no successor, no advantage
    assert ((gate >= 0) & (gate <= 2)).all()


def test_habc_weights_respect_outcomes_and_boundaries(store: EpisodeStore) -> None:
    config = {"viability": FAST, "efficiency": FAST}
    weights, stats = build_step_weights(store, DatasetConfig(weighter="habc", weighter_config=config))
    assert (weights[0:10] == 1).all()  # demonstration
    assert (weights[35:47] == 1).all()  # intervention
    assert (weights[10:30] == 0).all()  # before the takeover: no outcome credit
    assert (weights[55:70] == 0).all() and (weights[70:100] == 0).all()  # failed rollouts
    assert (weights[47:55] > 0).all() and weights[47:55].mean() == pytest.approx(1.0, rel=1e-4)
    assert stats["labelled_success_steps"] == 8


def test_retention_needs_critic_labels_and_keeps_humans(store: EpisodeStore, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no critic segments"):
        build_step_weights(store, DatasetConfig(retention="critic"))
    with EpisodeStore(store.path, mode="a") as writable:
        for row in writable.episodes():
            cut = [(0, 5, "progress"), (5, 10, "idle"), (10, row.length, "progress")]
            scored = [(start, min(stop, row.length), kind, None) for start, stop, kind in cut if start < row.length]
            writable.write_segments(row.id, "critic", scored, actor="test", event="labels_written", payload={})
    weights, stats = build_step_weights(EpisodeStore(store.path), DatasetConfig(retention="critic"))
    assert (weights[0:10] == 1).all()  # demonstrations are never cut
    assert (weights[15:20] == 0).all() and (weights[60:65] == 0).all()  # idle policy steps dropped
    assert (weights[35:47] == 1).all()  # human steps kept
    assert stats["retained_autonomous_fraction"] < 1.0


def test_bad_weighting_config_names_the_field(store: EpisodeStore) -> None:
    from vla_recover.config import ConfigError
    from vla_recover.registry import UnknownNameError

    with pytest.raises(ValueError, match="weighter: got 'nope'; valid choices"):
        DatasetConfig(weighter="nope")
    with pytest.raises(UnknownNameError, match="valid choices"):
        build_weighter("nope")
    with pytest.raises(ValueError, match="beta"):
        DatasetConfig(weighter="awr", weighter_config={"beta": -1})
    with pytest.raises(ValueError, match="intervention_share"):
        DatasetConfig(weighter="sirius", weighter_config={"intervention_share": 0.999, "pre_intervention_share": 0.1})
    with pytest.raises(ConfigError, match="beta"):
        build_weighter("awr", {"beta": 0})
    with pytest.raises(ValueError, match="episodes"):
        build_step_weights(store, DatasetConfig(), episodes=[99])


def test_demo_share_rebalances_demonstrations(store: EpisodeStore) -> None:
    weights, _ = build_step_weights(store, DatasetConfig(demo_share=0.2))
    table = build_step_table(store)
    assert weights[table.demo].sum() == pytest.approx(0.2 * weights.sum())
    assert weights.sum() == pytest.approx(110)


@pytest.mark.parametrize("weighter", ["bc", "iwr", "sirius", "habc"])
def test_no_method_imitates_a_row_no_one_chose(tmp_path: Path, weighter: str) -> None:
    """Holds (a rejected chunk, a human reacting) and rewind rows get weight 0 whatever the weighter."""
    actors = ["policy"] * 8 + ["hold"] * 2 + ["policy"] * 5 + ["hold"] * 4 + ["rewind"] * 3 + ["human"] * 12
    actors += ["policy"] * 6
    segments = [(0, 15, "autonomous"), (15, 19, "intervention"), (19, 22, "rewind"), (22, 34, "intervention"),
                (34, 40, "autonomous")]  # fmt: skip
    with EpisodeStore(tmp_path / "s", mode="a") as s:
        s.append_episode(_episode(["scripted"] * 10, "success", [], 0))
        s.append_episode(_episode(actors, "success", segments, 1))
        s.append_episode(
            _episode(["policy"] * 12 + ["hold"] * 3 + ["policy"] * 5, "failure", [(0, 20, "autonomous")], 2)
        )
    store = EpisodeStore(tmp_path / "s")
    config = {"habc": {"viability": FAST, "efficiency": FAST}}.get(weighter, {})
    weights, _ = build_step_weights(store, DatasetConfig(weighter=weighter, weighter_config=config))
    unchosen = np.isin(store.read("actor"), [4, 5])  # hold, rewind
    assert unchosen.sum() == 12 and (weights[unchosen] == 0).all()
    assert (weights[:10] > 0).all()  # the demonstration
    table = build_step_table(store)
    assert not table.chosen[unchosen].any() and table.human.sum() == 12


def test_interventions_retention_keeps_the_demos_and_what_a_human_chose(store: EpisodeStore) -> None:
    """HG-DAgger's data: nothing the policy did alone, whatever the weighter."""
    weights, stats = build_step_weights(store, DatasetConfig(retention="interventions"))
    table = build_step_table(store)
    assert (weights[table.demo] > 0).all() and (weights[table.human & ~table.rewind] > 0).all()
    assert (weights[table.executed] == 0).all() and table.executed.sum() == 83
    assert stats["nonzero_steps"] == 10 + 12 + 5 and stats["retained_autonomous_fraction"] == 0.0


def test_shares_give_each_source_its_part_of_the_weight(store: EpisodeStore) -> None:
    """HELP's mixes: base : HITL : curated 1 : 1 : 1, and base : HITL 1 : 1 with nothing the policy did alone."""
    table = build_step_table(store)
    weights, _ = build_step_weights(store, DatasetConfig(shares={"demos": 1, "human": 1, "autonomous": 1}))
    for source in (table.demo, table.human, table.executed):
        assert weights[source].sum() == pytest.approx(weights.sum() / 3)
    hitl, _ = build_step_weights(store, DatasetConfig(retention="interventions", shares={"demos": 1, "human": 1}))
    assert hitl[table.demo].sum() == pytest.approx(hitl[table.human].sum()) and (hitl[table.executed] == 0).all()
    # a source with no weight drops out: the demos alone carry everything
    only, _ = build_step_weights(store, DatasetConfig(retention="interventions", shares={"demos": 1, "autonomous": 1}))
    assert only[table.demo].sum() == pytest.approx(only.sum()) and (only[table.human] == 0).all()
    with pytest.raises(ValueError, match=r"shares: got \{'demos': -1.0\}"):
        DatasetConfig(shares={"demos": -1})
    with pytest.raises(ValueError, match="give one"):
        DatasetConfig(shares={"demos": 1}, demo_share=0.2)


def test_value_priority_ranks_rollout_steps_by_their_learned_value(store: EpisodeStore) -> None:
    config = {"power": 2.0, "value": FAST}
    weighter = build_weighter("value_priority", config)
    table = build_step_table(store)
    eligible = table.included & table.chosen
    weights = weighter.weights(table, eligible)
    rollout = eligible & table.executed
    assert (weights[eligible & (table.demo | table.human)] == 1.0).all()  # demos and corrections are not ranked
    assert weights[rollout].mean() == pytest.approx(1.0, rel=1e-5)
    order = np.argsort(weighter.value_estimate[rollout], kind="stable")
    assert (np.diff(weights[rollout][order]) >= 0).all()  # probability rises with the value
    n = int(rollout.sum())
    assert weights[rollout].max() / weights[rollout].min() == pytest.approx(n**2, rel=1e-4)  # (n / 1) ** power
    assert weights[47:55].mean() > weights[55:70].mean()  # the rescued success's own steps over a plain failure
    assert set(weighter.stats["reliability"]["value"]) >= {"voc", "pair_accuracy"}
