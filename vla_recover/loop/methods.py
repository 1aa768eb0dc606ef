"""The loop's retraining methods: one entry each, saying what data a round trains on and how.

A method is data, not a branch in the runner: whether a round runs a fleet or spends its human time on
demonstrations, which steps of the fleet's episodes enter (``retention``), how they are weighted (a registered
weighter), whether the fleet runs the plain policy or ReGuide's guided one, which rollouts are absorbed, which steps
train a failure generator (AFIL) or a recovery head (EgoRecovery), and whether each round fine-tunes the current
version or trains from scratch. Each entry states its data rule beside its paper; ALGORITHMS.md restates the formulas.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from vla_recover.registry import Catalog

__all__ = ["LOOP_METHODS", "LoopMethod", "loop_method"]


@dataclass(frozen=True)
class LoopMethod:
    """A retraining method: what a round collects, which steps it trains on and how it weighs them, and where each
    round's training starts. ``LOOP_METHODS`` holds one entry per name; docs/concepts/methods.md has a row for
    each."""

    name: str
    paper: str
    data: str  # the data rule in one sentence (the CLI's help and the docs)
    weighter: str  # a name in vla_recover.train.weighting.WEIGHTERS
    retention: Literal["none", "critic", "ground_truth", "interventions"] = "none"
    shares: dict[str, float] | None = None  # DatasetConfig.shares: each source's part of the weight
    start: Literal["config", "scratch"] = "config"  # config: LoopConfig.retrain_from; scratch: every round
    guided: bool = False  # the fleet runs ReGuide's guided chunks, and only their successful episodes are absorbed
    # demos: the round's human time buys demonstrations instead; oracle: the expert acts from the policy's states
    rounds_collect: Literal["fleet", "demos", "oracle"] = "fleet"
    demo_conditions: Literal["nominal", "task"] = "nominal"  # where those demonstrations are recorded
    # which policy steps train a failure generator that steers sampling away from them (AFIL); none: no generator
    failures: Literal["none", "critic", "ground_truth"] = "none"
    # the human corrections train a recovery head a learned gate switches in (EgoRecovery)
    recovery_head: bool = False
    # the method with the same data and one generator: what a second generator must beat (the benchmark's goal)
    same_data_without: str | None = None


LOOP_METHODS: Catalog[LoopMethod] = Catalog("method")
for _method in (
    LoopMethod(
        "hitl_bc",
        "HELP (HITL-only update)",
        "fine-tunes on the demos and the human corrections in equal shares; nothing the policy did alone",
        weighter="bc",
        retention="interventions",
        shares={"demos": 1.0, "human": 1.0},
    ),
    LoopMethod(
        "hg_dagger",
        "HG-DAgger; RaC",
        "the demos and the human corrections only (targets never leave the human's control), trained from "
        "scratch each round",
        weighter="bc",
        retention="interventions",
        start="scratch",
    ),
    LoopMethod(
        "iwr",
        "Sirius (IWR baseline)",
        "the demos and the fleet's episodes; human steps make half of the loss",
        weighter="iwr",
    ),
    LoopMethod(
        "sirius",
        "Sirius",
        "the demos and the fleet's episodes, weighted by class (demo, intervention, pre-intervention, robot)",
        weighter="sirius",
    ),
    LoopMethod(
        "critic_cut",
        "HELP (VLAC-CUT)",
        "the HITL update plus the autonomous segments the critic keeps (progress, recovery): demos, "
        "corrections and kept segments 1 : 1 : 1",
        weighter="bc",
        retention="critic",
        shares={"demos": 1.0, "human": 1.0, "autonomous": 1.0},
    ),
    LoopMethod(
        "critic_cut_gt",
        "HELP (VLAC-CUT), cut by ground truth",
        "critic_cut with the simulator's progress in place of the critic's: how much the critic's cut costs",
        weighter="bc",
        retention="ground_truth",
        shares={"demos": 1.0, "human": 1.0, "autonomous": 1.0},
    ),
    LoopMethod(
        "afil",
        "AFIL (Adaptive Failure-Informed Learning)",
        "hitl_bc's data trains the policy; its steps the critic labels failure-inducing train a failure generator "
        "over the same conditioning, which steers every sampled chunk away from failure (failure_guidance)",
        weighter="bc",
        retention="interventions",
        shares={"demos": 1.0, "human": 1.0},
        failures="critic",
        same_data_without="hitl_bc",
    ),
    LoopMethod(
        "recovery_gated",
        "EgoRecovery (recovery gate)",
        "hitl_bc's data trains the nominal generator and the human corrections alone a recovery head; a gate "
        "trained on the fleet's recorded failures switches the head in for the chunks it flags",
        weighter="bc",
        retention="interventions",
        shares={"demos": 1.0, "human": 1.0},
        recovery_head=True,
        same_data_without="hitl_bc",
    ),
    LoopMethod(
        "awr",
        "AWR",
        "the demos and the fleet's episodes, weighted by exp(advantage / beta) from a learned value",
        weighter="awr",
    ),
    LoopMethod(
        "habc",
        "HABC",
        "critic_cut's data, weighted by the viability and efficiency gate",
        weighter="habc",
        retention="critic",
    ),
    LoopMethod(
        "value_priority",
        "Robo-ValueRL (prioritising by value)",
        "the demos, the corrections and every rollout step 1 : 1 : 1, rollout steps sampled with probability "
        "rising with the rank of their state's learned success value",
        weighter="value_priority",
        shares={"demos": 1.0, "human": 1.0, "autonomous": 1.0},
    ),
    LoopMethod(
        "reguide",
        "ReGuide",
        "ReGuide FT: the fleet runs the policy guided by a learned dynamics model; only its successful episodes "
        "are absorbed, fine-tuning the current policy on demos 0.2 : successes 0.8 (reguide.demo_share)",
        weighter="bc",
        guided=True,
    ),
    LoopMethod(
        "reguide_fs",
        "ReGuide",
        "ReGuide FS: reguide's guided fleet and successful episodes, trained from scratch with the demos each round",
        weighter="bc",
        guided=True,
        start="scratch",
    ),
    LoopMethod(
        "dagger_oracle",
        "DAgger (Ross et al. 2011), the scripted expert as oracle",
        "the upper bound, no human time charged: no fleet; the current policy runs the round's seeds as "
        "evaluation runs it, the perfect expert labels every state it visits, and every labelled episode is "
        "aggregated beside the demos",
        weighter="bc",
        rounds_collect="oracle",
    ),
    LoopMethod(
        "more_demos",
        "the baseline every loop method must beat",
        "no fleet: each round's human time (more_demos.human_s_per_round) buys demonstrations by the "
        "teleoperator's demonstrator (an episode plus a reset each), fine-tuned in beside the demos",
        weighter="bc",
        rounds_collect="demos",
    ),
    LoopMethod(
        "more_demos_perturbed",
        "the stronger reference",
        "more_demos recorded under the task's injected failures, so the demonstrator shows its own recoveries",
        weighter="bc",
        rounds_collect="demos",
        demo_conditions="task",
    ),
):
    LOOP_METHODS.add(_method)


def loop_method(name: str) -> LoopMethod:
    """The method called ``name``; an unknown name's error lists the registered ones."""
    return LOOP_METHODS.get(name)
