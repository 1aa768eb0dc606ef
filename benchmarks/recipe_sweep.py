"""Choose the one fine-tuning recipe every fine-tuning method and ``more_demos`` share: a sweep of steps and learning
rate on unperturbed LiftCube, one round from one base, judged on the final-test seeds.

    python benchmarks/recipe_sweep.py [--config configs/loop/lift_nominal.yaml] [--steps 300,600,1200]
                                      [--lrs 1e-4,2e-4,5e-4] [--methods habc,more_demos] [--work runs/bench_recipe]

A base run (demos, base policy, its tests) and one fleet round with its critic are shared by every cell: a fleet
method's cell takes that round's data (``seed_first_round``), so cells differ only in how they train; ``more_demos``
buys the same demonstrations in every cell. Each cell fine-tunes the base once with its recipe (the config's
``retrain`` with ``steps`` and ``lr`` replaced) and is scored by its candidate's success on the final-test seeds,
promoted or not. The recipe with the best mean over the methods wins. Cells are loop run folders: an interrupted
sweep resumes, reading finished cells back, and prints each cell's time. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from vla_recover.config import load_yaml, validate_config
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.methods import LOOP_METHODS
from vla_recover.loop.reporters import LineReporter
from vla_recover.loop.runner import LoopRun


def _numbers(text: str, kind: type) -> list[Any]:
    return [kind(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/loop/lift_nominal.yaml"))
    parser.add_argument("--steps", default="300,600,1200")
    parser.add_argument("--lrs", default="1e-4,2e-4,5e-4")
    parser.add_argument("--methods", default="habc,more_demos")
    parser.add_argument("--work", type=Path, default=Path("runs/bench_recipe"))
    args = parser.parse_args()
    steps, lrs, methods = _numbers(args.steps, int), _numbers(args.lrs, float), args.methods.split(",")
    unknown = [m for m in methods if m not in LOOP_METHODS or LOOP_METHODS.get(m).start == "scratch"]
    if unknown:
        parser.error(f"--methods: {unknown} are not fine-tuning methods of vla_recover.loop.methods")
    raw: dict[str, Any] = {**dict(load_yaml(args.config) or {}), "baseline": "none"}
    started = time.perf_counter()
    base_dir, source_dir = args.work / "base", args.work / "round_1"
    LoopRun(
        validate_config(LoopConfig, {**raw, "name": "base", "out": base_dir, "rounds": 0}), LineReporter("base")
    ).run()
    # the fleet round every fleet method's cell trains on (hitl_bc's retraining in it is not used)
    source = {**raw, "name": "round_1", "out": source_dir, "method": "hitl_bc", "rounds": 1, "seed_from": base_dir}
    LoopRun(validate_config(LoopConfig, source), LineReporter("round_1")).run()
    base_test = json.loads((base_dir / "summary.json").read_text())["rounds"][0]["final_test"]
    cells: list[dict[str, Any]] = []
    for method in methods:
        shared = {"seed_from": source_dir, "seed_first_round": LOOP_METHODS.get(method).rounds_collect == "fleet"}
        for n in steps:
            for lr in lrs:
                name = f"{method}_steps{n}_lr{lr:g}"
                recipe = {**raw.get("retrain", {}), "steps": n, "lr": lr}
                run = {**raw, **shared, "name": name, "out": args.work / name, "method": method, "rounds": 1,
                       "retrain": recipe}  # fmt: skip
                cell_started = time.perf_counter()
                summary = LoopRun(validate_config(LoopConfig, run, source=name), LineReporter(name)).run()
                test = summary["rounds"][1]["final_test"]
                wall_s = round(time.perf_counter() - cell_started, 1)
                cells.append({"method": method, "steps": n, "lr": lr, "final_test_success": test["success_rate"],
                              "final_test_ci95": test["ci95"], "wall_s": wall_s})  # fmt: skip
                print(f"[cell] {name}: final test {test['success_rate']:.3f} in {cells[-1]['wall_s']:.0f}s", flush=True)
    recipes = {(c["steps"], c["lr"]) for c in cells}
    mean = {
        r: sum(c["final_test_success"] for c in cells if (c["steps"], c["lr"]) == r) / len(methods) for r in recipes
    }
    best = max(sorted(recipes), key=lambda r: mean[r])
    print(json.dumps({
        "config": str(args.config), "methods": methods, "base_final_test_success": base_test["success_rate"],
        "cells": cells, "mean_by_recipe": [{"steps": r[0], "lr": r[1], "mean_final_test": round(mean[r], 4)}
                                           for r in sorted(recipes)],
        "best": {"steps": best[0], "lr": best[1], "mean_final_test": round(mean[best], 4)},
        "wall_s": round(time.perf_counter() - started, 1),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
