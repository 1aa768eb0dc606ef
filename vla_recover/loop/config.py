"""``vla-recover loop``: one config for the whole post-training loop, checked before anything runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from vla_recover.config import FrozenConfig, validate_nested
from vla_recover.critic.kinds import CRITICS
from vla_recover.critic.segmenter import SegmenterConfig
from vla_recover.envs import checked_task
from vla_recover.envs.expert import ExpertConfig
from vla_recover.fleet.config import FleetConfig
from vla_recover.loop.methods import LOOP_METHODS, LoopMethod, loop_method
from vla_recover.loop.promotion import PromotionConfig
from vla_recover.policies.common.failure_guidance import FailureGuidanceConfig
from vla_recover.policies.common.recovery_head import RecoveryHeadConfig
from vla_recover.train.dataset import DatasetConfig
from vla_recover.train.trainer import TrainConfig
from vla_recover.train.weighting import WEIGHTERS

__all__ = [
    "BASE_FIELDS",
    "FIRST_ROUND_FIELDS",
    "QUICKSTART",
    "EvalConfig",
    "FinalTestConfig",
    "LoopConfig",
    "MoreDemosConfig",
    "OracleConfig",
    "saved_with_defaults",
]

# What the demos, the base policy and its evaluation depend on: a run seeded from another must agree on these.
BASE_FIELDS = ("task", "task_config", "demos", "base_train", "evaluation")
# What the first round's fleet and critic depend on besides those (seed_first_round).
FIRST_ROUND_FIELDS = ("fleet", "fleet_seed_stride", "critic", "segmenter")
_LOOP_SET = ("data", "out", "eval_task", "eval_every", "init_from", "select", "weighting")


# The quickstart's task: LiftCube where demonstrations do not reach, a push while reaching and a slip while lifting
# injected in half the episodes each (configs/loop/quickstart.yaml spells the same run out).
QUICKSTART = {
    "task_config": {
        "failures": [
            {"kind": "push", "phase": "reach", "probability": 0.5},
            {"kind": "slip", "phase": "lift", "probability": 0.5},
        ]
    }
}


class DemoConfig(FrozenConfig):
    """Scripted demonstrations; the default is a clumsy demonstrator, so the base policy has room to improve."""

    episodes: int = Field(
        default=20, ge=1, le=100_000, description="scripted demonstrations the base policy is trained on"
    )
    seed: int = Field(default=0, ge=0, description="first demonstration's seed; one episode per seed from it")
    expert: ExpertConfig = Field(
        default=ExpertConfig(action_noise=0.3, hesitation_prob=0.05, grasp_miss_prob=0.3),
        description="the scripted demonstrator's skill",
    )
    workers: int = Field(
        default=2, ge=1, le=64, description="processes recording demonstrations at once (the more_demos ones too)"
    )
    conditions: Literal["nominal", "task"] = Field(
        default="nominal",
        description="nominal: recorded without the task_config's injected failures, as demonstrations usually are; "
        "task: under them, as the fleet and the evaluation meet the task",
    )
    starts: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="two-step episodes by the same demonstrator besides the demos, one per seed from starts_seed: "
        "the first windows of an attempt, where the instruction decides which object to go for (a small policy "
        "learns to read the instruction from these, which a few whole demonstrations hold too few of)",
    )
    starts_seed: int = Field(default=50_000, ge=0, description="the first start's seed, below the evaluation's")


class EvalConfig(FrozenConfig):
    """The promotion seeds: every candidate and the base are evaluated on them, and promotion decides on them."""

    episodes: int = Field(
        default=100, ge=1, le=100_000, description="episodes each policy is evaluated on, one per seed from seed"
    )
    seed: int = Field(default=100_000, ge=0, description="first held-out seed; fleet seeds must stay below it")
    batch: int = Field(
        default=50,
        ge=1,
        le=1000,
        description="episodes simulated side by side, their policy calls batched (the dagger_oracle rounds' too)",
    )


class FinalTestConfig(FrozenConfig):
    """Seeds disjoint from the promotion seeds: the figures a run is judged by, never seen by what chose its winner."""

    episodes: int = Field(default=200, ge=0, le=100_000, description="0: no final test")
    seed: int = Field(default=200_000, ge=0, description="first final-test seed, above the promotion seeds")


class MoreDemosConfig(FrozenConfig):
    """The ``more_demos`` baseline: a round's human time spent on demonstrations instead of supervising a fleet."""

    human_s_per_round: float = Field(
        default=60.0,
        gt=0.0,
        le=1e6,
        description="demonstrator seconds a round buys, charged as a fleet round charges its operators' presence "
        "(benchmarks/loop.py sets it to what the fleet methods' rounds cost)",
    )
    reset_s: float = Field(default=4.0, ge=0.0, le=3600.0, description="demonstrator time per reset")
    expert: ExpertConfig = Field(
        default=ExpertConfig(action_noise=0.05), description="the teleoperator's skill: the same demonstrator"
    )
    batch: int = Field(
        default=4, ge=1, le=1000, description="demonstrations recorded at a time until the time is spent"
    )


