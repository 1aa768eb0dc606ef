"""AFIL's guidance strength on trained policies: each round's policy of afil loop runs, sampled with its failure
generator's guidance scaled, on the run's final-test seeds.

    python benchmarks/afil_guidance.py RUN [RUN ...] [--scales 0,0.5,1,2] [--rounds 3]

Scale 0 samples from the policy's own generator alone: the same weights without the failure generator's guidance, so
the comparison isolates what the guidance does at sampling time (the data and training are the same). Each
(run, round, scale) cell is kept in ``<run>/guidance_scales.json`` and read back. Prints one JSON object on its last
line."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from vla_recover.config import validate_config
from vla_recover.evaluate import evaluate_policy
from vla_recover.loop.config import LoopConfig, saved_with_defaults
from vla_recover.policies.common.checkpoint import load_policy


def _cell(run: Path, round_index: int, scale: float) -> dict[str, Any]:
    config = validate_config(LoopConfig, saved_with_defaults(json.loads((run / "config.json").read_text())))
    policy, embedder, _ = load_policy(run / "policies" / f"round_{round_index}" / "policy")
    guidance = getattr(policy.config, "failure_guidance", None)
    if guidance is None:
        raise ValueError(f"{run}: round {round_index}'s policy has no failure generator (not an afil run)")
    policy.config = policy.config.model_copy(update={"failure_guidance": guidance.model_copy(update={"scale": scale})})
    seeds = list(range(config.final_test.seed, config.final_test.seed + config.final_test.episodes))
    tolerance = config.fleet_config(run / "store", run, 0, {}).policy_action_tolerance
    result = evaluate_policy(
        policy, embedder, config.task, seeds, config.evaluation.batch, config.task_config, action_tolerance=tolerance
    )
    return {"success_rate": result["success_rate"], "ci95": result["ci95"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="afil loop run folders")
    parser.add_argument("--scales", default="0,0.5,1,2", help="failure_guidance.scale values to sample with")
    parser.add_argument("--rounds", default="3", help="comma-separated rounds whose policies to sample")
    args = parser.parse_args()
    scales = [float(s) for s in args.scales.split(",") if s]
    rounds = [int(r) for r in args.rounds.split(",") if r]
    figures: dict[str, Any] = {}
    for run in args.runs:
        cache_path = run / "guidance_scales.json"
        cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
        for round_index in rounds:
            for scale in scales:
                key = f"round_{round_index}/scale_{scale:g}"
                if key not in cache:
                    started = time.perf_counter()
                    cache[key] = _cell(run, round_index, scale)
                    cache_path.write_text(json.dumps(cache, indent=1))
                    print(f"[guidance] {run} {key} {time.perf_counter() - started:.0f}s "
                          f"{cache[key]['success_rate']:.3f}", flush=True)  # fmt: skip
        figures[str(run)] = cache
    means = {
        f"round_{r}/scale_{s:g}": round(
            sum(figures[str(run)][f"round_{r}/scale_{s:g}"]["success_rate"] for run in args.runs) / len(args.runs), 4
        )
        for r in rounds
        for s in scales
    }
    print(json.dumps({"runs": figures, "mean_over_runs": means}))


if __name__ == "__main__":
    main()
