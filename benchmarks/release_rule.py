"""When should a correction hand back? Each teleoperator release rule, compared on the same fleet and evaluation seeds.

From one base run (the loop config's demos, base policy and its evaluation), one loop round per release rule
(``fleet.teleoperator.release``): the same fleet seeds, the same critic and retraining recipe, the same held-out
evaluation seeds. Per rule: the fleet's correction steps (rows a human chose) and holds, operator-seconds by role,
fleet successes, and the success of the round's retrained policy, with a paired comparison (exact McNemar on the
evaluation seeds) against the base and against the ``phase_advanced`` rule. ``--repeats K`` runs K fleets per rule
on other fleet seeds (each rule meets the same ones) and pools the evaluations seed by seed.

Resumable: each (rule, repeat) is a loop run under ``--work`` and resumes from its event log; each prints its time.
Last line: one JSON object.

    python benchmarks/release_rule.py [--config configs/loop/lift_nominal.yaml] [--work runs/bench_release]
                                      [--rules phase_advanced,phase_held,progress_regained,success] [--repeats 1]
                                      [--base runs/bench_loop/base]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.config import load_yaml, validate_config
from vla_recover.data import ACTORS, EpisodeStore
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.reporters import LineReporter
from vla_recover.loop.runner import LoopRun
from vla_recover.stats import mcnemar_one_sided_p, paired_outcomes

RULES = ("phase_advanced", "phase_held", "progress_regained", "success")
REFERENCE = "phase_advanced"


def _round_rows(run_dir: Path) -> dict[str, int]:
    """Rows of round 1's fleet episodes by who chose them."""
    with EpisodeStore(run_dir / "store") as store:
        actor = store.read("actor")
        counts = dict.fromkeys(ACTORS, 0)
        for row in store.episodes():
            if row.info.get("loop_round") == 1:
                codes, n = np.unique(actor[row.start : row.stop], return_counts=True)
                for code, count in zip(codes.tolist(), n.tolist(), strict=True):
                    counts[ACTORS[code]] += count
    return counts


def _compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    counts, _, _ = paired_outcomes(a["seeds"], a["outcomes"], b["seeds"], b["outcomes"])
    return {
        "difference": round(counts.difference, 4),
        "only_this": counts.only_a,
        "only_other": counts.only_b,
        "p_better": round(mcnemar_one_sided_p(counts.only_a, counts.only_b), 4),
        "p_worse": round(mcnemar_one_sided_p(counts.only_b, counts.only_a), 4),
    }


def _pooled(evaluations: list[dict[str, Any]]) -> dict[str, Any]:
    """Several evaluations on the same seeds as one record, each repeat's seeds told apart."""
    seeds, outcomes = [], []
    for repeat, evaluation in enumerate(evaluations):
        seeds += [repeat * 10_000_000 + s for s in evaluation["seeds"]]
        outcomes += evaluation["outcomes"]
    return {"seeds": seeds, "outcomes": outcomes, "success_rate": round(float(np.mean(outcomes)), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/loop/lift_nominal.yaml"))
    parser.add_argument("--work", type=Path, default=Path("runs/bench_release"))
    parser.add_argument("--rules", default=",".join(RULES))
    parser.add_argument("--repeats", type=int, default=1, help="fleets per rule, on other fleet seeds")
    parser.add_argument("--base", type=Path, default=None, help="a finished base run of this config to start from")
    args = parser.parse_args()
    rules = [r for r in args.rules.split(",") if r]
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        parser.error(f"--rules: unknown {unknown}; valid: {', '.join(RULES)}")
    if args.repeats < 1:
        parser.error(f"--repeats: got {args.repeats}; give 1 or more")
    # the rules are compared with each other, not with demonstrations: no baseline after the round
    raw: dict[str, Any] = {**dict(load_yaml(args.config) or {}), "baseline": "none"}
    if args.base is not None:  # a finished base run, as it was configured
        base_dir = args.base
        base = LoopRun(validate_config(LoopConfig, json.loads((base_dir / "config.json").read_text())))
    else:
        base_dir = args.work / "base"
        base = LoopRun(validate_config(LoopConfig, {**raw, "name": "base", "out": base_dir, "rounds": 0}))
    base_eval = base.run()["rounds"][0]["eval"]
    figures: dict[str, Any] = {"base_success": base_eval["success_rate"], "rules": {}}
    evaluations: dict[str, list[dict[str, Any]]] = {}
    for rule in rules:
        per_repeat = []
        for repeat in range(args.repeats):
            started = time.perf_counter()
            fleet = {**raw.get("fleet", {}), "seed": repeat * 20_000}  # each repeat: its own fleet seeds
            fleet["teleoperator"] = {**fleet.get("teleoperator", {}), "release": rule}
            name = f"{rule}_{repeat}"
            config = validate_config(
                LoopConfig,
                {**raw, "name": name, "out": args.work / name, "rounds": 1, "seed_from": base_dir, "fleet": fleet},
                source=name,
            )
            summary = LoopRun(config, LineReporter(name)).run()
            round_1 = summary["rounds"][1]
            rows = _round_rows(args.work / name)
            per_repeat.append({
                "correction_steps": rows["human"], "hold_steps": rows["hold"],
                "operator_s": round_1["fleet"]["operator_s"], "interventions": round_1["fleet"]["interventions"],
                "fleet_successes": round_1["fleet"]["successes"], "fleet_episodes": round_1["fleet"]["episodes"],
                "success": round_1["eval"]["success_rate"], "promoted": round_1["promoted"],
                "failure_response": round_1["fleet"].get("failure_response", {}),
            })  # fmt: skip
            evaluations.setdefault(rule, []).append(round_1["eval"])
            print(f"[{rule} #{repeat}] success {round_1['eval']['success_rate']:.2f}, {rows['human']} correction "
                  f"steps, {time.perf_counter() - started:.0f} s", flush=True)  # fmt: skip
        pooled = _pooled(evaluations[rule])
        figures["rules"][rule] = {
            "success": pooled["success_rate"],
            "correction_steps": sum(r["correction_steps"] for r in per_repeat),
            "operator_s": round(sum(sum(r["operator_s"].values()) for r in per_repeat), 1),
            "vs_base": _compare(pooled, _pooled([base_eval] * args.repeats)),
            "repeats": per_repeat,
        }
    if REFERENCE in evaluations:
        reference = _pooled(evaluations[REFERENCE])
        for rule in rules:
            if rule != REFERENCE:
                figures["rules"][rule][f"vs_{REFERENCE}"] = _compare(_pooled(evaluations[rule]), reference)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
