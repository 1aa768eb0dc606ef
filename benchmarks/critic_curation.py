"""The curation experiment: the segmentation critic judged by the policy it produces.

    python benchmarks/critic_curation.py [--config configs/loop/lift_nominal.yaml] [--episodes N] [--seed 0]
                                         [--work runs/bench_curation] [--base runs/bench_loop/base]
                                         [--tune-episodes 48]

One base run (demos, base policy, base evaluation; an existing one in ``--base``, default ``<work>/base``, is
reused, e.g. benchmarks/loop.py's), then one round of fleet rollouts of the base policy under the simulated
operators, a critic trained on it and the store labelled with its segments, as a loop round does. The same policy is
then trained three times on that round's data, from the same start with the same steps and seed, differing only in
which autonomous steps are kept (demo and human steps always are): ``all`` (every autonomous step), ``critic`` (the
critic's progress and recovery segments) and ``ground_truth`` (the same rule on the simulator's true progress).
A fourth, ``critic_tuned``, keeps the segments of the same critic cut by its tuned segmenter
(vla_recover.critic.tuned), fit on a fleet of the base policy on seeds apart from the round's and the evaluation's
(``--tune-episodes``; 0 leaves the variant out): the shared round is copied, relabelled with it, and trained on.

Each is a one-round ``hitl_bc`` loop run (plain BC) that fine-tunes the base policy with the config's ``retrain``
settings, as a loop round does (``retrain_from: scratch`` in the config trains from scratch instead); ``all`` runs
the shared round and the other two take it with ``seed_first_round``. Each is scored by closed-loop success on the
held-out evaluation seeds (95% Wilson intervals). The critic is good when ``critic`` approaches ``ground_truth``; the
per-step agreement of the two retentions on the round's autonomous steps is reported beside it. Runs live in
``<work>/seed_<seed>/<variant>``. Prints one JSON object on its last line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.config import load_yaml, validate_config
from vla_recover.data import EpisodeStore
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.promotion import difference_lower_bound
from vla_recover.loop.reporters import LineReporter
from vla_recover.loop.runner import LoopRun
from vla_recover.train.dataset import retained_steps
from vla_recover.train.steps import build_step_table

# variant → the retention of autonomous steps it trains with
VARIANTS = {"all": "none", "critic": "critic", "ground_truth": "ground_truth", "critic_tuned": "critic"}
TUNING_ROUND = 50  # the tuning fleet's seeds: the config's fleet seed + 50 strides, apart from every loop round's


def run_base(raw: dict[str, Any], base_dir: Path) -> LoopRun:
    """An earlier base in ``base_dir`` resumes with its own config; the variants check that it applies to theirs."""
    saved = base_dir / "config.json"
    fields = json.loads(saved.read_text()) if saved.is_file() else {**raw, "name": "base", "out": base_dir, "rounds": 0}
    run = LoopRun(validate_config(LoopConfig, fields, source="base"), LineReporter("base"))
    run.run()
    return run


def variant_config(raw: dict[str, Any], variant: str, work: Path, base_dir: Path) -> LoopConfig:
    weighting = {**raw.get("weighting", {}), "weighter": "bc", "retention": VARIANTS[variant]}
    start: dict[str, Any] = {"seed_from": base_dir}
    if variant != "all":  # the same fleet round and critic as `all`, which runs them
        start = {
            "seed_from": work / ("all_tuned_labels" if variant == "critic_tuned" else "all"),
            "seed_first_round": True,
        }
    fields = {**raw, "name": variant, "out": work / variant, "method": "hitl_bc", "rounds": 1, "weighting": weighting}
    return validate_config(LoopConfig, {**fields, **start}, source=variant)


def tuned_labels(all_run: LoopRun, base: LoopRun, work: Path, episodes: int) -> dict[str, Any]:
    """`all`'s run folder copied, its round critic's segmenter tuned on a fleet of the base policy (seeds apart)
    and the copied round relabelled with it: what ``critic_tuned`` is seeded from. `all` itself is left as it ran."""
    from vla_recover.critic.label import label_store
    from vla_recover.critic.tune import tune_segmenter
    from vla_recover.fleet import build_fleet

    tuning_store, copy = work / "tuning_fleet", work / "all_tuned_labels"
    if not (tuning_store / "index.sqlite").is_file():
        shutil.rmtree(tuning_store, ignore_errors=True)  # an interrupted fleet: run it again
        policy = Path(base.results["base_train"]["policy"])
        fleet = all_run.config.fleet_config(tuning_store, policy, TUNING_ROUND, {"curation": "tuning"})
        build_fleet(fleet.model_copy(update={"episodes": episodes})).run()
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(all_run.dir, copy)
    critic_dir = copy / "critics" / "round_1"
    metrics = tune_segmenter(tuning_store, critic_dir)
    label_store(copy / "store", critic_dir, all_run.config.segmenter)
    return metrics


def evaluation_figures(evaluation: dict[str, Any]) -> dict[str, Any]:
    return {
        "success": evaluation["success_rate"],
        "ci95": evaluation["ci95"],
        "successes": evaluation["successes"],
        "episodes": evaluation["episodes"],
    }


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def variant_figures(run: LoopRun) -> dict[str, Any]:
    train = run.results["round_1.train"]
    return {
        **evaluation_figures(run.results["round_1.eval"]),
        "retained_autonomous_fraction": rounded(train["weights"]["retained_autonomous_fraction"]),
        "training_set_steps": train["weights"]["nonzero_steps"],  # stored steps with a nonzero weight
        "gradient_steps": train["steps"],
        "final_loss": rounded(train["final_loss"]),
        "promoted_over_base": run.results["round_1.decide"]["promote"],
        "train_s": train["wall_s"],
        "eval_s": run.results["round_1.eval"]["wall_s"],
    }


def retention_agreement(run: LoopRun, truth_config: LoopConfig) -> dict[str, Any]:
    """Per autonomous step of the shared round: does the critic keep what the simulator's ground truth keeps?"""
    with EpisodeStore(run.store_path) as store:
        table = build_step_table(store, run.results["round_1.fleet"]["episode_ids"])
        critic = retained_steps(store, table, run.config.dataset_config())
        truth = retained_steps(store, table, truth_config.dataset_config())
    autonomous = table.included & table.executed
    critic, truth = critic[autonomous], truth[autonomous]
    if not critic.size:
        return {"autonomous_steps": 0}
    agreement = float(np.mean(critic == truth))
    chance = critic.mean() * truth.mean() + (1 - critic.mean()) * (1 - truth.mean())
    both = int(np.count_nonzero(critic & truth))
    return {
        "autonomous_steps": int(critic.size),
        "critic_kept_fraction": round(float(critic.mean()), 4),
        "truth_kept_fraction": round(float(truth.mean()), 4),
        "agreement": round(agreement, 4),
        "cohen_kappa": round(float((agreement - chance) / (1 - chance)), 4) if chance < 1 else None,
        "precision": round(both / int(critic.sum()), 4) if critic.any() else None,  # of the critic's kept steps
        "recall": round(both / int(truth.sum()), 4) if truth.any() else None,  # of the truth's kept steps
    }


