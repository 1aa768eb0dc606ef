"""Fleet fidelity: does the fleet run a policy as `vla-recover eval` does?

Per task one policy between 30% and 80% success. LiftCube: the quickstart's base policy (a loop run with no rounds).
PickPlaceBin: the loop config's own base is weaker than 30%, so the policy comes from ``PICK_PLACE_RECIPE`` below:
200 clean demonstrations plus 1500 two-step episode starts (the first windows are where the instruction decides
which cube to go for; without them the policy ignores it), a small transformer flow policy, 4000 steps. On the
same held-out seeds, with the same per-episode sampling seeds: evaluation's outcome per seed, then the fleet's with
its operators off and the fleet settings of the task's loop config, once per ``--run-ahead`` setting (1 is
lockstep). Per setting: both success rates, their difference with a 95% paired-bootstrap interval, the share of
seeds with the same outcome, and the fleet's control steps/s. Goals: the difference within ±5 points; in lockstep,
the same outcome on ≥ 95% of seeds.

Resumable: every finished cell (a base run, the recipe's data, policy and evaluation, a fleet setting) is kept
under ``--work`` and read back on a rerun; each cell prints its wall time. Last line: one JSON object.

    python benchmarks/fleet_fidelity.py [--work runs/bench_fidelity] [--tasks LiftCube,PickPlaceBin]
                                        [--run-ahead 1,4,8] [--remote]

``--remote`` drives the fleet through ``vla-recover serve`` on loopback (one server per cell, one torch thread):
the server's latency must not bring back stale observations.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from vla_recover.config import load_yaml, validate_config
from vla_recover.data import EpisodeStore
from vla_recover.evaluate import evaluate_checkpoint
from vla_recover.fleet import FleetConfig, build_fleet
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.reporters import LineReporter
from vla_recover.loop.runner import LoopRun
from vla_recover.rollout import CollectConfig, collect_demos
from vla_recover.serving.launch import policy_server
from vla_recover.serving.protocol import TOKEN_ENV
from vla_recover.stats import paired_bootstrap_interval, paired_outcomes
from vla_recover.train.trainer import TrainConfig, Trainer

LOOP_CONFIGS = {
    "LiftCube": Path("configs/loop/lift_nominal.yaml"),
    "PickPlaceBin": Path("configs/loop/pick_place.yaml"),
}
CLEAN = {"action_noise": 0.05, "hesitation_prob": 0.0, "grasp_miss_prob": 0.0}
PICK_PLACE_RECIPE: dict[str, Any] = {
    "demos": [
        {"task": "PickPlaceBin", "episodes": 200, "seed": 30_000, "expert": CLEAN},
        {"task": "PickPlaceBin", "episodes": 1500, "seed": 50_000, "expert": CLEAN, "task_config": {"horizon": 2}},
    ],
    "train": {
        "policy": "flow",
        "policy_config": {
            "obs_horizon": 2,
            "action_horizon": 16,
            "action_exec": 8,
            "backbone": "transformer",
            "transformer_dim": 64,
            "transformer_layers": 2,
            "inference_steps": 4,
            "use_language": True,
        },
        "steps": 4000,
        "batch_size": 128,
        "lr": 1e-3,
        "warmup_steps": 100,
        "save_every": 1000,
        "threads": 1,
    },
}
EVAL_SEED, EVAL_EPISODES = 100_000, 100
GOAL_DIFFERENCE, GOAL_LOCKSTEP_AGREEMENT = 0.05, 0.95


def _cell(path: Path, work: Any) -> dict[str, Any]:
    """The JSON result kept at ``path``, or ``work()``'s, kept there."""
    if path.is_file():
        return dict(json.loads(path.read_text()))
    started = time.perf_counter()
    result = work()
    result["wall_s"] = round(time.perf_counter() - started, 1)
    path.write_text(json.dumps(result))
    print(f"  {path.stem}: {result['wall_s']} s", flush=True)
    return result


