"""Judging a detector of "needs correction" on stored fleet episodes: precision, recall and latency.

A detector gives one verdict per policy row, computed as the fleet would have: along the robot's current branch
(rewind rows cut it back), from what was seen up to that row. Its *alerts* are the rising edges of those verdicts
over consecutive policy rows. Against the recorded failures (``vla_recover.recovery.labels``):

- recall: the share of recoverable failures with a verdict raised inside [onset − lead, end) (a detector may see a
  failure coming a little before the simulator flags it: ``lead_s``);
- precision: the share of alerts raised inside some failure's [onset − lead, end); alerts inside a failure the
  expert could not have recovered from count neither way;
- latency: seconds from the onset to the first raised verdict, over the detected recoverable failures (negative:
  before the onset).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from vla_recover.data import EpisodeStore
from vla_recover.data.schema import ACTORS
from vla_recover.recovery.labels import correction_windows

__all__ = ["DetectorScore", "branch_alerts", "score_detector"]

_POLICY = (ACTORS.index("policy"), ACTORS.index("guided"))
_REWIND = ACTORS.index("rewind")


@dataclass(frozen=True)
class DetectorScore:
    episodes: int
    failures: int  # recoverable failures in those episodes
    detected: int
    recall: float | None
    alerts: int
    true_alerts: int
    precision: float | None
    latency_s_p50: float | None
    latency_s_mean: float | None

    def as_json(self) -> dict[str, float | int | None]:
        return asdict(self)


def branch_alerts(values: np.ndarray, actor: np.ndarray, rule: Callable[[list[float]], bool]) -> np.ndarray:
    """(rows,) bool for one episode: ``rule`` on the branch's values so far, at each policy row."""
    verdicts = np.zeros(len(values), dtype=bool)
    branch: list[float] = []
    for row, (value, who) in enumerate(zip(values, actor, strict=True)):
        if who == _REWIND:
            if branch:
                branch.pop()
            continue
        branch.append(float(value))
        if who in _POLICY:
            verdicts[row] = rule(branch)
    return verdicts


def score_detector(
    store: EpisodeStore, verdicts: np.ndarray, episodes: Iterable[int] | None = None, lead_s: float = 0.5
) -> DetectorScore:
    """Score per-row ``verdicts`` (n_steps,) bool on the stored episodes with failure records (module docstring)."""
    wanted = None if episodes is None else set(episodes)
    actor = store.read("actor")
    sim_time = store.read("sim_time")
    scored = failures = detected = alerts = true_alerts = 0
    latencies: list[float] = []
    for row in store.episodes():
        if (wanted is not None and row.id not in wanted) or "failures" not in row.info:
            continue
        scored += 1
        who = actor[row.start : row.stop]
        raised = verdicts[row.start : row.stop] & np.isin(who, _POLICY)
        dt = float(sim_time[row.start + 1] - sim_time[row.start]) if row.length > 1 else 1.0
        lead = round(lead_s / dt) if dt > 0 else 0
        recoverable, other = correction_windows(row.info)
        for start, stop in recoverable:
            failures += 1
            hits = np.flatnonzero(raised[max(0, start - lead) : stop])
            if hits.size:
                detected += 1
                latencies.append((max(0, start - lead) + int(hits[0]) - start) * dt)
        policy = np.isin(who, _POLICY)
        previous = np.concatenate([[False], raised[:-1] & policy[:-1]])
        for edge in np.flatnonzero(raised & ~previous):
            if any(max(0, a - lead) <= edge < b for a, b in other):
                continue  # a failure past saving: an alert there is neither right nor wrong
            alerts += 1
            true_alerts += any(max(0, a - lead) <= edge < b for a, b in recoverable)
    return DetectorScore(
        episodes=scored,
        failures=failures,
        detected=detected,
        recall=round(detected / failures, 4) if failures else None,
        alerts=alerts,
        true_alerts=true_alerts,
        precision=round(true_alerts / alerts, 4) if alerts else None,
        latency_s_p50=round(float(np.median(latencies)), 3) if latencies else None,
        latency_s_mean=round(float(np.mean(latencies)), 3) if latencies else None,
    )
