"""Ground-truth failures in a sim fleet, and how soon the operators reached them.

A failure's onset is the first step the ground truth flags it while the policy is in control: an injected failure
fires, or the task's progress falls more than ``failure_progress_drop`` below its best on the current branch. The
failure ends when a takeover is granted, when the policy regains the progress it lost (within 0.02), or when the
attempt ends. A failure is *still recoverable* at a step if the scripted expert (the simulated teleoperator's hands),
started from the exact sim state of that step, completes the task within the episode's horizon; the fleet probes
that at the onset and at the grant (``vla_recover.fleet.worker``, ``recoverable``). Times are sim seconds. Each
failure is stored with its episode (``info["failures"]``, rows of that episode), so a detector can be trained and
judged on what the fleet saw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from vla_recover.curves import is_failing

if TYPE_CHECKING:
    from vla_recover.fleet.slot import Slot

__all__ = ["Failure", "FailureWatch", "failure_report"]

REGAINED_WITHIN = 0.02  # progress back within this of its best before the onset: the policy recovered by itself


@dataclass
class Failure:
    robot: str
    seed: int
    onset_step: int  # the branch step after which the failure showed (the state the onset probe starts from)
    onset_s: float
    kind: str  # the injected failure's kind, or "progress_drop"
    best_progress: float  # the branch's best progress before the onset
    lowest_progress: float  # the lowest progress since the onset
    requested_s: float | None = None
    granted_s: float | None = None
    end: str = "open"  # takeover | recovered_by_policy | attempt_ended
    recoverable_at_onset: bool | None = None  # None: not probed (no sim, or the probe was lost with its attempt)
    recoverable_at_grant: bool | None = None
    onset_row: int = -1  # the attempt's (its stored episode's) row of the step after which the failure showed
    end_row: int | None = None  # the first row after the failure ended (None while open)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


Probe = Callable[["Slot", Failure, str, "int | None"], None]  # ask a slot's sim: (slot, failure, field, step)


class FailureWatch:
    """Dates each robot's ground-truth failures under the policy and closes them; ``probe`` asks its sim whether the
    expert could still finish (the answer is filed into the failure's field when it lands)."""

    def __init__(self, drop: float, probe: Probe) -> None:
        self.drop, self.probe = drop, probe
        self.failures: list[Failure] = []  # every failure seen, closed or open

    def stepped(self, slot: Slot, info: dict[str, Any], now: float) -> None:
        """After a policy step landed on ``slot``: open a failure at its onset, or close it if the policy regained
        what it lost."""
        progress, failure = slot.branch_progress, slot.failure
        if failure is not None:
            failure.lowest_progress = min(failure.lowest_progress, progress[-1])
            fell = failure.lowest_progress < failure.best_progress - self.drop
            if fell and progress[-1] >= failure.best_progress - REGAINED_WITHIN:
                self.close(slot, "recovered_by_policy")
            return
        if slot.attempt is not None and is_failing(info, progress, self.drop):
            best = max(progress[:-1], default=progress[-1])
            kind = info.get("failure") or "progress_drop"
            slot.failure = Failure(
                slot.robot, slot.attempt.seed, len(slot.branch_rows), now, kind, best, progress[-1],
                onset_row=slot.branch_rows[-1],
            )  # fmt: skip
            self.failures.append(slot.failure)
            if slot.attempt.failures is not None:
                slot.attempt.failures.append(slot.failure)  # stored with the episode (its info's "failures")
            self.probe(slot, slot.failure, "recoverable_at_onset", len(slot.branch_rows))

    def requested(self, slot: Slot, now: float) -> None:
        if slot.failure is not None and slot.failure.requested_s is None:
            slot.failure.requested_s = now

    def granted(self, slot: Slot, now: float) -> None:
        """A takeover began: the failure ends; the probe asks from where the human starts (after the steps in
        flight have landed)."""
        if slot.failure is not None:
            slot.failure.granted_s = now
            self.probe(slot, slot.failure, "recoverable_at_grant", None)
            self.close(slot, "takeover")

    def ended(self, slot: Slot, outcome: str) -> None:
        if slot.failure is not None:
            self.close(slot, "recovered_by_policy" if outcome == "success" else "attempt_ended")

    @staticmethod
    def close(slot: Slot, end: str) -> None:
        assert slot.failure is not None
        if slot.attempt is not None:
            slot.failure.end_row = len(slot.attempt)
        slot.failure.end, slot.failure = end, None


def _quantile(values: list[float], q: float) -> float | None:
    """None for no values, or where the quantile is a wait that never ended."""
    if not values:
        return None
    value = float(np.quantile(np.asarray(values, dtype=np.float64), q, method="higher"))
    return round(value, 3) if np.isfinite(value) else None


def failure_report(failures: list[Failure]) -> dict[str, Any]:
    """The figures of a fleet run: how many failures, how soon a takeover came, how many while still recoverable.

    ``onset_to_grant_s_*``: over the failures still recoverable at their onset (or not probed) that the policy did
    not recover from by itself, a failure with no takeover counting as a wait without end (None where that decides
    the quantile). ``rescued_in_time_share``: of the
    failures still recoverable at their onset that the policy did not recover from by itself, the share that got a
    takeover while still recoverable.
    """
    closed = [f for f in failures if f.end != "open"]
    granted = [f for f in closed if f.granted_s is not None]
    # the failures a takeover could save (recoverable at onset, or not probed) and the policy did not; one that
    # never got a takeover waits forever: None where that reaches the quantile
    delays = [np.inf if f.granted_s is None else f.granted_s - f.onset_s for f in closed
              if f.end != "recovered_by_policy" and f.recoverable_at_onset is not False]  # fmt: skip
    requests = [f.requested_s - f.onset_s for f in closed if f.requested_s is not None]
    needing = [f for f in closed if f.recoverable_at_onset and f.end != "recovered_by_policy"]
    in_time = [f for f in needing if f.end == "takeover" and f.recoverable_at_grant]
    return {
        "failures": len(closed),
        "taken_over": len(granted),
        "recovered_by_policy": sum(f.end == "recovered_by_policy" for f in closed),
        "ended_without_takeover": sum(f.end == "attempt_ended" for f in closed),
        "recoverable_at_onset": sum(bool(f.recoverable_at_onset) for f in closed),
        "not_probed": sum(f.recoverable_at_onset is None for f in closed),
        "onset_to_request_s_p50": _quantile(requests, 0.5),
        "onset_to_grant_s_p50": _quantile(delays, 0.5),
        "onset_to_grant_s_p90": _quantile(delays, 0.9),
        "recoverable_needing_takeover": len(needing),
        "rescued_in_time": len(in_time),
        "rescued_in_time_share": round(len(in_time) / len(needing), 4) if needing else None,
    }