def lift_cube_base(work: Path) -> dict[str, Any]:
    """The quickstart's base policy and its evaluation (a loop run with no rounds; resumed from its event log)."""
    raw = {**dict(load_yaml(LOOP_CONFIGS["LiftCube"]) or {}), "baseline": "none"}  # the base alone
    config = validate_config(LoopConfig, {**raw, "name": "LiftCube_base", "out": work / "base", "rounds": 0})
    summary = LoopRun(config, LineReporter("LiftCube base")).run()
    return {"policy": work / "base" / "policies" / "base" / "policy", "eval": summary["rounds"][0]["eval"]}


def pick_place_base(work: Path) -> dict[str, Any]:
    """``PICK_PLACE_RECIPE``'s policy and its evaluation."""
    store, out = work / "recipe_demos", work / "recipe_policy"

    def collect() -> dict[str, Any]:
        shutil.rmtree(store, ignore_errors=True)  # an interrupted collection starts over
        ids = [i for part in PICK_PLACE_RECIPE["demos"] for i in collect_demos(CollectConfig(**part, out=store))[0]]
        return {"episodes": len(ids)}

    def train() -> dict[str, Any]:
        trainer = Trainer(TrainConfig(**PICK_PLACE_RECIPE["train"], data=store, out=out))
        trainer.resume()
        return trainer.run()

    def evaluate() -> dict[str, Any]:
        return evaluate_checkpoint(out / "policy", "PickPlaceBin", EVAL_EPISODES, EVAL_SEED, workers=2)

    _cell(work / "recipe_demos.json", collect)
    _cell(work / "recipe_train.json", train)
    return {"policy": out / "policy", "eval": _cell(work / "recipe_eval.json", evaluate)}


def fleet_cell(
    task: str, policy: Path, run_ahead: int, seeds: list[int], work: Path, remote: bool = False
) -> dict[str, Any]:
    """The fleet's outcome per seed with its operators off, at one run-ahead setting, with the fleet settings of the
    task's loop config; ``remote``: its chunks from a policy server in another process (``vla-recover serve``)."""
    loop = validate_config(LoopConfig, dict(load_yaml(LOOP_CONFIGS[task]) or {}), source=str(LOOP_CONFIGS[task]))
    name = f"fleet_{'remote_' if remote else ''}run_ahead_{run_ahead}"
    store = work / name

    def run() -> dict[str, Any]:
        shutil.rmtree(store, ignore_errors=True)  # an interrupted cell starts over
        raw = {
            **loop.fleet, "task": loop.task, "task_config": loop.task_config,
            "episodes": len(seeds), "seed": seeds[0], "policy": str(policy), "store": str(store),
            "run_ahead_steps": run_ahead, "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False},
        }  # fmt: skip
        if not remote:
            summary = build_fleet(validate_config(FleetConfig, raw, source="fleet")).run()
        else:
            with policy_server(policy, threads=1) as (url, token):
                os.environ[TOKEN_ENV] = token
                raw.update(policy=None, inference={"remote": url})
                summary = build_fleet(validate_config(FleetConfig, raw, source="fleet")).run()
        with EpisodeStore(store) as stored:
            by_seed = {int(row.info["seed"]): int(row.outcome == "success") for row in stored.episodes()}
        return {
            "run_ahead_steps": run_ahead, "robots": summary["robots"],
            "control_steps_per_s": summary["control_steps_per_s"], "rejected_chunks": summary["rejected_actions"],
            "clipped_actions": summary["clipped_actions"], "seeds": sorted(by_seed),
            "outcomes": [by_seed[s] for s in sorted(by_seed)],
        }  # fmt: skip

    return _cell(work / f"{name}.json", run)


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
    parser.add_argument("--remote", action="store_true", help="the fleet's chunks from a policy server on loopback")
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
        work.mkdir(parents=True, exist_ok=True)
        base = lift_cube_base(work) if task == "LiftCube" else pick_place_base(work)
        evaluation = base["eval"]
        print(f"[{task}] the policy: eval {evaluation['success_rate']:.2f}", flush=True)
        per_setting: dict[str, Any] = {}
        for run_ahead in settings:
            started = time.perf_counter()
            fleet = fleet_cell(task, base["policy"], run_ahead, evaluation["seeds"], work, args.remote)
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
    print(json.dumps({"inference": "remote" if args.remote else "local", **figures}))


if __name__ == "__main__":
    main()
