"""The grid ``benchmarks/loop.py --grid`` runs (``GRID``: each setting's loop config, methods, pipeline seeds and
rounds) and the goals it judges on the means over the pipeline seeds run so far (``grid_goals``), each figure with
the 95% interval its evaluation episodes alone put on it (``vla_recover.stats.binomial_bootstrap_interval``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.loop.methods import LOOP_METHODS
from vla_recover.stats import binomial_bootstrap_interval

__all__ = ["GRID", "Setting", "contender", "grid_goals"]


@dataclass(frozen=True)
class Setting:
    """One setting of the grid: a loop config, the methods run on it, its pipeline seeds and its rounds."""

    config: Path
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    rounds: int
    operator_budget_s: float = 150.0  # busy operator-seconds a fleet round stops at
    max_episodes: int = 60  # fleet episodes a round stops at


# The grid every goal is judged on (about 10 hours of 2 cores with --jobs 2, over several sittings, from the cell
# times in RESULTS.md; finished runs are read back).
# PickPlaceBin takes the three best methods on LiftCube with failures (RESULTS.md), the two with a second generator
# (afil, recovery_gated) and the baselines.
GRID: dict[str, Setting] = {
    "lift_failures": Setting(Path("configs/loop/quickstart.yaml"), tuple(LOOP_METHODS.names()), (0, 1, 2), 3),
    "lift_nominal": Setting(Path("configs/loop/lift_nominal.yaml"), tuple(LOOP_METHODS.names()), (0, 1, 2), 3),
    "pick_place_failures": Setting(
        Path("configs/loop/pick_place_failures.yaml"),
        (
            "habc",
            "dagger_oracle",
            "hitl_bc",
            "critic_cut",
            "afil",
            "recovery_gated",
            "more_demos",
            "more_demos_perturbed",
        ),
        (0, 1, 2),
        4,
        operator_budget_s=300.0,  # its goal allows 10 operator-minutes a round: three operators present ~5
        max_episodes=96,
    ),
    "robosuite_can": Setting(Path("configs/loop/robosuite_pick_place_can.yaml"), ("habc", "more_demos"), (0,), 3),
}


BASE = "base"  # a seed's base policy among its methods' success records
Rates = Mapping[Any, np.ndarray]  # (pipeline seed, method or BASE): success rates, measured or drawn
Statistic = Callable[[Rates], np.ndarray]


def _goal(
    setting: str,
    goal: str,
    measured: float | None,
    target: float,
    at_least: bool = True,
    statistic: Statistic | None = None,
    records: Records | None = None,
) -> dict[str, Any]:
    met = None if measured is None else (measured >= target if at_least else measured <= target)
    interval = None
    if statistic is not None and records is not None and measured is not None:
        bounds = binomial_bootstrap_interval(records.rates, statistic, same_as=records.kept_base)
        interval = [round(bound, 3) for bound in bounds] if bounds is not None else None
    return {"setting": setting, "goal": goal, "measured": measured, "ci95": interval, "target": target, "met": met}


@dataclass(frozen=True)
class Records:
    """Each seed's success records, (seed, method or BASE): (the judged success rate, its episodes); a method that
    promoted nothing is its base's evaluation (``kept_base``), not a record of its own."""

    rates: dict[tuple[int, str], tuple[float, int]]
    kept_base: dict[tuple[int, str], tuple[int, str]]


def _records(figures: dict[str, Any]) -> Records | None:
    """None for figures read back from runs that did not keep their episode counts."""
    judged = figures["judged"]
    base_key = "base_final_test_success" if judged == "final_test_success" else "base_success"
    records = Records({}, {})
    for seed, seed_figures in _per_seed(figures).items():
        if seed_figures.get("base_judged_episodes") is None:
            return None
        records.rates[(seed, BASE)] = (seed_figures[base_key], seed_figures["base_judged_episodes"])
        for method, result in seed_figures["methods"].items():
            if result.get(judged) is None or result.get("judged_episodes") is None:
                return None
            if result["final_policy"] == BASE:
                records.kept_base[(seed, method)] = (seed, BASE)
            else:
                records.rates[(seed, method)] = (result[judged], result["judged_episodes"])
    return records


def _success(seeds: list[int], method: str) -> Statistic:
    return lambda rates: np.mean([rates[(k, method)] for k in seeds], axis=0)


def _gain(seeds: list[int], method: str) -> Statistic:
    """The mean gain over each seed's base, in points."""
    return lambda rates: 100 * np.mean([rates[(k, method)] - rates[(k, BASE)] for k in seeds], axis=0)


def _difference(seeds: list[int], method: str, other: str) -> Statistic:
    """The mean success of ``method`` minus ``other``'s, in points."""
    return lambda rates: 100 * (_success(seeds, method)(rates) - _success(seeds, other)(rates))


def _strongest(seeds: list[int], methods: list[str]) -> Statistic:
    return lambda rates: np.max([_success(seeds, m)(rates) for m in methods], axis=0)


def _least_gain(runs: list[tuple[int, str]]) -> Statistic:
    """The smallest gain, in points, of any (seed, method) run over its seed's base."""
    return lambda rates: np.min([100 * (rates[run] - rates[(run[0], BASE)]) for run in runs], axis=0)


