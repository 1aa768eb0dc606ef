"""Weighters: one weight per stored step. The trainer multiplies each window's loss by its anchor's weight and never
samples a step of weight 0, so objectives differ here, not in copies of the training loop.

Every weighter sees the :class:`StepTable` and the ``eligible`` mask (included episodes, no rewind rows, and what the
retention rule keeps) and returns weights that are 0 outside it. The formulas are ALGORITHMS.md's; where a paper left
a choice open, the choice is a config field and says so.
"""

from __future__ import annotations

import abc
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, model_validator
from torch.nn import functional as F

from vla_recover.config import FrozenConfig
from vla_recover.critic.values import ValueNet, ValueTrainConfig, bce_loss, fit_value, mse_loss
from vla_recover.registry import Registry
from vla_recover.train.reliability import value_reliability
from vla_recover.train.steps import FAILED, SUCCEEDED, StepTable, trajectory_steps_to_go

__all__ = [
    "WEIGHTERS",
    "AWRConfig",
    "HABCConfig",
    "SiriusConfig",
    "ValuePriorityConfig",
    "Weighter",
    "build_weighter",
    "trajectory_steps_to_go",
]


class Weighter(abc.ABC):
    def __init__(self, config: FrozenConfig) -> None:
        self.config = config
        self.stats: dict[str, Any] = {}  # what the weighter learned on the way (value fits, class masses)

    @abc.abstractmethod
    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        """(n,) float32, non-negative, 0 wherever ``eligible`` is False."""


class NoConfig(FrozenConfig):
    pass


class BCWeighter(Weighter):
    """Plain behaviour cloning: every eligible step counts the same."""

    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        return eligible.astype(np.float32)


class IWRWeighter(Weighter):
    """Intervention-weighted regression: human steps weigh (N - N_int) / N_int, so they make half of the loss."""

    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        weights = eligible.astype(np.float32)
        human = eligible & table.human
        n, n_int = int(eligible.sum()), int(human.sum())
        if 0 < n_int < n:
            weights[human] = (n - n_int) / n_int
        self.stats = {"intervention_steps": n_int, "intervention_weight": float(weights[human].max(initial=0.0))}
        return weights


class SiriusConfig(FrozenConfig):
    """Shares of the rollout data's loss per class; demonstrations weigh 1. The autonomous class gets the rest.

    Sirius states the shares as fractions of the batch; here they are fractions of the non-demonstration steps' total
    weight, so demonstrations keep weight 1 whatever their count. A class with no step passes its share on to the
    autonomous class.
    """

    intervention_share: float = Field(default=0.5, ge=0.0, le=1.0, description="the human steps' share")
    pre_intervention_share: float = Field(
        default=0.002,
        ge=0.0,
        le=1.0,
        description="the share of the policy steps just before an intervention (DatasetConfig.pre_intervention_steps)",
    )

    @model_validator(mode="after")
    def _shares(self) -> SiriusConfig:
        if self.intervention_share + self.pre_intervention_share >= 1.0:
            raise ValueError(
                f"intervention_share + pre_intervention_share must be < 1, got "
                f"{self.intervention_share} + {self.pre_intervention_share}"
            )
        return self


class SiriusWeighter(Weighter):
    config: SiriusConfig

    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        weights = eligible.astype(np.float32)
        human = eligible & table.human
        pre = eligible & table.pre_intervention & ~human
        autonomous = eligible & table.executed & ~pre
        rollout_mass = float((human | pre | autonomous).sum())
        shares = {
            "intervention": (human, self.config.intervention_share),
            "pre": (pre, self.config.pre_intervention_share),
        }
        rest = 1.0
        for mask, share in shares.values():
            if mask.any() and autonomous.any():
                weights[mask] = share * rollout_mass / mask.sum()
                rest -= share
        if autonomous.any():
            weights[autonomous] = rest * rollout_mass / autonomous.sum()
        self.stats = {name: float(weights[mask].max(initial=0.0)) for name, (mask, _) in shares.items()}
        self.stats["autonomous"] = float(weights[autonomous].max(initial=0.0))
        return weights


class AWRConfig(FrozenConfig):
    """w = min(exp(A / beta), max_weight), A = R_t - V(s_t), R_t = gamma^(steps to go) on a trajectory that ends in
    success and 0 otherwise (a sparse success reward), V regressed on R over the eligible steps."""

    beta: float = Field(default=0.25, gt=0.0, description="temperature of exp(A / beta): lower is greedier")
    max_weight: float = Field(default=20.0, gt=0.0, description="weights are clipped to this")
    gamma: float = Field(default=0.99, gt=0.0, le=1.0, description="discount of the success reward per step to go")
    value: ValueTrainConfig = Field(default=ValueTrainConfig(), description="training of V, regressed on R")


