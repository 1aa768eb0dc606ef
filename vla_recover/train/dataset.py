"""The dataset builder: which stored steps a policy trains on, and with what weight.

Three layers, applied in order: the included episodes (a loop round's data), the retention rule (which autonomous
steps a critic keeps: ``none``, the learned ``critic`` segments in the store, or ``ground_truth`` segments cut from
the simulator's true progress), then the weighter. Demonstration and human steps are never cut by retention; rows no
one chose (holds, rewind rows) never train.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from vla_recover.config import FrozenConfig, validate_nested
from vla_recover.critic.metrics import ground_truth_segments
from vla_recover.critic.retention import KEEP, RetentionConfig, retention_labels
from vla_recover.critic.segmenter import CRITIC_KINDS
from vla_recover.data import EpisodeStore
from vla_recover.train.steps import StepTable, build_step_table
from vla_recover.train.weighting import WEIGHTERS, build_weighter

__all__ = ["DatasetConfig", "build_step_weights", "failed_steps", "retained_steps", "with_failures"]


class DatasetConfig(FrozenConfig):
    weighter: str = Field(
        default="bc",
        description="a weighter registered in vla_recover.train.weighting.WEIGHTERS (bc, iwr, sirius, awr, habc, ...)",
    )
    weighter_config: dict[str, Any] = Field(default_factory=dict, description="the weighter's config fields")
    retention: Literal["none", "critic", "ground_truth", "interventions"] = Field(
        default="none",
        description="which autonomous steps of rollouts stay: all (none), the critic's or the simulator's progress "
        "and recovery segments (critic, ground_truth), or none of them (interventions: only what a human chose)",
    )
    retention_config: RetentionConfig = Field(
        default=RetentionConfig(), description="which segment kinds the critic and ground_truth retention keep"
    )
    pre_intervention_steps: int = Field(default=15, ge=0, description="Sirius' pre-intervention window")
    min_intervention_steps: int = Field(
        default=10, ge=1, description="human steps for a takeover to cut outcome credit"
    )
    cross_boundary_targets: bool = Field(
        default=False,
        description="a window's action targets run on past a change of controller (a correction into the policy's "
        "steps after the hand-back); never into a hold or a rewind row. False: they end where control changes hands",
    )
    demo_share: float | None = Field(
        default=None,
        gt=0.0,
        lt=1.0,
        description="rescale so scripted demonstrations carry this share of the total weight (ReGuide's FT mixes "
        "demos 0.2 : rollouts 0.8); None: as they come",
    )

    failures: Literal["none", "critic", "ground_truth"] = Field(
        default="none",
        description="which autonomous steps train a policy's failure generator (failure_guidance, AFIL): those in "
        "the critic's or the simulator's failure_kinds segments; none: no failure generator",
    )
    failure_kinds: tuple[str, ...] = Field(
        default=("failure_inducing",), description="failures: the segment kinds whose policy steps count as failed"
    )
    failure_share: float = Field(
        default=0.25,
        gt=0.0,
        lt=1.0,
        description="failures: the failure steps' share of the total weight (of each batch, on average)",
    )

    shares: dict[Literal["demos", "human", "autonomous"], float] | None = Field(
        default=None,
        description="rescale so each source carries this share of the total weight (HELP's base : HITL : curated "
        "1 : 1 : 1 is {demos: 1, human: 1, autonomous: 1}); a source with no weight drops out and the rest keep "
        "their ratio. None: as they come",
    )

    @model_validator(mode="after")
    def _weighter_known(self) -> DatasetConfig:
        if self.shares is not None:
            bad = {k: v for k, v in self.shares.items() if not v >= 0.0}
            if bad or not any(self.shares.values()):
                raise ValueError(f"shares: got {self.shares}; give non-negative shares, at least one above 0")
            if self.demo_share is not None:
                raise ValueError(f"shares: got both shares {self.shares} and demo_share {self.demo_share}; give one")
        unknown = sorted(set(self.failure_kinds) - set(CRITIC_KINDS))
        if unknown or not self.failure_kinds:
            raise ValueError(f"failure_kinds: got {list(self.failure_kinds)}; choose from {', '.join(CRITIC_KINDS)}")
        if self.weighter not in WEIGHTERS:
            raise ValueError(f"weighter: got {self.weighter!r}; valid choices: {', '.join(WEIGHTERS.names())}")
        validate_nested(WEIGHTERS.get(self.weighter).config_cls, self.weighter_config, "weighter_config")
        return self


def retained_steps(store: EpisodeStore, table: StepTable, config: DatasetConfig) -> np.ndarray:
    """(n,) bool: the steps the retention rule keeps (every step of a non-autonomous actor is kept)."""
    keep = np.ones(table.n, dtype=bool)
    if config.retention == "none":
        return keep
    if config.retention == "interventions":
        return ~(table.included & table.executed)
    for row, segments in _autonomous_segments(store, table, config.retention, "retention"):
        executed = table.executed[row.start : row.stop]
        labels = retention_labels(row.length, segments, table.supervision.get(row.id, []), config.retention_config)
        keep[row.start : row.stop] = ~executed | (labels == KEEP)
    return keep


def failed_steps(store: EpisodeStore, table: StepTable, config: DatasetConfig) -> np.ndarray:
    """(n,) bool: the included policy steps inside a ``failure_kinds`` segment of ``config.failures``' source."""
    failed = np.zeros(table.n, dtype=bool)
    if config.failures == "none":
        return failed
    for row, segments in _autonomous_segments(store, table, config.failures, "failures"):
        for start, stop, kind in segments:
            if kind in config.failure_kinds:
                failed[row.start + start : row.start + stop] = True
    return failed & table.included & table.executed