def _quotient(numerator: Statistic, denominator: Statistic) -> Statistic:
    def ratio(rates: Rates) -> np.ndarray:
        top, bottom = np.asarray(numerator(rates)), np.asarray(denominator(rates))
        return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)

    return ratio


def grid_goals(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The loop's goals on the settings measured so far, each from the means over the pipeline seeds run; a goal
    judged on fewer seeds than its setting has says so (``seeds``)."""
    goals: list[dict[str, Any]] = []
    for name, figures in results.items():
        seeds_run, seeds_all = len(figures["pipeline_seeds"]), len(GRID[name].seeds) if name in GRID else None
        goals += [{**goal, "seeds": f"{seeds_run} of {seeds_all}"} for goal in _setting_goals(name, figures)]
    return goals


def _setting_goals(name: str, figures: dict[str, Any]) -> list[dict[str, Any]]:
    means, judged, base = figures["mean_over_seeds"], figures["judged"], figures["base_mean"]
    best, seeds, records = figures["best_method"], list(figures["pipeline_seeds"]), _records(figures)
    added: list[dict[str, Any]] = []

    def goal(label: str, measured: float | None, target: float, statistic: Statistic, at_least: bool = True) -> None:
        added.append(_goal(name, label, measured, target, at_least, statistic, records))

    targets = {  # setting: (the best method's success at least, its gain over more_demos' at least)
        "lift_failures": (0.90, 1.5),
        "lift_nominal": (0.98, None),
        "pick_place_failures": (0.60, 1.5),
    }
    success_target, ratio_target = targets.get(name, (None, None))
    if best is not None and success_target is not None:
        goal(f"best method ({best}) success", means[best][judged], success_target, _success(seeds, best))
        if "dagger_oracle" in means:  # the ceiling a goal out of reach is read against
            added[-1]["dagger_oracle"] = means["dagger_oracle"][judged]
    if best is not None and ratio_target is not None and "more_demos" in means:
        measured = _ratio(means[best]["gain_points"], means["more_demos"]["gain_points"])
        statistic = _quotient(_gain(seeds, best), _gain(seeds, "more_demos"))
        goal("best gain / more_demos gain", measured, ratio_target, statistic)
    if name == "pick_place_failures":
        goal("base success", base, 0.15, _success(seeds, BASE), at_least=False)
        minutes = [means[m]["human_s"] / figures["rounds"] / 60 for m in means if contender(m)]
        most = round(max(minutes), 2) if minutes else None
        added.append(_goal(name, "operator-minutes a round (most)", most, 10.0, at_least=False))
        rivals = [m for m in ("habc", "critic_cut") if m in means]
        if "hitl_bc" in means and (means["hitl_bc"][judged] or 0) < 0.8 and rivals:
            measured = _ratio(max(means[m][judged] for m in rivals), means["hitl_bc"][judged])
            statistic = _quotient(_strongest(seeds, rivals), _success(seeds, "hitl_bc"))
            goal("max(habc, critic_cut) / hitl_bc", measured, 1.2, statistic)
    if name == "robosuite_can" and best is not None:
        goal("base success", base, 0.40, _success(seeds, BASE), at_least=False)
        goal("best / base", figures.get("best_vs_base"), 2.0, _quotient(_success(seeds, best), _success(seeds, BASE)))
    for method in means:  # a second generator must beat the same data without it
        without = LOOP_METHODS.get(method).same_data_without
        if (
            without is not None
            and without in means
            and means[method][judged] is not None
            and means[without][judged] is not None
        ):
            gap = round(100 * (means[method][judged] - means[without][judged]), 1)
            goal(f"{method} minus {without}, points", gap, 0.0, _difference(seeds, method, without))
    if "critic_cut" in means and "critic_cut_gt" in means:
        measured = _ratio(means["critic_cut"]["gain_points"], means["critic_cut_gt"]["gain_points"])
        statistic = _quotient(_gain(seeds, "critic_cut"), _gain(seeds, "critic_cut_gt"))
        goal("critic_cut gain / critic_cut_gt gain", measured, 0.8, statistic)
    per_seed = _per_seed(figures)
    fleet_runs = [  # each seed's promoted policy over its own base, as _setting computed it
        (seed, method)
        for seed, seed_figures in per_seed.items()
        for method in seed_figures["methods"]
        if LOOP_METHODS.get(method).rounds_collect == "fleet"
    ]
    least = min((per_seed[k]["methods"][m]["gain_points"] for k, m in fleet_runs), default=None)
    goal("promoted minus base, points (least)", least, 0.0, _least_gain(fleet_runs))
    return added


def _per_seed(figures: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return figures["seeds"] or {figures["pipeline_seeds"][0]: figures}


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return round(numerator / denominator, 3) if numerator is not None and denominator else None


def contender(method: str) -> bool:
    """A method a user could deploy: it runs a fleet and keeps data by what a real robot knows (not the simulator's
    ground truth); the demonstration baselines and the oracle are references."""
    spec = LOOP_METHODS.get(method)
    return spec.rounds_collect == "fleet" and spec.retention != "ground_truth"
