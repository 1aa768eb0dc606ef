"""Fleet fidelity: does the fleet run a policy as `vla-recover eval` does?

Per task one policy between 30% and 80% success: the base policy of a loop run with no rounds (LiftCube: the
quickstart's; PickPlaceBin: ``configs/loop/pick_place.yaml`` with the demonstrations and training recipe of
``PICK_PLACE_BASE`` below, since that config's own base is weaker than 30%). On the same held-out seeds, with the
same per-episode sampling seeds: evaluation's outcome per seed, then the fleet's with its operators off and the
fleet settings of the task's loop config, once per ``--run-ahead`` setting (1 is lockstep). Per setting: both
success rates, their difference with a 95% paired-bootstrap interval, the share of seeds with the same outcome, and
the fleet's control steps/s. Goals: the difference within ±5 points; in lockstep, the same outcome on ≥ 95% of seeds.

Resumable: every finished cell (a base run, a fleet setting) is kept under ``--work`` and read back on a rerun; each
cell prints its wall time. Last line: one JSON object.

    python benchmarks/fleet_fidelity.py [--work runs/bench_fidelity] [--tasks LiftCube,PickPlaceBin]
                                        [--run-ahead 1,4,8] [--episodes 100]
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

from vla_recover.config import load_yaml, validate_config
from vla_recover.data import EpisodeStore
from vla_recover.fleet import FleetConfig, build_fleet
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.runner import LineReporter, LoopRun
from vla_recover.stats import paired_bootstrap_interval, paired_outcomes

LOOP_CONFIGS = {"LiftCube": Path("configs/loop/quickstart.yaml"), "PickPlaceBin": Path("configs/loop/pick_place.yaml")}
# A PickPlaceBin base between 30% and 80%: cleaner demonstrations than the loop config's weak ones.
PICK_PLACE_BASE: dict[str, Any] = {
    "demos": {"episodes": 100, "seed": 2000, "expert": {"action_noise": 0.05}},
}
GOAL_DIFFERENCE, GOAL_LOCKSTEP_AGREEMENT = 0.05, 0.95


def base_run(task: str, work: Path) -> dict[str, Any]:
    """The task's base policy and its evaluation (a loop run with no rounds; resumed from its event log)."""
    raw = dict(load_yaml(LOOP_CONFIGS[task]) or {})
    if task == "PickPlaceBin":
        raw.update(PICK_PLACE_BASE)
    config = validate_config(LoopConfig, {**raw, "name": f"{task}_base", "out": work / "base", "rounds": 0})
    summary = LoopRun(config, LineReporter(f"{task} base")).run()
    return {
        "config": config,
        "policy": work / "base" / "policies" / "base" / "policy",
        "eval": summary["rounds"][0]["eval"],
    }


def fleet_cell(loop: LoopConfig, policy: Path, run_ahead: int, seeds: list[int], work: Path) -> dict[str, Any]:
    """The fleet's outcome per seed with its operators off, at one run-ahead setting (read back when kept)."""
    result_file = work / f"fleet_run_ahead_{run_ahead}.json"
    if result_file.is_file():
        return dict(json.loads(result_file.read_text()))
    store = work / f"fleet_run_ahead_{run_ahead}"
    shutil.rmtree(store, ignore_errors=True)  # an interrupted cell starts over
    raw = {
        **loop.fleet,
        "task": loop.task,
        "task_config": {**loop.task_config, **loop.fleet.get("task_config", {})},
        "episodes": len(seeds),
        "seed": seeds[0],
        "policy": str(policy),
        "store": str(store),
        "run_ahead_steps": run_ahead,
        "floor_operator": {"enabled": False},
        "teleoperator": {"enabled": False},
    }
    started = time.perf_counter()
    summary = build_fleet(validate_config(FleetConfig, raw, source="fleet")).run()
    with EpisodeStore(store) as stored:
        by_seed = {int(row.info["seed"]): int(row.outcome == "success") for row in stored.episodes()}
    result = {
        "run_ahead_steps": run_ahead,
        "robots": summary["robots"],
        "control_steps_per_s": summary["control_steps_per_s"],
        "rejected_chunks": summary["rejected_actions"],
        "clipped_actions": summary["clipped_actions"],
        "seeds": sorted(by_seed),
        "outcomes": [by_seed[s] for s in sorted(by_seed)],
        "wall_s": round(time.perf_counter() - started, 1),
    }
    result_file.write_text(json.dumps(result))
    return result


def compare(evaluation: dict[str, Any], fleet: dict[str, Any]) -> dict[str, Any]:
    counts, fleet_wins, eval_wins = paired_outcomes(
        fleet["seeds"], fleet["outcomes"], evaluation["seeds"], evaluation["outcomes"]
    )
    low, high = paired_bootstrap_interval(fleet_wins, eval_wins)
    return {
        "fleet_success": round(float(fleet_wins.mean()), 4),
        "eval_success": round(float(eval_wins.mean()), 4),
        "difference": round(counts.difference, 4),
        "difference_ci95": [round(low, 4), round(high, 4)],
        "same_outcome": round(counts.agreement, 4),
        "paired": counts.as_json(),
        "control_steps_per_s": fleet["control_steps_per_s"],
        "rejected_chunks": fleet["rejected_chunks"],
        "clipped_actions": fleet["clipped_actions"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=Path("runs/bench_fidelity"))
    parser.add_argument("--tasks", default="LiftCube,PickPlaceBin")
    parser.add_argument("--run-ahead", default="1,4,8", help="run_ahead_steps settings to try (1 is lockstep)")
    args = parser.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(LOOP_CONFIGS))
    if unknown:
        parser.error(f"--tasks: unknown {unknown}; valid: {', '.join(LOOP_CONFIGS)}")
    settings = sorted({int(k) for k in args.run_ahead.split(",") if k})
    if not settings or min(settings) < 1:
        parser.error(f"--run-ahead: give settings >= 1, got {args.run_ahead!r}")
    figures: dict[str, Any] = {}
    for task in tasks:
        work = args.work / task
        started = time.perf_counter()
        base = base_run(task, work)
        evaluation = base["eval"]
        print(f"[{task}] base policy: eval {evaluation['success_rate']:.2f} ({time.perf_counter() - started:.0f} s)")
        per_setting: dict[str, Any] = {}
        for run_ahead in settings:
            started = time.perf_counter()
            fleet = fleet_cell(base["config"], base["policy"], run_ahead, evaluation["seeds"], work)
            per_setting[str(run_ahead)] = row = compare(evaluation, fleet)
            print(
                f"[{task}] run_ahead_steps {run_ahead}: fleet {row['fleet_success']:.2f} vs eval "
                f"{row['eval_success']:.2f}, same outcome {row['same_outcome']:.2f}, "
                f"{row['control_steps_per_s']} steps/s ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        lockstep = per_setting.get("1")
        figures[task] = {
            "eval_success": evaluation["success_rate"],
            "eval_ci95": evaluation["ci95"],
            "by_run_ahead_steps": per_setting,
            "difference_goal_met": all(abs(r["difference"]) <= GOAL_DIFFERENCE for r in per_setting.values()),
            "lockstep_agreement_goal_met": None
            if lockstep is None
            else lockstep["same_outcome"] >= GOAL_LOCKSTEP_AGREEMENT,
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
