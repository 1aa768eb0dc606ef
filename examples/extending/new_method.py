"""A new retraining method for the loop: success-filtered behaviour cloning.

A loop method is data (`vla_recover.loop.methods.LoopMethod`): what a round collects, which steps enter training
and which weighter weighs them. The weighting is the part a new method usually brings, so this example registers a
weighter with its own config class, ``outcome_bc``: the policy's own steps count fully only where its episode went
on to succeed; those that led to a failure, or that a human had to take over from, count ``failure_weight``; human
corrections count ``human_weight``; demonstrations 1. A method entry of the same name pairs it with a fleet round.

``main(out)`` runs the loop's debug preset (configs/loop/debug.yaml) for one round with the method and prints the
success of the base policy and of the round's candidate. The preset trains for seconds, so expect success near 0:
it shows the mechanics, not what the method is worth. It takes under a minute on two CPU cores. Run it from the
repository root:

    python examples/extending/new_method.py runs/loop/outcome_bc_debug
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from vla_recover.config import FrozenConfig, load_yaml, validate_config
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.methods import LOOP_METHODS, LoopMethod
from vla_recover.loop.reporters import LineReporter
from vla_recover.loop.runner import LoopRun
from vla_recover.train.steps import SUCCEEDED, StepTable
from vla_recover.train.weighting import WEIGHTERS, Weighter

NAME = "outcome_bc"
DEBUG = Path(__file__).resolve().parents[2] / "configs" / "loop" / "debug.yaml"


class OutcomeBCConfig(FrozenConfig):
    """What the policy's doubtful steps and the human corrections weigh; demonstrations weigh 1."""

    failure_weight: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="weight of a policy step whose episode failed after it, or that a human took over from",
    )
    human_weight: float = Field(default=1.0, gt=0.0, le=100.0, description="weight of a human correction step")


class OutcomeBCWeighter(Weighter):
    """Behaviour cloning that trusts the policy's steps only where its episode succeeded."""

    config: OutcomeBCConfig

    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        weights = eligible.astype(np.float32)  # demonstrations and everything else: 1
        # outcome_label on the policy's steps: the episode's outcome after its last human takeover, -1 before it
        doubtful = eligible & table.executed & (table.outcome_label != SUCCEEDED)
        human = eligible & table.human
        weights[doubtful] = self.config.failure_weight
        weights[human] = self.config.human_weight
        # what the weighter reports lands in the training run's weights.json and the loop step's result
        self.stats = {"doubtful_policy_steps": int(doubtful.sum()), "human_steps": int(human.sum())}
        return weights


# The target is a "module:Class" string, imported when first used; __name__ keeps it right whether this file runs
# as a script (__main__) or is imported.
WEIGHTERS.register(NAME, OutcomeBCConfig, f"{__name__}:OutcomeBCWeighter", "policy steps count by their outcome")
LOOP_METHODS.add(
    LoopMethod(
        NAME,
        "success-filtered BC (the docs' example method)",
        "the demos and the fleet's episodes; the policy's steps count fully only where its episode succeeded",
        weighter=NAME,
    )
)


def main(out: str | Path, **changes: Any) -> dict[str, Any]:
    """One round of the debug loop with ``outcome_bc`` in run folder ``out`` (``changes``: more LoopConfig fields);
    returns the run's summary."""
    raw = load_yaml(DEBUG)
    raw.update(out=str(out), method=NAME, rounds=1)
    # the weighter's settings, checked against OutcomeBCConfig: here the doubtful steps drop out altogether
    raw["weighter_configs"] = {**raw.get("weighter_configs", {}), NAME: {"failure_weight": 0.0}}
    raw.update(changes)
    config = validate_config(LoopConfig, raw, source=f"{DEBUG} with method {NAME}")
    summary = LoopRun(config, LineReporter(NAME)).run()
    for entry in summary["rounds"]:
        decision = "" if entry["round"] == 0 else (", promoted" if entry["promoted"] else ", discarded")
        print(f"{entry['policy']}: success {entry['eval']['success_rate']:.2f} {entry['eval']['ci95']}{decision}")
    return summary


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/loop/outcome_bc_debug")
