"""How far a value function can be trusted to rank data: Robo-ValueRL's two measures of reliability.

- **Global progress agreement**: VOC, the Spearman correlation between the value and time along each successful
  trajectory (the rows that led to its success), averaged over episodes. 1: the value rises all the way to success.
- **Local preference accuracy**: over pairs of states ``gap`` steps apart on one trajectory (a step, a chunk), the
  share the value orders as the reference does. The reference is the simulator's progress where the store has it
  (pairs whose progress differs by at least ``min_progress_change``: failures and recoveries count too), else time
  on successful trajectories (later is better). A tie in the value counts half.

Every value here is "higher is better" (a critic's progress, a viability logit, minus steps-to-go, a discounted
return); the loop reports these measures for every value it keeps or weighs data by (``LoopRun`` and the weighters'
``stats``). The measures are in-sample where the value was fit on the same steps (the advantage weighters' heads).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from vla_recover.data import EpisodeStore
from vla_recover.train.steps import StepTable, build_step_table, trajectory_steps_to_go

__all__ = ["DEFAULT_GAPS", "curve_reliability", "value_reliability"]

# a control step, and a chunk as the policies execute it (PolicyConfig.action_exec's default)
DEFAULT_GAPS: tuple[int, ...] = (1, 8)


def _successors(successor: np.ndarray, gap: int) -> np.ndarray:
    """Index ``gap`` steps later on the same trajectory, -1 where the trajectory ends first."""
    later = np.arange(successor.shape[0])
    for _ in range(gap):
        later = np.where(later >= 0, successor[np.maximum(later, 0)], -1)
    return later


def value_reliability(
    values: np.ndarray,
    table: StepTable,
    gaps: Sequence[int] = DEFAULT_GAPS,
    min_progress_change: float = 0.01,
    min_episode_steps: int = 3,
) -> dict[str, Any]:
    """The two measures of ``values`` (one per stored step, NaN where there is none) over the table's included,
    non-rewind rows. None where there is nothing to measure (no successful trajectory, no pair)."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (table.n,):
        raise ValueError(f"values: expected one per stored step ({table.n}), got shape {values.shape}")
    rows = table.included & ~table.rewind & np.isfinite(values)
    to_go = trajectory_steps_to_go(table)
    on_success = rows & (to_go >= 0) & table.episode_success

    correlations = []
    for episode in np.unique(table.episode[on_success]):
        mine = np.flatnonzero(on_success & (table.episode == episode))
        if mine.size >= min_episode_steps and np.ptp(values[mine]) > 0:
            correlations.append(float(spearmanr(values[mine], -to_go[mine]).statistic))
        elif mine.size >= min_episode_steps:
            correlations.append(0.0)  # a flat value says nothing about progress
    progress = np.asarray(table.progress, dtype=np.float64)
    reference = "progress" if np.isfinite(progress[rows]).any() else "time"

    accuracy: dict[str, float | None] = {}
    pairs: dict[str, int] = {}
    for gap in gaps:
        later = _successors(table.successor, gap)
        first = np.flatnonzero(rows & (later >= 0))
        first = first[rows[later[first]]]
        second = later[first]
        if reference == "progress":
            change = progress[second] - progress[first]
            keep = np.isfinite(change) & (np.abs(change) >= min_progress_change)
            expected = np.sign(change[keep])
        else:
            keep = on_success[first] & on_success[second]
            expected = np.ones(int(keep.sum()))
        got = np.sign(values[second[keep]] - values[first[keep]])
        score = np.where(got == 0, 0.5, (got == expected).astype(np.float64))
        pairs[str(gap)] = int(keep.sum())
        accuracy[str(gap)] = round(float(score.mean()), 4) if score.size else None
    return {
        "voc": round(float(np.mean(correlations)), 4) if correlations else None,
        "voc_episodes": len(correlations),
        "pair_accuracy": accuracy,
        "pairs": pairs,
        "reference": reference,
    }


def curve_reliability(
    store: EpisodeStore,
    curves: dict[int, tuple[np.ndarray, np.ndarray]],
    episode_ids: Sequence[int],
    gaps: Sequence[int] = DEFAULT_GAPS,
) -> dict[str, Any]:
    """``value_reliability`` of per-episode curves over ``episode_ids``: ``curves`` maps an episode id to (its rows,
    the value on them), as a critic rates an episode's timeline (``label_store(curves=...)``)."""
    table = build_step_table(store, episode_ids)
    values = np.full(table.n, np.nan)
    ids, starts = np.unique(table.episode, return_index=True)  # an episode's rows are contiguous in the store
    start_of = dict(zip(ids.tolist(), starts.tolist(), strict=True))
    for episode_id in episode_ids:
        if episode_id in curves:
            rows, curve = curves[episode_id]
            values[start_of[episode_id] + np.asarray(rows)] = curve
    return value_reliability(values, table, gaps)
