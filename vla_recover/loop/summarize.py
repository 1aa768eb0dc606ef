"""The loop run's ``summary.json``, built from its finished steps' results: what the report and the CLI read."""

from __future__ import annotations

from typing import Any

from vla_recover.loop.config import LoopConfig
from vla_recover.stats import mcnemar_one_sided_p, paired_outcomes

__all__ = ["operators_present_s", "summarize"]


def operators_present_s(results: dict[str, dict[str, Any]], rounds: int) -> float:
    """The operators' presence over every fleet round: the human time the loop's rounds cost."""
    fleets = [results.get(f"round_{r}.fleet", {}) for r in range(1, rounds + 1)]
    return round(sum(sum(fleet.get("operator_present_s", {}).values()) for fleet in fleets), 1)


def summarize(cfg: LoopConfig, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's ``summary.json`` from its finished steps' results."""
    rounds: list[dict[str, Any]] = [
        {"round": 0, "policy": "base", "eval": results["base_eval"], "promoted": True, "current": "base"}
    ]
    current, current_eval = "base", results["base_eval"]
    for r in range(1, cfg.rounds + 1):
        prefix = f"round_{r}"
        decision = results[f"{prefix}.decide"]
        if decision["promote"]:
            current, current_eval = prefix, results[f"{prefix}.eval"]
        source = next(k for k in ("fleet", "demos", "oracle") if f"{prefix}.{k}" in results)
        collected = results[f"{prefix}.{source}"]
        gathered = {k: v for k, v in collected.items() if k not in ("episode_ids", "guided")}
        train = results[f"{prefix}.train"]
        entry = {
            "round": r,
            "policy": prefix,
            "eval": results[f"{prefix}.eval"],
            "promoted": decision["promote"],
            "current": current,
            "decision": decision,
            source: gathered,
            "segments": results.get(f"{prefix}.critic", {}).get("segments", {}),
            "train": {
                "steps": train["steps"],
                "wall_s": train["wall_s"],
                "final_loss": train["final_loss"],
                "weights": {"mean": train["weights"]["mean_weight"], "zero_fraction": _zero_fraction(train)},
            },
        }
        if "guided" in collected:
            entry["guided"] = collected["guided"]
        entry["reliability"] = _reliability(results.get(f"{prefix}.critic", {}), train["weights"])
        if "recovery_gate" in train["weights"]:
            entry["recovery_gate"] = train["weights"]["recovery_gate"]
        rounds.append(entry)
    final_tests = {"base": results.get("base_final_test")}
    final_tests.update({f"round_{r}": results.get(f"round_{r}.final_test") for r in range(1, cfg.rounds + 1)})
    for entry in rounds:
        if final_tests[entry["policy"]] is not None:
            entry["final_test"] = final_tests[entry["policy"]]
    timings = {name: result["wall_s"] for name, result in results.items() if "wall_s" in result}
    beside = {name: result["beside_s"] for name, result in results.items() if "beside_s" in result}
    return {
        "name": cfg.name,
        "task": cfg.task,
        "method": cfg.method,
        "eval_episodes": cfg.evaluation.episodes,
        "eval_seed": cfg.evaluation.seed,
        "final_test_episodes": cfg.final_test.episodes,
        "final_test_seed": cfg.final_test.seed,
        "rounds": rounds,
        "timings_s": timings,
        "beside_s": beside,
        "final": {"policy": current, "success_rate": current_eval["success_rate"], "final_test": final_tests[current]},
        "baseline": _baseline(cfg, results, final_tests[current] or current_eval),
    }


def _baseline(cfg: LoopConfig, results: dict[str, dict[str, Any]], promoted: dict[str, Any]) -> dict[str, Any] | None:
    """The baseline's figures, and its test paired with the promoted policy's on the same seeds (``promoted``: that
    policy's final test, or its promotion evaluation where there is none)."""
    if "baseline.test" not in results:
        return None
    demos, test = results["baseline.demos"], results["baseline.test"]
    counts, _, _ = paired_outcomes(promoted["seeds"], promoted["outcomes"], test["seeds"], test["outcomes"])
    paired = {
        "shared_seeds": counts.seeds,
        "loop_only": counts.only_a,
        "baseline_only": counts.only_b,
        "p_loop_better": mcnemar_one_sided_p(counts.only_a, counts.only_b),
    }
    return {
        "paired": paired,
        "method": cfg.baseline,
        "loop_human_s": operators_present_s(results, cfg.rounds),
        "human_s": demos["human_s"],
        "demos": demos["episodes"],
        "demo_successes": demos["successes"],
        "seeds": "final_test" if cfg.final_test.episodes else "promotion",
        "test": test,
    }


def _zero_fraction(train: dict[str, Any]) -> float:
    weights = train["weights"]
    steps = weights.get("steps") or 0
    return round(1.0 - weights["nonzero_steps"] / steps, 4) if steps else 0.0


def _reliability(critic: dict[str, Any], weights: dict[str, Any]) -> dict[str, Any]:
    """Every value the round kept or weighed data by, with its reliability: the critic's on the round's fleet
    episodes, the weighter's heads on the training set."""
    measured = {"critic": critic["reliability"]} if critic.get("reliability") else {}
    for head, measures in weights.get("reliability", {}).items():
        measured[f"{weights['weighter']} {head}"] = measures
    return measured