def _autonomous_segments(
    store: EpisodeStore, table: StepTable, source: Literal["critic", "ground_truth"], field: str
) -> Iterator[tuple[Any, list[tuple[int, int, str]]]]:
    """(episode row, its segments from ``source``) for every included episode in which the policy acted."""
    critic: dict[int, list[tuple[int, int, str]]] = {}
    if source == "critic":
        for s in store.segments(source="critic"):
            critic.setdefault(s.episode, []).append((s.start, s.stop, s.kind))
    progress = store.read("progress") if source == "ground_truth" else None
    for row in store.episodes():
        if not table.executed[row.start : row.stop].any() or not table.included[row.start]:
            continue
        if progress is not None:
            supervision = table.supervision.get(row.id, [])
            yield row, ground_truth_segments(progress[row.start : row.stop].astype(np.float64), supervision)
        elif row.id in critic:
            yield row, critic[row.id]
        else:
            raise ValueError(
                f"{field}: episode {row.id} of {store.path} has no critic segments; label the store first "
                f"(vla-recover label) or choose {field}: ground_truth"
            )


def build_step_weights(
    store: EpisodeStore, config: DatasetConfig, episodes: Iterable[int] | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """Per stored step weights (0: never sampled) and what went into them."""
    table = build_step_table(store, episodes, config.pre_intervention_steps, config.min_intervention_steps)
    retained = retained_steps(store, table, config)
    eligible = table.included & table.chosen & retained
    weighter = build_weighter(config.weighter, config.weighter_config)
    weights = weighter.weights(table, eligible)
    if config.demo_share is not None:  # the demos' share; the rest keep their ratio among themselves
        demo_share = config.demo_share
        weights = _share_out(weights, {"demos": (table.demo, demo_share), "rest": (~table.demo, 1 - demo_share)})
    if config.shares is not None:
        sources = {"demos": table.demo, "human": table.human, "autonomous": table.executed}
        weights = _share_out(weights, {name: (sources[name], share) for name, share in config.shares.items()})
    if weights.shape != (table.n,) or not np.isfinite(weights).all() or (weights < 0).any():
        raise ValueError(f"weighter {config.weighter}: produced invalid weights (shape {weights.shape})")
    executed = table.included & table.executed
    stats = {
        "weighter": config.weighter,
        "retention": config.retention,
        "steps": int(table.included.sum()),
        "eligible_steps": int(eligible.sum()),
        "retained_autonomous_fraction": float(retained[executed].mean()) if executed.any() else None,
        "nonzero_steps": int((weights > 0).sum()),
        "mean_weight": float(weights[weights > 0].mean()) if (weights > 0).any() else 0.0,
        **weighter.stats,
    }
    return weights, stats


def _share_out(weights: np.ndarray, sources: dict[str, tuple[np.ndarray, float]]) -> np.ndarray:
    """Scale each source's weights so it carries its share of the total; a source not named gets weight 0."""
    total = float(weights.sum())
    present = {name: (mask, share) for name, (mask, share) in sources.items() if weights[mask].sum() > 0}
    out = np.zeros_like(weights)
    share_sum = sum(share for _, share in present.values())
    if total == 0 or share_sum == 0:
        return weights  # nothing named has weight: there is nothing to share out
    for mask, share in present.values():
        out[mask] = weights[mask] * (share / share_sum) * total / float(weights[mask].sum())
    return out


def with_failures(
    store: EpisodeStore, weights: np.ndarray, config: DatasetConfig, episodes: Iterable[int] | None = None
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(weights, failure (n,) bool, stats): ``weights`` with the failed steps added at ``failure_share`` of the
    total; the failure generator trains on the steps ``failure`` marks, the policy's own on the rest."""
    table = build_step_table(store, episodes, config.pre_intervention_steps, config.min_intervention_steps)
    failed = failed_steps(store, table, config)
    failed &= weights == 0  # a step the success data keeps is never also a failure
    stats = {"failures": config.failures, "failure_steps": int(failed.sum())}
    if not failed.any():
        raise ValueError(
            f"failures: no included policy step of {store.path} lies in a {list(config.failure_kinds)} segment "
            f"({config.failures}); the failure generator would have nothing to learn from"
        )
    total = float(weights.sum())
    if total == 0:
        raise ValueError("failures: the success data carries no weight; the policy's own generator has no data")
    mixed = weights * (1.0 - config.failure_share)
    mixed[failed] = total * config.failure_share / float(failed.sum())
    return mixed.astype(np.float32), failed, stats
