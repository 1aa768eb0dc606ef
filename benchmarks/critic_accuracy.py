"""Critic accuracy against simulator ground truth, on held-out fleet episodes of two tasks.

1. Critic training data: clumsy scripted demos with injected failures (noise, hesitations, missed grasps, drops)
   for LiftCube and PickPlaceBin.
2. Held-out data: fleet rollouts of a trained policy per task under injected failures, with the simulated floor
   operator and teleoperator (takeovers, rewinds, corrections).
3. A critic (state + instruction) per task, and its tuned segmenter (vla_recover.critic.tuned), fit on a third
   set: fleet rollouts of other seeds, with their ground truth. Each held-out episode is cut by the default
   segmenter (the tuned one) on its critic curve and scored per step against ground truth (the sim's true
   progress cut with a dead band, see vla_recover.critic.metrics) beside the slope and dead-band rules on the same
   curve and baselines: time-based
   progress t/T, the oracle (the default segmenter on the true progress: the ceiling of the segmenter itself) and
   a length-only classifier, overall and within episode-length bins. Two more segmenters, fit on the same tuning
   fleet, show what each of the tuned segmenter's inputs brings: ``tuned_curve_only`` without the state's
   stillness, ``tuned_stillness_only`` with a flat curve in place of the critic's. VOC on fleet successes is also
   split by control (``voc_by_control``): those the policy made alone, and those a human took over in.

Needs the policies from configs/train/lift_diffusion.yaml and configs/train/pick_place_diffusion.yaml (see the
README). Last line: one JSON object.

    python benchmarks/critic_accuracy.py [--episodes 24] [--tune-episodes 48] [--demos 60] [--critic-steps 3000]
        [--work DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.config import validate_config
from vla_recover.critic.data import CriticEpisode, length_bin_edges, load_episodes, spearman
from vla_recover.critic.label import critic_segments
from vla_recover.critic.metrics import LengthBaseline, per_kind_f1, step_labels, true_labels
from vla_recover.critic.model import ProgressCritic
from vla_recover.critic.segmenter import CRITIC_KINDS, SegmenterConfig, segment_timeline
from vla_recover.critic.train import CriticTrainConfig, train_critic
from vla_recover.critic.tune import fit_on_episodes, state_motion, tune_segmenter, tuning_episodes
from vla_recover.critic.tuned import TuneConfig, TunedSegmenter
from vla_recover.data import EpisodeStore

TASKS: dict[str, dict[str, Any]] = {
    "LiftCube": {
        "policy": "runs/train/lift_diffusion/policy",
        "task_config": {
            "horizon": 120,
            "failures": [
                {"kind": "slip", "phase": "lift", "probability": 0.5, "delay": [0, 3]},
                {"kind": "push", "phase": "reach", "probability": 0.3, "delay": [2, 6]},
            ],
        },
    },
    "PickPlaceBin": {
        "policy": "runs/train/pick_place_diffusion/policy",
        "task_config": {
            "horizon": 300,
            "failures": [
                {"kind": "early_release", "phase": "carry", "probability": 0.3, "delay": [0, 4]},
                {"kind": "slip", "phase": "lift", "probability": 0.2, "delay": [0, 2]},
            ],
        },
    },
}
CLUMSY = {"action_noise": 0.15, "hesitation_prob": 0.03, "hesitation_steps": 6, "grasp_miss_prob": 0.2}
CLEAN = {"action_noise": 0.05}


def collect_training_demos(task: str, store: Path, demos: int, seed: int, clumsy: bool) -> None:
    from vla_recover.rollout import CollectConfig, collect_demos

    task_config = TASKS[task]["task_config"] if clumsy else {"horizon": TASKS[task]["task_config"]["horizon"]}
    config = validate_config(
        CollectConfig,
        {"task": task, "episodes": demos, "seed": seed, "expert": CLUMSY if clumsy else CLEAN,
         "task_config": task_config, "out": str(store), "workers": 2},
    )  # fmt: skip
    collect_demos(config)


def run_fleet(task: str, store: Path, episodes: int, seed: int) -> dict[str, Any]:
    from vla_recover.fleet import FleetConfig, build_fleet

    spec = TASKS[task]
    if not Path(spec["policy"]).is_dir():
        raise SystemExit(f"{spec['policy']}: no policy; train it first (README, quality bar)")
    config = validate_config(
        FleetConfig,
        {"task": task, "task_config": spec["task_config"], "robots": 6, "robots_per_process": 3,
         "episodes": episodes, "seed": seed, "policy": spec["policy"], "store": str(store),
         "floor_operator": {"reaction_s": 0.5, "reset_s": 2.0, "stall_steps": 40},
         "teleoperator": {"rewind": "in_distribution", "reaction_s": 1.0}},
    )  # fmt: skip
    return build_fleet(config).run()


SLOPE_RULE = SegmenterConfig(rule="slope")  # the rules, for comparison with the tuned segmenter
DEAD_BAND_RULE = SegmenterConfig(rule="dead_band")


def labels_from_curve(
    episode: CriticEpisode,
    curve: np.ndarray,
    config: SegmenterConfig | None = None,
    tuned: TunedSegmenter | None = None,
) -> np.ndarray:
    return step_labels(episode.length, segment_timeline(episode, curve, config, tuned))


def tuning_ablations(tuning_store: Path, critic: ProgressCritic) -> dict[str, TunedSegmenter]:
    """Segmenters fit on the same tuning fleet as the critic's own, each with one of its two inputs taken away:
    ``curve_only`` never sees the state's stillness; ``stillness_only`` sees a flat curve (what the stillness and
    the human's control reach without the critic)."""
    episodes = tuning_episodes(tuning_store, critic)
    config = TuneConfig()
    curves = {e.id: critic.predict(e.inputs, e.instruction) for e in episodes}
    flat = {e.id: np.zeros(e.steps) for e in episodes}
    return {
        "curve_only": fit_on_episodes(episodes, curves, config, None),
        "stillness_only": fit_on_episodes(episodes, flat, config, state_motion(critic, episodes, config)),
    }