class AWRWeighter(Weighter):
    config: AWRConfig

    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        to_go = trajectory_steps_to_go(table)
        success_end = np.zeros(table.n, dtype=bool)
        success_end[to_go >= 0] = table.episode_success[to_go >= 0]
        returns = np.where(success_end, self.config.gamma ** np.maximum(to_go, 0), 0.0).astype(np.float32)
        rows = np.flatnonzero(eligible)
        self.value = fit_value(table.state[rows], mse_loss(returns[rows]), self.config.value)
        self.returns = returns
        advantage = returns[rows] - self.value.predict(table.state[rows])
        weights = np.zeros(table.n, dtype=np.float32)
        weights[rows] = np.minimum(np.exp(advantage / self.config.beta), self.config.max_weight)
        self.stats = {
            "advantage_mean": float(advantage.mean()),
            "clipped_fraction": float((weights[rows] >= self.config.max_weight).mean()),
            "reliability": {"value": value_reliability(self.value.predict(table.state), table)},
        }
        return weights


class HABCConfig(FrozenConfig):
    """Hierarchical advantage-weighted BC (viability and efficiency heads merged by a state-adaptive gate).

    Choices left open by the paper, documented: ``efficiency_target`` ``monte_carlo`` regresses V_e on the negative
    steps-to-go of each successful trajectory, which is the fixed point of the paper's bootstrapped target on
    recorded (deterministic) trajectories and needs no target iterations; ``td`` trains on -1 + stopgrad(V_e(s'))
    as written. Values are regressed in units of the longest successful trajectory (Huber delta of 1 step in those
    units). Executed steps with no outcome label (before a takeover) get ``unlabelled_weight``. Rollout weights are
    divided by the mean gate over labelled successful steps, so they average 1 like demonstration steps.
    """

    efficiency_target: Literal["monte_carlo", "td"] = Field(
        default="monte_carlo",
        description="the efficiency head's target: monte_carlo, minus the recorded steps to go; td, -1 + V_e(s')",
    )
    unlabelled_weight: float = Field(
        default=0.0, ge=0.0, description="weight of executed steps with no outcome label (before a takeover)"
    )
    epsilon: float = Field(default=1e-3, gt=0.0, description="floor of the mean gate rollout weights are divided by")
    viability: ValueTrainConfig = Field(
        default=ValueTrainConfig(), description="training of the viability head (logit of a step's outcome label)"
    )
    efficiency: ValueTrainConfig = Field(
        default=ValueTrainConfig(), description="training of the efficiency head (steps to go on successful paths)"
    )


class HABCWeighter(Weighter):
    config: HABCConfig

    def heads(self, table: StepTable) -> tuple[ValueNet, ValueNet, float]:
        """(viability logit head, efficiency head in units of ``scale`` steps, scale)."""
        cfg = self.config
        labelled = np.flatnonzero(table.included & (table.outcome_label != -1))
        if labelled.size == 0:
            raise ValueError("habc: no policy-executed step carries an outcome label; the data holds no rollouts")
        outcome = (table.outcome_label[labelled] == SUCCEEDED).astype(np.float32)
        viability = fit_value(table.state[labelled], bce_loss(outcome), cfg.viability)
        to_go = trajectory_steps_to_go(table)
        on_success = np.flatnonzero(
            table.included & table.episode_success & (to_go >= 0) & (table.executed | table.human | table.demo)
        )
        if on_success.size == 0:
            raise ValueError("habc: no successful trajectory to train the efficiency head on")
        scale = float(max(to_go[on_success].max(), 1))
        states = table.state[on_success]
        if cfg.efficiency_target == "monte_carlo":
            target = torch.as_tensor(-to_go[on_success] / scale, dtype=torch.float32)

            def loss(values: torch.Tensor, rows: np.ndarray, net: ValueNet) -> torch.Tensor:
                return F.huber_loss(values, target[rows], delta=1.0 / scale)
        else:
            successor = table.successor[on_success]
            next_states = torch.as_tensor(table.state[np.maximum(successor, 0)])
            terminal = torch.as_tensor(successor < 0)

            def loss(values: torch.Tensor, rows: np.ndarray, net: ValueNet) -> torch.Tensor:
                with torch.no_grad():
                    bootstrap = torch.where(terminal[rows], torch.zeros(()), net(next_states[rows]))
                    target = torch.where(terminal[rows], torch.zeros(()), -1.0 / scale + bootstrap)
                return F.huber_loss(values, target, delta=1.0 / scale)

        efficiency = fit_value(states, loss, cfg.efficiency, fit_states=table.state[table.included])
        return viability, efficiency, scale

    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        viability, efficiency, scale = self.heads(table)
        logit, efficiency_value = viability.predict(table.state), efficiency.predict(table.state)
        gate = self.gate(table, logit, efficiency_value * scale)
        self.gate_values = gate
        weights = np.zeros(table.n, dtype=np.float32)
        weights[eligible & (table.demo | table.human)] = 1.0
        executed = eligible & table.executed
        success = executed & (table.outcome_label == SUCCEEDED)
        weights[success] = gate[success]
        weights[executed & (table.outcome_label == FAILED)] = 0.0
        weights[executed & (table.outcome_label == -1)] = self.config.unlabelled_weight
        mean = float(gate[success].mean()) if success.any() else 1.0
        rollout = executed & (table.outcome_label != FAILED)
        weights[rollout] /= max(mean, self.config.epsilon)
        self.stats = {
            "gate_mean": mean,
            "gate_min": float(gate[success].min(initial=1.0)),
            "gate_max": float(gate[success].max(initial=1.0)),
            "labelled_success_steps": int(success.sum()),
            "labelled_failure_steps": int((executed & (table.outcome_label == FAILED)).sum()),
            "reliability": {
                "viability": value_reliability(logit, table),
                "efficiency": value_reliability(efficiency_value, table),
            },
        }
        return weights

    @staticmethod
    def gate(table: StepTable, logit: np.ndarray, value: np.ndarray) -> np.ndarray:
        """g_t = 1 + tanh((1 - p_v) A_v + p_v A_e) from every step's viability ``logit`` and efficiency ``value`` (in
        steps); 1 where a step has no successor (and no advantage)."""
        has_next = table.successor >= 0
        nxt = np.where(has_next, table.successor, np.arange(table.n))
        advantage_v = np.where(has_next, logit[nxt] - logit, 0.0)
        next_value = np.where(has_next, value[nxt], 0.0)
        ends_in_success = table.terminal_success
        advantage_e = np.where(has_next | ends_in_success, -1.0 + next_value - value, 0.0)
        p = 0.5 * (1.0 + np.tanh(0.5 * logit))  # the logistic function, without overflow
        return (1.0 + np.tanh((1.0 - p) * advantage_v + p * advantage_e)).astype(np.float32)


