"""Robo-ValueRL's reliability measures on value functions whose answer is known by construction."""

from __future__ import annotations

import numpy as np
import pytest

from vla_recover.train.reliability import value_reliability
from vla_recover.train.steps import StepTable


def _table(episodes: list[dict]) -> StepTable:
    """Episodes as dicts: ``length``, ``success``, ``progress`` (or None), ``rewind`` (row indices), one after
    another in the store."""
    n = sum(e["length"] for e in episodes)
    episode, rewind = np.zeros(n, np.int64), np.zeros(n, bool)
    successor, terminal, success = np.full(n, -1, np.int64), np.zeros(n, bool), np.zeros(n, bool)
    progress = np.full(n, np.nan, np.float32)
    start = 0
    for index, e in enumerate(episodes):
        stop = start + e["length"]
        episode[start:stop] = index
        rewind[[start + r for r in e.get("rewind", [])]] = True
        successor[start : stop - 1] = np.arange(start + 1, stop)
        ends = np.flatnonzero(rewind[start + 1 : stop]) + start
        successor[ends] = -1
        successor[start:stop][rewind[start:stop]] = -1
        terminal[stop - 1] = e["success"]
        success[start:stop] = e["success"]
        if e.get("progress") is not None:
            progress[start:stop] = e["progress"]
        start = stop
    false = np.zeros(n, bool)
    return StepTable(
        episode=episode, included=np.ones(n, bool), rewind=rewind, executed=~rewind, human=false, demo=false,
        pre_intervention=false, successor=successor, terminal_success=terminal, episode_success=success,
        outcome_label=np.full(n, -1, np.int8), state=np.zeros((n, 1), np.float32), progress=progress,
        supervision={},
    )  # fmt: skip


RISING = {"length": 10, "success": True, "progress": np.linspace(0.0, 1.0, 10)}


def test_a_value_equal_to_progress_is_perfectly_reliable_and_its_negation_perfectly_wrong() -> None:
    table = _table([RISING])
    good = value_reliability(table.progress, table)
    assert good["voc"] == 1.0 and good["pair_accuracy"] == {"1": 1.0, "8": 1.0} and good["reference"] == "progress"
    assert good["pairs"] == {"1": 9, "8": 2} and good["voc_episodes"] == 1
    bad = value_reliability(-table.progress, table)
    assert bad["voc"] == -1.0 and bad["pair_accuracy"] == {"1": 0.0, "8": 0.0}


def test_a_flat_value_says_nothing_and_ties_count_half() -> None:
    table = _table([RISING])
    flat = value_reliability(np.zeros(table.n), table)
    assert flat["voc"] == 0.0 and flat["pair_accuracy"] == {"1": 0.5, "8": 0.5}


def test_one_swapped_pair_costs_what_spearman_and_the_pair_count_say() -> None:
    table = _table([RISING])
    values = table.progress.copy()
    values[[4, 5]] = values[[5, 4]]
    measured = value_reliability(values, table, gaps=(1,))
    assert measured["voc"] == pytest.approx(1 - 6 * 2 / (10 * 99), abs=1e-4)  # Spearman with two ranks off by one
    assert measured["pair_accuracy"]["1"] == pytest.approx(8 / 9, abs=1e-4)


def test_progress_judges_failures_too_where_time_order_would_be_wrong() -> None:
    falls = np.r_[np.linspace(0.0, 0.5, 6), np.linspace(0.4, 0.1, 4)]  # rises 5 steps, falls 4
    table = _table([{"length": 10, "success": False, "progress": falls}])
    assert value_reliability(table.progress, table, gaps=(1,))["pair_accuracy"]["1"] == 1.0
    clock = value_reliability(np.arange(10.0), table, gaps=(1,))  # a value that only counts time
    assert clock["pair_accuracy"]["1"] == pytest.approx(5 / 9, abs=1e-4)
    assert clock["voc"] is None and clock["voc_episodes"] == 0  # no success to correlate along


def test_without_progress_only_successful_trajectories_are_judged_by_time() -> None:
    table = _table([{"length": 10, "success": True, "progress": None}, {"length": 6, "success": False}])
    values = np.r_[np.arange(10.0), -np.arange(6.0)]  # rises on the success, falls on the failure
    measured = value_reliability(values, table, gaps=(1,))
    assert measured["reference"] == "time" and measured["pairs"] == {"1": 9}
    assert measured["pair_accuracy"]["1"] == 1.0 and measured["voc"] == 1.0


def test_pairs_and_the_success_trajectory_stop_at_a_rewind() -> None:
    # rows 0-3 a branch the teleoperator abandoned, 4-5 the rewind, 6-11 the path to success
    table = _table([{"length": 12, "success": True, "progress": None, "rewind": [4, 5]}])
    values = np.r_[10.0 + np.arange(4), 0.0, 0.0, np.arange(6.0)]  # high on the abandoned branch, rising after
    measured = value_reliability(values, table, gaps=(1,))
    assert measured["voc"] == 1.0 and measured["pairs"] == {"1": 5} and measured["pair_accuracy"]["1"] == 1.0


def test_a_value_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="values: expected one per stored step"):
        value_reliability(np.zeros(3), _table([RISING]))