def score(
    episodes: list[CriticEpisode],
    critic: ProgressCritic,
    baseline: LengthBaseline,
    ablations: dict[str, TunedSegmenter] | None = None,
) -> dict[str, Any]:
    ablations = ablations or {}
    methods: dict[str, list[np.ndarray]] = {
        "critic": [], "critic_slope_rule": [], "critic_dead_band_rule": [], "time": [], "oracle": [], "length_only": []
    }  # fmt: skip
    methods.update({f"tuned_{name}": [] for name in ablations})
    truths, voc, voc_truth, curves, true_curves = [], [], [], [], []
    helped: list[bool] = []  # per success scored for VOC: did a human take over during it
    for episode in episodes:
        true_progress = episode.true_progress
        assert true_progress is not None  # the held-out episodes are the sim fleet's
        curve, segments = critic_segments(critic, episode)  # cut by the critic's own segmenter (tuned)
        truths.append(true_labels(episode))
        methods["critic"].append(step_labels(episode.length, segments))
        for name, tuned in ablations.items():
            flat = name == "stillness_only"
            methods[f"tuned_{name}"].append(
                labels_from_curve(episode, np.zeros_like(curve) if flat else curve, None, tuned)
            )
        methods["critic_slope_rule"].append(labels_from_curve(episode, curve, SLOPE_RULE))
        methods["critic_dead_band_rule"].append(labels_from_curve(episode, curve, DEAD_BAND_RULE))
        methods["time"].append(labels_from_curve(episode, episode.normalised_time()))
        methods["oracle"].append(labels_from_curve(episode, true_progress))
        length_only = baseline.predict(episode.length)
        methods["length_only"].append(np.where(truths[-1] >= 0, length_only, -1).astype(np.int8))
        curves.append(curve)
        true_curves.append(true_progress)
        if episode.success and episode.steps >= 3:
            voc.append(spearman(curve, np.arange(episode.steps)))
            voc_truth.append(spearman(true_progress, np.arange(episode.steps)))
            helped.append(episode.intervention is not None and bool(episode.intervention.any()))
    truth = np.concatenate(truths)
    critic_voc, truth_voc, intervened = np.array(voc), np.array(voc_truth), np.array(helped, dtype=bool)
    result: dict[str, Any] = {
        "episodes": len(episodes),
        "steps": int(truth.size),
        "voc": round(float(np.nanmean(voc)), 4) if voc else None,
        "voc_time_baseline": 1.0 if voc else None,
        # the true progress is not monotone either when a success went through a failure and a recovery
        "voc_true_progress": round(float(np.nanmean(voc_truth)), 4) if voc_truth else None,
        "voc_episodes": len(voc),
        # a success the policy made alone is monotone in truth; one a human recovered went down and up again
        "voc_by_control": {
            control: {
                "episodes": int(chosen.sum()),
                "critic": round(float(np.nanmean(critic_voc[chosen])), 4) if chosen.any() else None,
                "true_progress": round(float(np.nanmean(truth_voc[chosen])), 4) if chosen.any() else None,
            }
            for control, chosen in (("autonomous", ~intervened), ("intervened", intervened))
        },
        "pearson_vs_true_progress": round(
            float(np.corrcoef(np.concatenate(curves), np.concatenate(true_curves))[0, 1]), 4
        ),
        "f1": {name: per_kind_f1(truth, np.concatenate(labels)) for name, labels in methods.items()},
        "truth_steps_by_kind": {
            (CRITIC_KINDS[k] if k >= 0 else "unscored"): int(n)
            for k, n in zip(*np.unique(truth, return_counts=True), strict=True)
        },
    }
    # length control: the same scores within episode-length bins
    lengths = np.array([e.length for e in episodes])
    bins = np.searchsorted(length_bin_edges(lengths, 3), lengths, side="right")
    result["by_length_bin"] = []
    for b in np.unique(bins):
        members = np.flatnonzero(bins == b)
        t = np.concatenate([truths[i] for i in members])
        row = {"lengths": [int(lengths[members].min()), int(lengths[members].max())], "episodes": int(members.size)}
        for name in ("critic", "length_only", "time"):
            row[f"{name}_macro_f1"] = per_kind_f1(t, np.concatenate([methods[name][i] for i in members]))["macro"]
        result["by_length_bin"].append(row)
    return result