class ValuePriorityConfig(FrozenConfig):
    """Robo-ValueRL's prioritising by value: a rollout step's sampling probability rises with its state's learned
    success value (a viability head, as HABC's, on the steps that carry an outcome label).

    The paper prioritises by value without fixing the map from value to probability. The choice here is by rank, as
    prioritised replay's rank variant: the policy steps' weights are ((rank + 1) / n) ** ``power`` in the order of
    their values, scaled to average 1 like demonstration and human steps, so the priority does not depend on the
    value's scale (a logit, a probability, a progress) and one badly calibrated step cannot take the batch.
    """

    power: float = Field(
        default=1.0, gt=0.0, le=10.0, description="how steeply weight rises with value rank; larger is greedier"
    )
    value: ValueTrainConfig = Field(
        default=ValueTrainConfig(), description="training of the value (logit of a step's outcome label)"
    )


class ValuePriorityWeighter(Weighter):
    config: ValuePriorityConfig

    def weights(self, table: StepTable, eligible: np.ndarray) -> np.ndarray:
        labelled = np.flatnonzero(table.included & (table.outcome_label != -1))
        if labelled.size == 0:
            raise ValueError("value_priority: no policy-executed step carries an outcome label; no rollouts to rank")
        outcome = (table.outcome_label[labelled] == SUCCEEDED).astype(np.float32)
        value = fit_value(table.state[labelled], bce_loss(outcome), self.config.value).predict(table.state)
        weights = eligible.astype(np.float32)
        rollout = np.flatnonzero(eligible & table.executed)
        if rollout.size:
            ranks = np.empty(rollout.size, dtype=np.float64)
            ranks[np.argsort(value[rollout], kind="stable")] = np.arange(rollout.size)
            priority = ((ranks + 1.0) / rollout.size) ** self.config.power
            weights[rollout] = (priority / priority.mean()).astype(np.float32)
        self.value_estimate = value
        self.stats = {
            "rollout_steps": int(rollout.size),
            "weight_max": float(weights[rollout].max(initial=0.0)),
            "weight_min": float(weights[rollout].min(initial=0.0)),
            "reliability": {"value": value_reliability(value, table)},
        }
        return weights


WEIGHTERS: Registry[FrozenConfig] = Registry("weighter")
WEIGHTERS.register("bc", NoConfig, "vla_recover.train.weighting:BCWeighter", "uniform weights")
WEIGHTERS.register("iwr", NoConfig, "vla_recover.train.weighting:IWRWeighter", "interventions make half the loss")
WEIGHTERS.register(
    "sirius",
    SiriusConfig,
    "vla_recover.train.weighting:SiriusWeighter",
    "Sirius classes: demo, intervention, pre, auto",
)
WEIGHTERS.register("awr", AWRConfig, "vla_recover.train.weighting:AWRWeighter", "exp(A/beta), clipped, learned V")
WEIGHTERS.register("habc", HABCConfig, "vla_recover.train.weighting:HABCWeighter", "viability/efficiency gate")
WEIGHTERS.register(
    "value_priority",
    ValuePriorityConfig,
    "vla_recover.train.weighting:ValuePriorityWeighter",
    "rollout steps by the rank of a learned success value",
)


def build_weighter(name: str, config: dict[str, Any] | None = None) -> Weighter:
    """The named weighter with its config validated (errors name the field)."""
    from vla_recover.config import validate_config

    entry = WEIGHTERS.get(name)
    weighter: Weighter = entry.load()(validate_config(entry.config_cls, config or {}, source=f"weighter {name}"))
    return weighter
