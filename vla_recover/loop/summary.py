"""The loop's ``summary.json`` as the report reads it: one model per section, validated in one place, and the
numbers the report derives from the rounds (``View``).

Throughput gain over base compares a round's fleet throughput (successes per robot-hour) with that of the first
round whose fleet ran the base policy; the fleet of round *r* runs the policy current after round *r - 1*.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LoopSummary", "Round", "View"]


class _Section(BaseModel):
    # the summary is written by the loop and may gain fields: ignore what the report does not show
    model_config = ConfigDict(frozen=True, extra="ignore")


class EvalResult(_Section):
    success_rate: float = Field(ge=0.0, le=1.0)
    ci95: tuple[float, float]
    successes: int | None = None
    episodes: int | None = None
    mean_length: float | None = None
    outcomes: list[int] | None = None  # per seed; evaluations saved before they kept them: None
    failures_fired: list[str] | None = None  # per seed, the injected failures that fired ("push+slip", "")


class Decision(_Section):
    candidate_rate: float | None = None
    current_rate: float | None = None
    diff_lower_bound: float | None = None
    confidence: float | None = None
    test: str | None = None
    shared_seeds: int | None = None
    candidate_only: int | None = None
    current_only: int | None = None
    p_value: float | None = None


class Fleet(_Section):
    episodes: int | None = None
    successes: int | None = None
    interventions: int | None = None
    rewinds: int | None = None
    operator_s: dict[str, float] = {}
    robot_hours: float | None = None
    wall_s: float | None = None
    successes_per_robot_hour: float | None = None
    successes_per_operator_hour: float | None = None
    successes_per_present_hour: float | None = None
    human_steps: int | None = None
    rohe: float | None = None  # Fleet-DAgger's return on human effort
    outcomes: dict[str, int] = {}
    failure_response: dict[str, float | int | None] = {}


class Train(_Section):
    steps: int | None = None
    wall_s: float | None = None
    final_loss: float | None = None
    weights: dict[str, float] = {}


class Guided(_Section):
    chunks: int | None = None
    guided_chunks: int | None = None
    successes: int | None = None
    episodes: int | None = None


class Demos(_Section):
    """A ``more_demos`` round: demonstrations bought with the human time a fleet round would have taken."""

    episodes: int | None = None
    successes: int | None = None
    human_s: float | None = None


class Oracle(_Section):
    """A ``dagger_oracle`` round: the perfect expert's chunk from the states the policy visited."""

    policy_episodes: int | None = None
    policy_successes: int | None = None
    branches: int | None = None
    steps: int | None = None
    mean_label_gap: float | None = None


class Reliability(_Section):
    """A value function's reliability (vla_recover.train.reliability)."""

    voc: float | None = None
    voc_episodes: int = 0
    pair_accuracy: dict[str, float | None] = {}
    pairs: dict[str, int] = {}
    reference: str = "time"


class DetectorScore(_Section):
    """A detector of "needs correction" on fleet episodes (vla_recover.recovery.DetectorScore)."""

    episodes: int = 0
    failures: int = 0
    recall: float | None = None
    alerts: int = 0
    precision: float | None = None
    latency_s_p50: float | None = None


class RecoveryGate(_Section):
    """The recovery gate a round's policy was trained with: its threshold and how it did on held-back episodes."""

    threshold: float
    fit_rows: int = 0
    fit_needs_correction: int = 0
    threshold_choice: DetectorScore | None = None


class Round(_Section):
    round: int = Field(ge=0)
    policy: str
    eval: EvalResult
    promoted: bool = False
    current: str | None = None
    decision: Decision | None = None
    fleet: Fleet | None = None
    demos: Demos | None = None
    oracle: Oracle | None = None
    final_test: EvalResult | None = None
    segments: dict[str, float] = {}
    train: Train | None = None
    guided: Guided | None = None
    reliability: dict[str, Reliability] = {}
    recovery_gate: RecoveryGate | None = None


class PairedWithLoop(_Section):
    """The baseline's test and the promoted policy's on the seeds both ran: who alone succeeded where."""

    shared_seeds: int
    loop_only: int
    baseline_only: int
    p_loop_better: float  # exact McNemar, one-sided


class Baseline(_Section):
    """The loop's human time spent instead on demonstrations, fine-tuned into the base in one round."""

    method: str
    paired: PairedWithLoop | None = None  # runs summarised before it was
    loop_human_s: float
    human_s: float
    demos: int
    seeds: Literal["final_test", "promotion"]
    test: EvalResult


class Final(_Section):
    policy: str
    final_test: EvalResult | None = None


class LoopSummary(_Section):
    name: str = "loop"
    task: str | None = None
    method: str | None = None
    eval_episodes: int | None = None
    eval_seed: int | None = None
    final_test_episodes: int | None = None
    final_test_seed: int | None = None
    rounds: list[Round] = Field(min_length=1)
    timings_s: dict[str, float] = {}
    beside_s: dict[str, float] = {}  # steps run in the process beside the rounds: the seconds they ran there
    final: Final | None = None
    baseline: Baseline | None = None


@dataclass(frozen=True)
class View:
    """The summary's rounds in order, with the numbers the report derives from them."""

    rounds: list[Round]
    fleet_policy: dict[int, str | None]  # round -> policy its fleet ran (current after the previous round)

    @classmethod
    def of(cls, summary: LoopSummary) -> View:
        rounds = sorted(summary.rounds, key=lambda r: r.round)
        fleet_policy: dict[int, str | None] = {}
        previous: str | None = None
        for r in rounds:
            fleet_policy[r.round] = previous
            previous = r.current
        return cls(rounds, fleet_policy)

    def robot_rate(self, r: Round) -> float | None:
        f = r.fleet
        if f is None:
            return None
        if f.successes_per_robot_hour is not None:
            return f.successes_per_robot_hour
        return f.successes / f.robot_hours if f.successes is not None and f.robot_hours else None

    def operator_rate(self, r: Round) -> float | None:
        f = r.fleet
        if f is None:
            return None
        if f.successes_per_operator_hour is not None:
            return f.successes_per_operator_hour
        hours = sum(f.operator_s.values()) / 3600
        return f.successes / hours if f.successes is not None and hours > 0 else None

    def intervention_rate(self, r: Round) -> float | None:
        f = r.fleet
        return f.interventions / f.episodes if f and f.interventions is not None and f.episodes else None

    def base_throughput(self) -> float | None:
        base = self.rounds[0].policy
        for r in self.rounds:
            if self.fleet_policy[r.round] == base and (rate := self.robot_rate(r)) is not None:
                return rate
        return None

    def segment_fractions(self, r: Round) -> dict[str, float]:
        total = sum(r.segments.values())
        return {kind: steps / total for kind, steps in r.segments.items()} if total > 0 else {}