def gap_ci95(critic: dict[str, Any], truth: dict[str, Any]) -> list[float]:
    """95% interval of critic - ground truth success in points (Newcombe's, as the promotion gate's bound)."""
    sb, nb, sc, nc = critic["successes"], critic["episodes"], truth["successes"], truth["episodes"]
    low = difference_lower_bound(sb, nb, sc, nc, 0.975)
    high = -difference_lower_bound(sc, nc, sb, nb, 0.975)
    return [round(100 * low, 1), round(100 * high, 1)]


def shared_round_figures(run: LoopRun) -> dict[str, Any]:
    fleet, critic = run.results["round_1.fleet"], run.results["round_1.critic"]
    return {
        "fleet": {k: fleet[k] for k in ("episodes", "successes", "outcomes", "interventions", "rewinds", "operator_s")},
        "critic_held_out_voc": critic["held_out_voc"],
        "critic_segment_steps": critic["segments"],
    }


def tuned_figures(
    tuned: dict[str, Any], truth: dict[str, Any], run: LoopRun, truth_config: LoopConfig, tuning: dict[str, Any]
) -> dict[str, Any]:
    return {
        "segmenter_tuning": tuning,  # empty when critic_tuned had already run in this work folder
        "critic_tuned_vs_ground_truth_gap_points": round(100 * (tuned["success"] - truth["success"]), 1),
        "critic_tuned_vs_ground_truth_gap_ci95": gap_ci95(tuned, truth),
        "retention_agreement_tuned": retention_agreement(run, truth_config),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/loop/lift_nominal.yaml"), help="loop config")
    parser.add_argument("--episodes", type=int, default=None, help="the shared round's fleet episodes")
    parser.add_argument("--seed", type=int, default=0, help="fleet.seed and retrain.seed (overriding the config's)")
    parser.add_argument("--work", type=Path, default=Path("runs/bench_curation"))
    parser.add_argument(
        "--base", type=Path, default=None, help="base run folder (reused if there); default: <work>/base"
    )
    parser.add_argument(
        "--tune-episodes", type=int, default=48, help="the tuning fleet's episodes (0: no critic_tuned variant)"
    )
    args = parser.parse_args()
    # the variants are compared with each other, not with demonstrations: no baseline after the round
    raw: dict[str, Any] = {**dict(load_yaml(args.config) or {}), "baseline": "none"}
    raw["fleet"] = {**raw.get("fleet", {}), "seed": args.seed}
    if args.episodes is not None:
        raw["fleet"]["episodes"] = args.episodes
    raw["retrain"] = {**raw.get("retrain", {}), "seed": args.seed}
    started = time.perf_counter()
    base_dir, work = args.base or args.work / "base", args.work / f"seed_{args.seed}"
    base = run_base(raw, base_dir)
    variants = [v for v in VARIANTS if v != "critic_tuned" or args.tune_episodes > 0]
    configs = {variant: variant_config(raw, variant, work, base_dir) for variant in variants}
    runs: dict[str, LoopRun] = {}
    figures: dict[str, Any] = {}
    tuning: dict[str, Any] = {}
    for variant, config in configs.items():  # `all` first: the others take its round
        if variant == "critic_tuned" and not (work / variant / "store").exists():
            tuning = tuned_labels(runs["all"], base, work, args.tune_episodes)
        runs[variant] = LoopRun(config, LineReporter(variant))
        runs[variant].run()
        figures[variant] = variant_figures(runs[variant])
    critic, truth, everything = figures["critic"], figures["ground_truth"], figures["all"]
    evaluation = configs["all"].evaluation
    result: dict[str, Any] = {
        "benchmark": "critic_curation",
        "task": configs["all"].task,
        "work": str(args.work),
        "seed": args.seed,
        "eval_episodes": evaluation.episodes,
        "eval_seeds": [evaluation.seed, evaluation.seed + evaluation.episodes - 1],
        "retrain_from": configs["all"].retrain_from,
        **shared_round_figures(runs["all"]),
        "base": evaluation_figures(base.results["base_eval"]),
        **figures,
        "critic_vs_ground_truth_gap_points": round(100 * (critic["success"] - truth["success"]), 1),
        "critic_vs_ground_truth_gap_ci95": gap_ci95(critic, truth),
        "critic_vs_all_points": round(100 * (critic["success"] - everything["success"]), 1),
        "ground_truth_vs_all_points": round(100 * (truth["success"] - everything["success"]), 1),
        "retention_agreement": retention_agreement(runs["critic"], configs["ground_truth"]),
        **(
            tuned_figures(figures["critic_tuned"], truth, runs["critic_tuned"], configs["ground_truth"], tuning)
            if "critic_tuned" in figures
            else {}
        ),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    for variant in ("base", *variants):
        print(f"{variant}: success {result[variant]['success']:.2f} {result[variant]['ci95']}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