def _episode_weighted(values: list[tuple[float | None, int]]) -> float | None:
    """The mean of per-task figures weighted by their episodes; tasks without a figure left out."""
    known = [(value, n) for value, n in values if value is not None]
    return round(sum(v * n for v, n in known) / sum(n for _, n in known), 4) if known else None


def merge(results: dict[str, Any], tasks: list[str]) -> dict[str, Any]:
    """Step-weighted means of the per-task figures."""
    weights = np.array([results[t]["steps"] for t in tasks], dtype=np.float64)
    merged: dict[str, Any] = {"episodes": sum(results[t]["episodes"] for t in tasks), "steps": int(weights.sum())}
    merged["voc"] = _episode_weighted([(results[t]["voc"], results[t]["voc_episodes"]) for t in tasks])
    autonomous = [results[t]["voc_by_control"]["autonomous"] for t in tasks]
    merged["voc_autonomous"] = _episode_weighted([(a["critic"], a["episodes"]) for a in autonomous])
    merged["macro_f1"] = {
        method: round(float(np.average([results[t]["f1"][method]["macro"] for t in tasks], weights=weights)), 4)
        for method in results[tasks[0]]["f1"]
    }
    return merged


def _overrides(assignments: list[str]) -> dict[str, Any]:
    import yaml

    fields: dict[str, Any] = {}
    for assignment in assignments:
        field, sep, value = assignment.partition("=")
        if not sep or not field:
            raise SystemExit(f"--critic-set: expected FIELD=VALUE, got {assignment!r}")
        fields[field] = yaml.safe_load(value)
    return fields


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=24, help="held-out fleet episodes per task")
    parser.add_argument(
        "--tune-episodes", type=int, default=48, help="fleet episodes per task the segmenter is tuned on (0: none)"
    )
    parser.add_argument("--demos", type=int, default=60, help="critic training demos per task")
    parser.add_argument("--critic-steps", type=int, default=3000)
    parser.add_argument(
        "--clean-demos",
        action="store_true",
        help="train on clean demos, not clumsy ones with injected failures (they cover fewer of the states a fleet "
        "visits: held-out Pearson 0.35 vs 0.66 on LiftCube when measured)",
    )
    parser.add_argument(
        "--fleet-training-episodes",
        type=int,
        default=0,
        help="also train the critic on this many fleet rollouts per task (seeds apart from the held-out ones)",
    )
    parser.add_argument(
        "--regress-target", choices=["time", "time_to_go"], default=None, help="the critic's regression target"
    )
    parser.add_argument(
        "--failure-weight",
        type=float,
        default=None,
        help="rank failed episodes' steps below a success's end with this weight (0: off; default: the critic's)",
    )
    parser.add_argument(
        "--critic-set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a CriticTrainConfig field (a YAML value), e.g. --critic-set seed=1; repeatable",
    )
    parser.add_argument("--work", type=Path, default=None, help="keep (and reuse) the stores and critic here")
    args = parser.parse_args()
    raw: dict[str, Any] = {"steps": args.critic_steps, "held_out_fraction": 0.1}
    if args.regress_target:
        raw["regress_target"] = args.regress_target
    if args.failure_weight is not None:
        raw["failure_weight"] = args.failure_weight
    raw.update(_overrides(args.critic_set))
    config = validate_config(CriticTrainConfig, raw)  # before any collection: a wrong field fails at once

    work = args.work or Path(tempfile.mkdtemp(prefix="critic_accuracy_"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {"benchmark": "critic_accuracy", "work": str(work)}
    scored: dict[str, tuple[list[CriticEpisode], ProgressCritic, LengthBaseline]] = {}
    for offset, task in enumerate(TASKS):  # a critic per task: the tasks' states differ in size
        demos, fleet = work / task / "demos", work / task / "fleet"
        if not demos.exists():
            collect_training_demos(task, demos, args.demos, seed=50_000 + 10_000 * offset, clumsy=not args.clean_demos)
        if not fleet.exists():
            summary = run_fleet(task, fleet, args.episodes, seed=90_000 + 10_000 * offset)
            results.setdefault("fleet", {})[task] = {
                k: summary[k] for k in ("episodes", "outcomes", "interventions", "rewinds")
            }
        sources: list[str | Path] = [demos]
        if args.fleet_training_episodes:  # the fleet's own earlier rollouts (other seeds) beside the demos
            fleet_train = work / task / f"fleet_train_{args.fleet_training_episodes}"
            if not fleet_train.exists():
                run_fleet(task, fleet_train, args.fleet_training_episodes, seed=70_000 + 10_000 * offset)
            sources.append(fleet_train)
        critic_dir = work / task / "critic"
        results.setdefault("critic_training", {})[task] = train_critic(sources, critic_dir, config)
        if args.tune_episodes:  # a third set of fleet rollouts, apart from the critic's and the scored ones
            tuning = work / task / f"fleet_tune_{args.tune_episodes}"
            if not tuning.exists():
                run_fleet(task, tuning, args.tune_episodes, seed=60_000 + 10_000 * offset)
            results.setdefault("segmenter_tuning", {})[task] = tune_segmenter(tuning, critic_dir)
        critic = ProgressCritic.load(critic_dir)
        ablations = tuning_ablations(tuning, critic) if args.tune_episodes else {}
        with EpisodeStore(demos) as store:
            train_episodes = load_episodes(store, critic.input_keys)
        baseline = LengthBaseline.fit([e.length for e in train_episodes], [true_labels(e) for e in train_episodes])
        with EpisodeStore(fleet) as store:
            scored[task] = (load_episodes(store, critic.input_keys), critic, baseline)
        results[task] = score(*scored[task], ablations)
    results["all"] = merge(results, list(TASKS))
    results["wall_s"] = round(time.perf_counter() - started, 1)
    for task in TASKS:
        macro = {method: scores["macro"] for method, scores in results[task]["f1"].items()}
        demos_voc = results["critic_training"][task]["held_out"].get("voc")
        autonomous = results[task]["voc_by_control"]["autonomous"]["critic"]
        print(f"{task}: VOC {results[task]['voc']} (autonomous successes {autonomous}, held-out demos {demos_voc}), "
              f"macro-F1 {macro}")  # fmt: skip
    print(f"all: VOC {results['all']['voc']} (autonomous {results['all']['voc_autonomous']}), "
          f"macro-F1 {results['all']['macro_f1']}")  # fmt: skip
    print(json.dumps(results))


if __name__ == "__main__":
    main()
