"""The headline comparison: the loop's retraining methods (vla_recover.loop.methods) from one base policy, on one
operator budget, on the same held-out evaluation seeds.

    python benchmarks/loop.py [--config configs/loop/quickstart.yaml] [--rounds 3] [--operator-budget-s 150]
                              [--methods hitl_bc,sirius,critic_cut,habc,reguide] (default: all) [--work runs/bench_loop]
                              [--pipeline-seeds 0,1,2]
    python benchmarks/loop.py --grid [--settings lift_failures,pick_place_failures] [--pipeline-seeds 0]
                              [--work runs/bench_grid] [--jobs 2]

Each method's run is a full ``vla-recover loop`` run (report and plots in ``<work>/<method>/``) seeded from one shared
base run (demos, base policy, base evaluation), so the methods differ only in what happens in the rounds. A pipeline
seed k > 0 draws other base demonstrations, base training and fleet seeds (in ``<work>/seed<k>/``). Every fleet
round stops when its operators have spent ``--operator-budget-s`` seconds. ``more_demos`` runs last and buys
demonstrations with what the fleet methods' rounds cost in operator presence; ``dagger_oracle`` charges no human time
and says where the ceiling is. Per method: success per round on the promotion and final-test seeds with 95% intervals,
the promoted version, human-seconds present and busy by role, successes per operator-hour and Fleet-DAgger's return
on human effort (ROHE). Methods are judged on the final-test seeds, which no promotion saw.

``--grid`` runs the settings of ``GRID`` (LiftCube with and without failures, PickPlaceBin with failures,
robosuite's PickPlaceCan; about 10 hours of 2 cores with ``--jobs 2``), each in ``<work>/<setting>/``, and judges the
loop's goals on the means over the pipeline seeds run so far (``grid_goals``), each figure with the 95% interval the
final-test episodes alone put on it (every success rate drawn again from its episodes; the trained policies held
fixed, so the spread between pipeline seeds is not in it): ``--settings`` and
``--pipeline-seeds`` pick what one sitting runs. A finished method is read back from its run folder and an unfinished
one resumes, so a benchmark runs over several sittings; each method prints its time. ``--jobs 2`` runs two methods
at a time. Prints one JSON object on its last line."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from loop_grid import GRID, contender, grid_goals

from vla_recover.config import load_yaml, validate_config
from vla_recover.evaluate import success_by_failure
from vla_recover.fleet.accounting import return_on_human_effort
from vla_recover.loop.beside import limit_torch_threads
from vla_recover.loop.config import QUICKSTART, LoopConfig
from vla_recover.loop.methods import LOOP_METHODS
from vla_recover.loop.plots import draw_methods_per_round
from vla_recover.loop.reporters import LineReporter
from vla_recover.loop.runner import LoopRun

# The fine-tuning recipe every fine-tuning method and more_demos share here (the rest of the config's retrain section
# stays): the best mean of habc and more_demos in benchmarks/recipe_sweep.py on LiftCube without failures (RESULTS.md).
RECIPE: dict[str, Any] = {"steps": 1200, "lr": 1e-3}


def _method_figures(summary: dict[str, Any]) -> dict[str, Any]:
    rounds = summary["rounds"]
    current_eval = next(r["eval"] for r in reversed(rounds) if r["policy"] == summary["final"]["policy"])
    final_test = summary["final"].get("final_test") or {}
    figures: dict[str, Any] = {
        "success_per_round": [round(r["eval"]["success_rate"], 4) for r in rounds],
        "ci95_per_round": [r["eval"]["ci95"] for r in rounds],
        "final_test_per_round": [r["final_test"]["success_rate"] if "final_test" in r else None for r in rounds],
        "final_test_ci95_per_round": [r["final_test"]["ci95"] if "final_test" in r else None for r in rounds],
        "promoted": [r["promoted"] for r in rounds[1:]],
        "final_policy": summary["final"]["policy"],
        "final_success": current_eval["success_rate"],
        "final_ci95": current_eval["ci95"],
        "final_episodes": current_eval["episodes"],
        "final_test_success": final_test.get("success_rate"),  # the figure to judge by: seeds no decision saw
        "final_test_ci95": final_test.get("ci95"),
        "final_test_episodes": final_test.get("episodes"),
        "final_test_by_failure": success_by_failure(final_test),
        "best_candidate_success": max(r["eval"]["success_rate"] for r in rounds[1:]),
    }
    if all("demos" in r for r in rounds[1:]):  # more_demos: the rounds' human time bought demonstrations
        demos = [r["demos"] for r in rounds[1:]]
        figures["demos"] = sum(d["episodes"] for d in demos)
        figures["human_s"] = round(sum(d["human_s"] for d in demos), 1)
        # one demonstrator at one robot, every step a human one
        if all("steps" in d for d in demos):
            steps = sum(d["steps"] for d in demos)
            figures["rohe"] = return_on_human_effort(sum(d["successes"] for d in demos), steps, 1, 1)
        return figures
    if all("oracle" in r for r in rounds[1:]):  # dagger_oracle: the expert labelled, no human time charged
        figures["oracle_branches"] = sum(r["oracle"]["branches"] for r in rounds[1:])
        figures["human_s"] = 0.0
        return figures
    fleets = [r["fleet"] for r in rounds[1:]]
    counted = all("human_steps" in f and "operators" in f for f in fleets)  # runs from before they were counted: none
    human_steps = sum(f["human_steps"] for f in fleets) if counted else None
    operator_s = sum(sum(f["operator_s"].values()) for f in fleets)
    fleet_successes = sum(f["successes"] for f in fleets)
    first, last = fleets[0]["successes_per_robot_hour"], fleets[-1]["successes_per_robot_hour"]
    return {
        **figures,
        "fleet_successes": fleet_successes,
        "fleet_episodes": sum(f["episodes"] for f in fleets),
        "interventions": sum(f["interventions"] for f in fleets),
        "operator_s": round(operator_s, 1),
        "human_s": round(sum(sum(f.get("operator_present_s", {}).values()) for f in fleets), 1),
        "successes_per_operator_hour": round(fleet_successes / (operator_s / 3600), 2) if operator_s else None,
        "busy_s_by_role": _by_role(f["operator_s"] for f in fleets),
        "present_s_by_role": _by_role(f.get("operator_present_s", {}) for f in fleets),
        "human_steps": human_steps,
        "rohe": return_on_human_effort(fleet_successes, human_steps, fleets[0]["operators"], fleets[0]["robots"])
        if human_steps is not None
        else None,
        "throughput_first_round": first,
        "throughput_last_round": last,
        "throughput_gain_over_base": round(last / first, 3) if first else None,
    }


def _by_role(rounds: Any) -> dict[str, float]:
    total: dict[str, float] = {}
    for seconds in rounds:
        for role, s in seconds.items():
            total[role] = round(total.get(role, 0.0) + s, 1)
    return total


def _demo_budget(results: dict[str, Any], rounds: int) -> float | None:
    """The human-seconds a fleet round cost, averaged over the fleet methods measured so far (operators' presence)."""
    spent = [r["human_s"] for r in results.values() if "fleet_episodes" in r and r["human_s"]]
    return round(sum(spent) / len(spent) / rounds, 1) if spent else None


def _saved_demo_budget(run_dir: Path) -> float | None:
    """The human-seconds a round a baseline run in ``run_dir`` was started with, if it was."""
    saved = run_dir / "config.json"
    if not saved.is_file():
        return None
    budget = json.loads(saved.read_text()).get("more_demos", {}).get("human_s_per_round")
    return float(budget) if budget is not None else None


def _pipeline(raw: dict[str, Any], seed: int) -> dict[str, Any]:
    """The config of pipeline seed ``seed``: other base demonstrations, base training and fleet seeds (seed 0 is the
    config as written), the same promotion and final-test seeds."""
    if seed == 0:
        return raw
    fleet = raw.get("fleet", {})
    return {
        **raw,
        "demos": {**raw.get("demos", {}), "seed": int(raw.get("demos", {}).get("seed", 0)) + 100 * seed},
        "base_train": {**raw.get("base_train", {}), "seed": int(raw.get("base_train", {}).get("seed", 0)) + seed},
        "fleet": {**fleet, "seed": int(fleet.get("seed", 0)) + 10_000 * seed},
    }


def _setting(
    raw: dict[str, Any], work: Path, methods: list[str], rounds: int, recipe: dict[str, Any], jobs: int = 1
) -> dict[str, Any]:
    """One base and every method from it, each fine-tuning with ``recipe``: the figures of one pipeline seed."""
    base_dir = work / "base"
    base = validate_config(LoopConfig, {**raw, "name": "base", "out": base_dir, "rounds": 0}, source="base")
    LoopRun(base, LineReporter(f"{work.name}/base")).run()
    runs = {
        method: {
            **raw,
            "name": method,
            "out": work / method,
            "method": method,
            "rounds": rounds,
            "seed_from": base_dir,
            "retrain": {**raw.get("retrain", {}), **recipe},
        }
        for method in methods
    }
    # the baselines run after the fleet methods, to buy demonstrations with the human time their rounds cost
    buys_demos = {m for m in methods if LOOP_METHODS.get(m).rounds_collect == "demos"}
    results = _run_cells({m: runs[m] for m in methods if m not in buys_demos}, work.name, jobs)
    budget = _demo_budget(results, rounds)
    if budget is not None:
        for method in buys_demos:
            # a baseline that has started keeps the budget it started with: a method added to the grid later
            # changes the fleet methods' mean, not demonstrations already bought
            spent = _saved_demo_budget(work / method)
            runs[method]["more_demos"] = {**raw.get("more_demos", {}), "human_s_per_round": spent or budget}
    results.update(_run_cells({m: runs[m] for m in methods if m in buys_demos}, work.name, jobs))
    results = {method: results[method] for method in methods}
    base_round = json.loads((base_dir / "summary.json").read_text())["rounds"][0]
    base_eval, base_test = base_round["eval"], base_round.get("final_test")
    judged = "final_test_success" if base_test is not None else "final_success"
    base_rate = (base_test or base_eval)["success_rate"]
    figures: dict[str, Any] = {
        "judged_on": "final_test" if base_test is not None else "promotion_seeds",
        "base_judged_episodes": (base_test or base_eval)["episodes"],
        "base_success": base_eval["success_rate"],
        "base_ci95": base_eval["ci95"],
        "base_final_test_success": base_test["success_rate"] if base_test else None,
        "base_final_test_ci95": base_test["ci95"] if base_test else None,
        "methods": results,
    }
    if "hitl_bc" in results and results["hitl_bc"][judged]:
        for method in ("critic_cut", "habc"):
            if method in results:
                figures[f"{method}_vs_hitl_bc"] = round(results[method][judged] / results["hitl_bc"][judged], 3)
    for result in results.values():
        result["gain_points"] = round(100 * (result[judged] - base_rate), 1)
        result["judged_episodes"] = result["final_test_episodes" if base_test is not None else "final_episodes"]
    if "more_demos" in results:  # the user's question: an operator-hour on the fleet, or on demonstrations?
        demo_gain = results["more_demos"][judged] - base_rate
        for method, result in results.items():
            if method != "more_demos" and demo_gain > 0:
                result["gain_vs_more_demos"] = round((result[judged] - base_rate) / demo_gain, 3)
    return figures


def _run_cell(run: dict[str, Any], label: str) -> dict[str, Any]:
    """One method's loop run (read back where it finished, resumed where it did not) and its figures."""
    config = validate_config(LoopConfig, run, source=run["method"])
    started = time.perf_counter()
    summary = LoopRun(config, LineReporter(label)).run()
    return {**_method_figures(summary), "wall_s": round(time.perf_counter() - started, 1)}


def _run_cells(runs: dict[str, dict[str, Any]], setting: str, jobs: int) -> dict[str, Any]:
    """Each method's run, ``jobs`` at once. A small policy trains on one thread at ~0.85 the speed of two, so two
    cells side by side on 2 cores finish ~1.6x sooner than one after the other (benchmarks/RESULTS.md)."""
    results: dict[str, Any] = {}

    def done(method: str, figures: dict[str, Any]) -> None:
        results[method] = figures
        print(f"[cell] {setting}/{method}: {figures['wall_s']:.0f}s", flush=True)

    if jobs == 1 or len(runs) <= 1:
        for method, run in runs.items():
            done(method, _run_cell(run, f"{setting}/{method}"))
        return results
    threads = max(1, (os.cpu_count() or 1) // jobs)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=limit_torch_threads, initargs=(threads,)) as pool:
        pending = {pool.submit(_run_cell, run, f"{setting}/{method}"): method for method, run in runs.items()}
        for future in as_completed(pending):
            done(pending[future], future.result())
    return results


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(sum(known) / len(known), 4) if len(known) == len(values) and known else None


def run_config(
    raw: dict[str, Any],
    work: Path,
    methods: list[str],
    seeds: list[int],
    rounds: int,
    recipe: dict[str, Any],
    jobs: int = 1,
) -> dict[str, Any]:
    """Every method on ``raw`` over the pipeline ``seeds`` (a base per seed; seed 0 in ``work``, seed k in
    ``work/seed<k>``): the figures per seed and their means."""
    raw = {**raw, "baseline": "none"}  # more_demos is a row of its own here
    per_seed = {
        k: _setting(_pipeline(raw, k), work / f"seed{k}" if k else work, methods, rounds, recipe, jobs) for k in seeds
    }
    judged = "final_test_success" if per_seed[seeds[0]]["judged_on"] == "final_test" else "final_success"
    means = {
        method: {
            key: _mean([per_seed[k]["methods"][method].get(key) for k in seeds])
            for key in (judged, "gain_points", "gain_vs_more_demos", "human_s", "rohe")
        }
        for method in methods
    }
    base_key = "base_final_test_success" if judged == "final_test_success" else "base_success"
    contenders = [m for m in means if contender(m)]
    best = max(contenders, key=lambda m: means[m][judged] or 0.0) if contenders else None
    config = validate_config(LoopConfig, {**raw, "rounds": 0}, source=str(work))
    figures: dict[str, Any] = {
        "task": config.task,
        "rounds": rounds,
        "eval_seeds": [config.evaluation.seed, config.evaluation.seed + config.evaluation.episodes - 1],
        "final_test_seeds": [config.final_test.seed, config.final_test.seed + config.final_test.episodes - 1],
        "fine_tuning_recipe": recipe,
        "pipeline_seeds": seeds,
        "judged": judged,
        "base_mean": _mean([per_seed[k][base_key] for k in seeds]),
        "mean_over_seeds": means,
        "best_method": best,
        "seeds": per_seed if len(seeds) > 1 else None,
        **(per_seed[seeds[0]] if len(seeds) == 1 else {}),
    }
    if best is not None and figures["base_mean"]:
        figures["best_vs_base"] = round(means[best][judged] / figures["base_mean"], 3)
    per_round = "final_test_per_round" if judged == "final_test_success" else "success_per_round"
    curves = {
        method: [_mean([per_seed[k]["methods"][method][per_round][r] for k in seeds]) for r in range(rounds + 1)]
        for method in methods
    }
    seeds_said = f"seed {seeds[0]}" if len(seeds) == 1 else f"mean of seeds {', '.join(map(str, seeds))}"
    figures["plot"] = str(
        draw_methods_per_round(curves, work / "success_per_round.png", f"{config.task}, {seeds_said}")
    )
    return figures


def _raw_config(path: Path | None, max_episodes: int, operator_budget_s: float) -> dict[str, Any]:
    raw: dict[str, Any] = dict(load_yaml(path) or {}) if path else dict(QUICKSTART)
    raw["fleet"] = {**raw.get("fleet", {}), "episodes": max_episodes, "operator_budget_s": operator_budget_s}
    validate_config(LoopConfig, {**raw, "rounds": 0}, source=str(path or "embedded default"))
    return raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=None, help="loop config; default: the embedded quickstart")
    parser.add_argument("--rounds", type=int, default=None, help="default 3")
    parser.add_argument("--operator-budget-s", type=float, default=None, help="busy operator-s a round (150)")
    parser.add_argument("--max-episodes", type=int, default=None, help="fleet episodes a round at most (60)")
    parser.add_argument("--methods", default=None, help="default: every method")
    parser.add_argument(
        "--pipeline-seeds",
        default=None,
        help="comma-separated pipeline seeds, each with its own base (default 0); with --grid, the grid's seeds "
        "to run now (default: all of each setting's)",
    )
    parser.add_argument(
        "--grid", action="store_true", help="run the settings of GRID (every goal's grid) and judge the goals"
    )
    parser.add_argument("--settings", default=None, help="with --grid: which settings (default: all)")
    parser.add_argument("--retrain-steps", type=int, default=RECIPE["steps"], help="the shared fine-tuning recipe")
    parser.add_argument("--retrain-lr", type=float, default=RECIPE["lr"], help="the shared fine-tuning recipe")
    parser.add_argument("--work", type=Path, default=None, help="default runs/bench_loop (--grid: runs/bench_grid)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="methods run at once, each on cores/jobs torch threads (2 on 2 cores: ~1.6x the cells an hour)",
    )
    args = parser.parse_args()
    if not 1 <= args.jobs <= (os.cpu_count() or 1):
        parser.error(f"--jobs: got {args.jobs}; expected 1 to the {os.cpu_count()} cores of this machine")
    seeds = [int(k) for k in (args.pipeline_seeds or "0").split(",") if k]
    if not seeds or min(seeds) < 0 or max(seeds) > 9:
        parser.error(f"--pipeline-seeds: got {args.pipeline_seeds!r}; expected seeds in 0..9, e.g. 0,1,2")
    recipe = {"steps": args.retrain_steps, "lr": args.retrain_lr}
    started = time.perf_counter()
    if args.grid:
        fields = ("config", "methods", "rounds", "operator_budget_s", "max_episodes")
        given = [f for f in fields if getattr(args, f) is not None]
        if given:
            parser.error(f"--grid sets each setting's {given[0]} itself; drop --{given[0].replace('_', '-')}")
        names = [n for n in (args.settings or ",".join(GRID)).split(",") if n]
        unknown = sorted(set(names) - set(GRID))
        if unknown:
            parser.error(f"--settings: unknown {unknown}; valid: {', '.join(GRID)}")
        only = set(seeds) if args.pipeline_seeds else None
        work = args.work or Path("runs/bench_grid")
        results: dict[str, dict[str, Any]] = {}
        for name in names:
            setting = GRID[name]
            raw = _raw_config(setting.config, setting.max_episodes, setting.operator_budget_s)
            run_seeds = [k for k in setting.seeds if only is None or k in only]
            if run_seeds:
                results[name] = run_config(
                    raw, work / name, list(setting.methods), run_seeds, setting.rounds, recipe, args.jobs
                )
                print(f"[setting] {name}: {time.perf_counter() - started:.0f}s so far", flush=True)
        figures: dict[str, Any] = {"settings": results, "goals": grid_goals(results)}
    else:
        methods = [m for m in (args.methods or ",".join(LOOP_METHODS.names())).split(",") if m]
        unknown = sorted(set(methods) - set(LOOP_METHODS.names()))
        if unknown:
            parser.error(f"--methods: unknown {unknown}; valid: {', '.join(LOOP_METHODS.names())}")
        budget = 150.0 if args.operator_budget_s is None else args.operator_budget_s
        raw = _raw_config(args.config, args.max_episodes or 60, budget)
        work = args.work or Path("runs/bench_loop")
        rounds = 3 if args.rounds is None else args.rounds
        figures = run_config(raw, work, methods, seeds, rounds, recipe, args.jobs)
        figures["operator_budget_s_per_round"] = budget
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
