"""What a second generator does at sampling time: each round's policy of ``afil`` and ``recovery_gated`` loop runs,
sampled with and without it on the run's final-test seeds.

    python benchmarks/second_generators.py RUN [RUN ...] [--scales 0,0.5,1,2] [--rounds 3] [--threads 1]

An ``afil`` policy is sampled with its failure generator's guidance at each of ``--scales`` (scale 0: its own
generator alone); a ``recovery_gated`` policy with its gate switching the recovery head in (``gate_on``) and with the
gate off (``gate_off``: the nominal generator on every chunk). The weights and the data are the same in each pair, so
the comparison isolates what the second generator does when the policy runs. Each (run, round, variant) cell is kept
in ``<run>/second_generators.json`` and read back, and its time printed. Prints one JSON object on its last line.
Beside another benchmark, pass ``--threads 1``: two processes each on torch's default threads oversubscribe the cores
(a cell took 247 s that takes 10-26 s on one thread).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from vla_recover.config import validate_config
from vla_recover.evaluate import evaluate_policy
from vla_recover.loop.beside import limit_torch_threads
from vla_recover.loop.config import LoopConfig, saved_with_defaults
from vla_recover.policies.common.checkpoint import Checkpoint

CACHE = "second_generators.json"


def _variants(run: Path, round_index: int, scales: list[float]) -> list[str]:
    config = Checkpoint.open(run / "policies" / f"round_{round_index}" / "policy").config["config"]
    if config.get("failure_guidance"):
        return [f"scale_{s:g}" for s in scales]
    if config.get("recovery"):
        return ["gate_on", "gate_off"]
    raise ValueError(f"{run}: round {round_index}'s policy has no second generator (not an afil or recovery_gated run)")


def _cell(run: Path, round_index: int, variant: str) -> dict[str, Any]:
    config = validate_config(LoopConfig, saved_with_defaults(json.loads((run / "config.json").read_text())))
    policy, embedder = Checkpoint.open(run / "policies" / f"round_{round_index}" / "policy").load()
    if variant.startswith("scale_"):
        guidance = policy.config.failure_guidance
        scaled = guidance.model_copy(update={"scale": float(variant.removeprefix("scale_"))})
        policy.config = policy.config.model_copy(update={"failure_guidance": scaled})
    elif variant == "gate_off":
        policy.recovery_gate = None  # the nominal generator samples every chunk
    seeds = list(range(config.final_test.seed, config.final_test.seed + config.final_test.episodes))
    tolerance = config.fleet_config(run / "store", run, 0, {}).policy_action_tolerance
    result = evaluate_policy(
        policy, embedder, config.task, seeds, config.evaluation.batch, config.task_config, action_tolerance=tolerance
    )
    return {"success_rate": result["success_rate"], "ci95": result["ci95"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="afil or recovery_gated loop run folders")
    parser.add_argument("--scales", default="0,0.5,1,2", help="afil: failure_guidance.scale values to sample with")
    parser.add_argument("--rounds", default="3", help="comma-separated rounds whose policies to sample")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own choice)")
    args = parser.parse_args()
    if args.threads < 0:
        parser.error(f"--threads must be 0 (torch's choice) or a positive count, got {args.threads}")
    if args.threads:
        limit_torch_threads(args.threads)
    scales = [float(s) for s in args.scales.split(",") if s]
    rounds = [int(r) for r in args.rounds.split(",") if r]
    figures: dict[str, Any] = {}
    for run in args.runs:
        cache_path = run / CACHE
        cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
        for round_index in rounds:
            for variant in _variants(run, round_index, scales):
                key = f"round_{round_index}/{variant}"
                if key not in cache:
                    started = time.perf_counter()
                    cache[key] = _cell(run, round_index, variant)
                    cache_path.write_text(json.dumps(cache, indent=1))
                    print(f"[cell] {run} {key} {time.perf_counter() - started:.0f}s "
                          f"{cache[key]['success_rate']:.3f}", flush=True)  # fmt: skip
        figures[str(run)] = cache
    keys = sorted({key for cache in figures.values() for key in cache})
    means = {
        key: round(
            sum(c[key]["success_rate"] for c in figures.values() if key in c) / sum(key in c for c in figures.values()),
            4,
        )
        for key in keys
    }
    print(json.dumps({"runs": figures, "mean_over_runs": means}))


if __name__ == "__main__":
    main()