class OracleConfig(FrozenConfig):
    """The ``dagger_oracle`` bound: the scripted expert acts one chunk from every chunk boundary the current policy
    visits."""

    episodes: int | None = Field(
        default=None, ge=1, le=100_000, description="policy episodes a round labels; default: the fleet's episodes"
    )
    expert: ExpertConfig = Field(default=ExpertConfig(), description="the oracle; default: the perfect expert")


class ReGuideLoopConfig(FrozenConfig):
    """ReGuide's loop settings; whether its rounds fine-tune (``reguide``) or train from scratch (``reguide_fs``) is
    the method's."""

    demo_share: float = Field(default=0.2, gt=0.0, lt=1.0, description="the demos' share when fine-tuning")
    guidance: dict[str, Any] = Field(default_factory=dict, description="vla_recover.train.reguide.ReGuideConfig fields")


class LoopConfig(FrozenConfig):
    name: str = Field(
        default="quickstart",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="the run's name: its folder is runs/loop/<name> unless out is set",
    )
    out: Path | None = Field(default=None, description="run folder; default runs/loop/<name>")
    seed_from: Path | None = Field(
        default=None,
        description="a loop run folder whose demos, base policy and base evaluation this run starts from (its store "
        "is copied; the fields those steps depend on must match): methods compared from one base",
    )
    seed_first_round: bool = Field(
        default=False,
        description="with seed_from: take its first round's fleet rollouts and critic too (the base policy's "
        "autonomous data, the critic trained on it and its labels in the store), so runs that differ only in how "
        "they train compare on the same data; seed_from must be a one-round run that is not reguide",
    )
    task: str = Field(
        default="LiftCube", description="the task (name or gym id) the demos, the fleet and the evaluations run"
    )
    task_config: dict[str, Any] = Field(
        default_factory=dict, description="the task's settings, met by the fleet and the held-out evaluation alike"
    )
    method: str = Field(
        default="habc",
        description="a retraining method of vla_recover.loop.methods.LOOP_METHODS; an unknown name's error lists them",
    )
    rounds: int = Field(
        default=3,
        ge=0,
        le=100,
        description="rounds after the base policy, each collecting, retraining, evaluating and promoting; 0: none",
    )
    demos: DemoConfig = Field(default=DemoConfig(), description="the scripted demonstrations that seed the loop")
    base_train: dict[str, Any] = Field(
        default_factory=lambda: {
            "policy": "flow",
            "policy_config": {
                "obs_horizon": 2,
                "action_horizon": 16,
                "action_exec": 8,
                "down_dims": [32, 64, 128],
                "inference_steps": 4,
            },
            "steps": 1500,
            "batch_size": 64,
            "warmup_steps": 100,
            "log_every": 50,
            "save_every": 500,
        },
        description="TrainConfig fields for the base policy",
    )
    retrain: dict[str, Any] = Field(
        default_factory=lambda: {"steps": 1200, "warmup_steps": 50, "lr": 1e-3},
        description="TrainConfig fields that differ when a round fine-tunes (one recipe for every fine-tuning "
        "method, the baseline's too; the default is the recipe benchmarks/recipe_sweep.py chose); a round that "
        "trains from scratch uses base_train",
    )
    retrain_from: Literal["current", "scratch"] = Field(
        default="current", description="each round fine-tunes the current version, or trains from scratch"
    )
    fleet: dict[str, Any] = Field(
        default_factory=lambda: {
            "robots": 8,
            "episodes": 24,
            "robots_per_process": 4,
            "floor_operator": {"resets": "automatic", "request_cost_s": 0.5, "stall_steps": 40},
            "teleoperator": {"count": 2, "reaction_s": 1.0},
        },
        description="FleetConfig fields (robots, operators, ...)",
    )
    fleet_seed_stride: int = Field(default=1000, ge=1, description="round r's fleet starts at seed + r * stride")
    fleet_critic: Literal["none", "previous_round"] = Field(
        default="previous_round",
        description="previous_round: from round 2 on, the critic trained in the round before rates the fleet: the "
        "floor operator watches it (fleet_critic_detector) and it picks rewind targets; none: ground truth in "
        "every round",
    )
    fleet_critic_detector: Literal["critic", "critic_or_ground_truth"] = Field(
        default="critic_or_ground_truth",
        description="the floor operator's detector while the critic rates the fleet: its alerts alone (as on a "
        "robot no one watches), or its alerts and what a person watching sees (ground truth, in sim)",
    )
    critic: dict[str, Any] = Field(
        default_factory=lambda: {"steps": 600, "batch_size": 128},
        description="kind: a registered critic (default progress, vla_recover.critic.kinds) and its training config's "
        "fields (CriticTrainConfig for progress)",
    )
    segmenter: SegmenterConfig = Field(
        default=SegmenterConfig(),
        description="how each round's critic ratings are cut into the segments labelled in the store",
    )
    weighting: dict[str, Any] = Field(
        default_factory=dict, description="DatasetConfig fields on top of the method's weighter and retention"
    )
    weighter_configs: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="per weighter name, its config (e.g. habc: {viability: {steps: 500}}); the method picks one",
    )
    reguide: ReGuideLoopConfig = Field(
        default=ReGuideLoopConfig(), description="the reguide and reguide_fs methods' settings"
    )
    more_demos: MoreDemosConfig = Field(
        default=MoreDemosConfig(),
        description="demonstrations bought with human time: the more_demos methods' rounds and the baseline",
    )
    baseline: Literal["none", "more_demos", "more_demos_perturbed"] = Field(
        default="more_demos",
        description="after a fleet method's rounds: the operators' presence over all of them spent instead on "
        "demonstrations (as that method records them), fine-tuned into the base in one round and tested on the same "
        "seeds, so the report shows what the human time bought against what demonstrations would have; none: skip",
    )
    oracle: OracleConfig = Field(default=OracleConfig(), description="the dagger_oracle method's settings")
    failure_guidance: FailureGuidanceConfig = Field(
        default=FailureGuidanceConfig(),
        description="the afil method's guidance: how its rounds' failure generator steers sampling",
    )
    recovery_head: RecoveryHeadConfig = Field(
        default=RecoveryHeadConfig(),
        description="the recovery_gated method's gate: its network and how its threshold is chosen",
    )
    evaluation: EvalConfig = Field(
        default=EvalConfig(), description="the promotion evaluation every candidate and the base are run on"
    )
    final_test: FinalTestConfig = Field(
        default=FinalTestConfig(), description="the final test, on seeds disjoint from the promotion seeds"
    )
    promotion: PromotionConfig = Field(
        default=PromotionConfig(), description="when a round's candidate replaces the current version"
    )

    @property
    def run_dir(self) -> Path:
        return self.out or Path("runs/loop") / self.name

    def train_config(self, data: Path, out: Path, retrain: bool, **loop_fields: Any) -> TrainConfig:
        raw = {**self.base_train, **(self.retrain if retrain else {})}
        section = "retrain" if retrain else "base_train"  # base_train is checked first, so its errors name it
        return validate_nested(TrainConfig, {**raw, "data": data, "out": out, **loop_fields}, section)

    def demo_task_config(self, conditions: Literal["nominal", "task"]) -> dict[str, Any]:
        """The task settings demonstrations are recorded under: the fleet's and evaluation's, or those without
        their injected failures."""
        if conditions == "task":
            return dict(self.task_config)
        return {k: v for k, v in self.task_config.items() if k != "failures"}

    def fleet_config(
        self, store: Path, policy: Path, round_index: int, tags: dict[str, Any], critic: Path | None = None
    ) -> FleetConfig:
        raw = {**self.fleet, "task": self.task, "task_config": self.task_config}
        if critic is not None:
            floor = {**self.fleet.get("floor_operator", {}), "detector": self.fleet_critic_detector}
            raw.update(critic=critic, floor_operator=floor)
        raw["seed"] = int(self.fleet.get("seed", 0)) + round_index * self.fleet_seed_stride
        raw.update(store=store, policy=policy, constant_action=None, episode_tags=tags)
        return validate_nested(FleetConfig, raw, "fleet")

    def round_policy_config(self, retrain: bool, method_name: str | None = None) -> dict[str, Any]:
        """A round's policy_config: the recipe's, with the second generator of a method that trains one."""
        raw = {**self.base_train, **(self.retrain if retrain else {})}
        config = dict(raw.get("policy_config", {}))
        method = loop_method(method_name or self.method)
        if method.failures != "none":
            config["failure_guidance"] = self.failure_guidance.model_dump(mode="json")
        if method.recovery_head:
            config["recovery"] = self.recovery_head.model_dump(mode="json")
        return config

    def dataset_config(self, demo_share: float | None = None, method_name: str | None = None) -> DatasetConfig:
        method = loop_method(method_name or self.method)
        raw = {
            "weighter": method.weighter, "retention": method.retention, "shares": method.shares,
            "failures": method.failures, **self.weighting,
        }  # fmt: skip
        raw["weighter_config"] = self.weighter_configs.get(raw["weighter"], {})
        if demo_share is not None:
            raw.update(demo_share=demo_share, shares=None)
        return validate_nested(DatasetConfig, raw, "weighting")

    @property
    def loop_method(self) -> LoopMethod:
        return loop_method(self.method)

    @model_validator(mode="after")
    def _parts_valid(self) -> LoopConfig:
        """Every part builds now, so a typo fails before a 20-minute run rather than in its last round."""
        if self.method not in LOOP_METHODS:
            raise ValueError(f"method: got {self.method!r}; valid choices: {', '.join(LOOP_METHODS.names())}")
        checked_task(self.task, self.task_config)  # the fleet part checks it too, but this error names the loop's field
        for section, values in (("base_train", self.base_train), ("retrain", self.retrain)):
            fixed = sorted(set(values) & set(_LOOP_SET))
            if fixed:
                raise ValueError(f"{section}: {fixed} are set by the loop itself")
        placeholder = Path("runs/loop/_check")
        self.train_config(placeholder, placeholder, retrain=False)
        self.train_config(placeholder, placeholder, retrain=True)
        if "task_config" in self.fleet:
            raise ValueError(
                f"fleet.task_config: got {self.fleet['task_config']!r}; the fleet meets the task as the held-out "
                "evaluation does: set task_config at the top level"
            )
        fleet_fixed = sorted(set(self.fleet) & {"task", "store", "policy", "constant_action", "episode_tags"})
        if fleet_fixed:
            raise ValueError(f"fleet: {fleet_fixed} are set by the loop itself")
        fleet = self.fleet_config(placeholder, placeholder, self.rounds, {})
        last_seed = fleet.seed + fleet.episodes * 4  # robots may start more attempts than the episodes they finish
        if last_seed >= self.evaluation.seed:
            raise ValueError(
                f"fleet.seed / fleet_seed_stride: round {self.rounds} reaches seed {last_seed}, into the held-out "
                f"evaluation seeds starting at {self.evaluation.seed}"
            )
        if self.demos.starts and self.demos.starts_seed + self.demos.starts > self.evaluation.seed:
            raise ValueError(
                f"demos.starts_seed: got {self.demos.starts_seed}; its {self.demos.starts} starts reach into the "
                f"held-out evaluation seeds starting at {self.evaluation.seed}"
            )
        promotion_end, final = self.evaluation.seed + self.evaluation.episodes, self.final_test
        if final.episodes and final.seed < promotion_end:
            raise ValueError(
                f"final_test.seed: got {final.seed}; the final-test seeds must start at or above {promotion_end}, "
                f"past the promotion seeds {self.evaluation.seed}..{promotion_end - 1} (and every fleet seed)"
            )
        if self.seed_first_round and self.seed_from is None:
            raise ValueError("seed_first_round: needs seed_from (the run whose first round to take)")
        if self.seed_first_round and (self.loop_method.guided or self.loop_method.rounds_collect != "fleet"):
            raise ValueError(
                f"seed_first_round: {self.method}'s rounds collect their own data; it cannot take another run's fleet"
            )
        kind = self.critic.get("kind", "progress")
        if kind not in CRITICS:
            raise ValueError(f"critic.kind: unknown critic {kind!r}; valid choices: {', '.join(CRITICS.names())}")
        validate_nested(CRITICS.get(kind).config_cls, {k: v for k, v in self.critic.items() if k != "kind"}, "critic")
        if "weighter_config" in self.weighting:
            raise ValueError("weighting.weighter_config: give it per weighter in weighter_configs")
        for name, values in self.weighter_configs.items():
            if name not in WEIGHTERS:
                raise ValueError(
                    f"weighter_configs: no weighter {name!r}; valid choices: {', '.join(WEIGHTERS.names())}"
                )
            validate_nested(WEIGHTERS.get(name).config_cls, values, f"weighter_configs.{name}")
        self.dataset_config()
        if self.loop_method.rounds_collect == "fleet":  # a round's own data rule and policy build with the recipe
            for retrain in (False, True):
                self.train_config(
                    placeholder, placeholder, retrain, weighting=self.dataset_config(),
                    policy_config=self.round_policy_config(retrain),
                )  # fmt: skip
        if self.loop_method.guided:
            from vla_recover.train.reguide import ReGuideConfig

            validate_nested(ReGuideConfig, self.reguide.guidance, "reguide.guidance")
        return self


# Fields whose default is not what a run saved before they existed did: such a run read as that behaviour.
_BEFORE_THEY_EXISTED: dict[str, Any] = {"baseline": "none"}


def saved_with_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """A saved run config with every field added since it was saved at its default, in its sections too, and a
    section's field removed since left out (a free-form dict such as ``fleet`` is kept as saved: it has no fields)."""
    defaults = LoopConfig().model_dump(mode="json")
    merged = {**defaults, **_BEFORE_THEY_EXISTED, **saved}
    for name, field in LoopConfig.model_fields.items():
        section = isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
        if section and isinstance(merged.get(name), dict):
            merged[name] = {k: v for k, v in {**defaults[name], **merged[name]}.items() if k in defaults[name]}
    return merged
