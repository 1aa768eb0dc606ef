"""EgoRecovery's recovery gate: from what the robot observes, the probability that it needs correction now.

An MLP over the state and its change since the previous step, trained with class-balanced logistic loss on the
policy rows the fleet's failure records label (``vla_recover.recovery.labels``). The gate raises its verdict when
its probability, averaged over the last ``smooth_steps`` steps of the branch, reaches ``threshold``. Where the
paper is silent, the choices: the threshold is picked on a share of the training episodes held back from the fit
(the one with the most recall among those whose alerts reach ``target_precision`` there); the gate sees
the state and its change (a slip and a push show as motion the nominal behaviour does not make) but no image.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pydantic import Field
from safetensors.torch import load_file, save_file
from torch.nn import functional as F

from vla_recover.config import FrozenConfig, read_saved_meta, write_saved_meta
from vla_recover.critic.values import ValueNet, ValueTrainConfig, fit_value
from vla_recover.data import EpisodeStore
from vla_recover.recovery.detection import DetectorScore, branch_alerts, score_detector
from vla_recover.recovery.labels import NEEDS_CORRECTION, UNLABELLED, correction_labels

__all__ = ["GATE_SCHEMA", "GateConfig", "RecoveryGate", "gate_features", "train_gate"]

GATE_SCHEMA = 1
_CONFIG, _WEIGHTS = "gate.json", "gate.safetensors"


class GateConfig(FrozenConfig):
    """What the recovery gate sees, how it is trained, and when it raises its verdict."""

    state_key: str = Field(default="obs.state", description="the recorded state the gate reads")
    use_delta: bool = Field(default=True, description="also read the state's change since the previous step")
    fit: ValueTrainConfig = Field(
        default=ValueTrainConfig(steps=2000), description="training of the gate's network (logistic loss)"
    )
    balance: bool = Field(
        default=True, description="weigh the rare needs-correction rows up to the others' total (pos_weight)"
    )
    smooth_steps: int = Field(default=3, ge=1, le=100, description="steps the probability is averaged over")
    threshold: float | None = Field(
        default=None,
        gt=0.0,
        lt=1.0,
        description="verdict when the averaged probability reaches this; None: picked on the held-back episodes",
    )
    target_precision: float = Field(
        default=0.7, gt=0.0, le=1.0, description="threshold: None picks the most recall at this alert precision"
    )
    validation_share: float = Field(
        default=0.25, gt=0.0, lt=1.0, description="share of the training episodes held back to pick the threshold"
    )
    lead_s: float = Field(
        default=0.5, ge=0.0, description="an alert this long before the simulator flags a failure still counts"
    )
    seed: int = Field(default=0, ge=0, description="seed of the episode split")


class RecoveryGate:
    """The trained gate: its network, its config and the threshold it raises its verdict at."""

    def __init__(self, net: ValueNet, config: GateConfig, threshold: float, metrics: dict[str, Any]) -> None:
        self.net, self.config, self.threshold, self.metrics = net.eval(), config, threshold, metrics

    # -- rating -----------------------------------------------------------------------------------------------------
    def probability(self, states: np.ndarray, previous: np.ndarray) -> np.ndarray:
        """P(needs correction) (n,) for states (n, D) and the states one step before them."""
        features = gate_features(states, previous, self.config.use_delta)
        return torch.sigmoid(torch.as_tensor(self.net.predict(features))).numpy()

    def store_probability(self, store: EpisodeStore) -> np.ndarray:
        """The probability at every stored row (the previous row within its episode as the step before)."""
        return self.probability(*_stored_states(store, self.config.state_key))

    def raised(self, branch: list[float], threshold: float | None = None) -> bool:
        """The verdict on a branch's probabilities so far."""
        recent = branch[-self.config.smooth_steps :]
        return bool(recent) and float(np.mean(recent)) >= (self.threshold if threshold is None else threshold)

    def verdicts(
        self, store: EpisodeStore, probability: np.ndarray | None = None, threshold: float | None = None
    ) -> np.ndarray:
        """(n_steps,) bool: the verdict at every policy row, along each episode's branches."""
        probability = self.store_probability(store) if probability is None else probability
        actor = store.read("actor")
        out = np.zeros(store.n_steps, dtype=bool)
        for row in store.episodes():
            span = slice(row.start, row.stop)
            out[span] = branch_alerts(probability[span], actor[span], lambda b: self.raised(b, threshold))
        return out

    def score(self, store: EpisodeStore, episodes: Iterable[int] | None = None) -> DetectorScore:
        return score_detector(store, self.verdicts(store), episodes, self.config.lead_s)

    # -- persistence ------------------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        directory = Path(directory)
        meta = {
            "kind": "recovery_gate",
            "config": self.config.model_dump(mode="json"),
            "input_dim": int(self.net.mean.shape[0]),
            "hidden": [m.out_features for m in self.net.net if isinstance(m, torch.nn.Linear)][:-1],
            "threshold": self.threshold,
            "metrics": self.metrics,
        }
        write_saved_meta(directory, _CONFIG, GATE_SCHEMA, meta)
        save_file({k: v.contiguous() for k, v in self.net.state_dict().items()}, str(directory / _WEIGHTS))
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> RecoveryGate:
        directory = Path(directory)
        meta = read_saved_meta(directory, _CONFIG, GATE_SCHEMA, "recovery gate")
        config = GateConfig.model_validate(meta["config"])
        net = ValueNet(np.zeros((2, meta["input_dim"]), np.float32), tuple(meta["hidden"]))
        net.load_state_dict(load_file(str(directory / _WEIGHTS)), strict=True)
        return cls(net, config, float(meta["threshold"]), meta.get("metrics", {}))


def train_gate(
    store: EpisodeStore, episodes: Iterable[int] | None = None, config: GateConfig | None = None
) -> RecoveryGate:
    """Train on the labelled policy rows of ``episodes`` (default: every episode with failure records)."""
    config = config or GateConfig()
    labels = correction_labels(store, episodes)
    labelled_episodes = sorted({row.id for row in store.episodes() if (labels[row.start : row.stop] >= 0).any()})
    if not (labels == NEEDS_CORRECTION).any() or not (labels == 0).any():
        raise ValueError(
            f"recovery gate: {store.path} has {int((labels == NEEDS_CORRECTION).sum())} rows needing correction and "
            f"{int((labels == 0).sum())} fine ones in the chosen episodes; it needs fleet episodes with both"
        )
    held_back = _held_back(labelled_episodes, config) if config.threshold is None else set()
    rows = store.episodes()
    fit_mask = np.zeros(store.n_steps, dtype=bool)
    for row in rows:
        if row.id in labelled_episodes and row.id not in held_back:
            fit_mask[row.start : row.stop] = True
    fit_rows = np.flatnonzero(fit_mask & (labels != UNLABELLED))
    features = gate_features(*_stored_states(store, config.state_key), config.use_delta)
    target = torch.as_tensor(labels[fit_rows] == NEEDS_CORRECTION, dtype=torch.float32)
    positives = float(target.sum())
    weight = torch.tensor((len(target) - positives) / max(positives, 1.0)) if config.balance else None

    def loss(logits: torch.Tensor, batch: np.ndarray, _: ValueNet) -> torch.Tensor:
        return F.binary_cross_entropy_with_logits(logits, target[batch], pos_weight=weight)

    net = fit_value(features[fit_rows], loss, config.fit)
    gate = RecoveryGate(net, config, config.threshold or 0.5, {})
    metrics: dict[str, Any] = {
        "fit_episodes": len(labelled_episodes) - len(held_back),
        "fit_rows": len(fit_rows),
        "fit_needs_correction": int(positives),
    }
    if held_back:
        gate.threshold, metrics["threshold_choice"] = _pick_threshold(gate, store, held_back)
    gate.metrics = {**metrics, "threshold": gate.threshold}
    return gate


def gate_features(states: np.ndarray, previous: np.ndarray, use_delta: bool) -> np.ndarray:
    """What the gate reads: the state, and with ``use_delta`` its change since the step before."""
    states = np.asarray(states, dtype=np.float32)
    if not use_delta:
        return states
    return np.concatenate([states, states - np.asarray(previous, dtype=np.float32)], axis=-1)


def _stored_states(store: EpisodeStore, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(every stored row's state, the state of the row before it in its episode; its own at an episode's start)."""
    states = store.read(key).astype(np.float32)
    previous = np.empty_like(states)
    previous[1:] = states[:-1]
    for row in store.episodes():
        previous[row.start] = states[row.start]
    return states, previous


def _held_back(episodes: list[int], config: GateConfig) -> set[int]:
    rng = np.random.default_rng(config.seed)
    count = max(1, round(len(episodes) * config.validation_share))
    if count >= len(episodes):
        raise ValueError(f"recovery gate: {len(episodes)} labelled episodes; too few to hold some back")
    return {int(e) for e in rng.choice(episodes, size=count, replace=False)}


def _pick_threshold(gate: RecoveryGate, store: EpisodeStore, held_back: set[int]) -> tuple[float, dict[str, Any]]:
    """The threshold with the most recall among those whose alerts reach the target precision on the held-back
    episodes (the highest such on a tie: fewer alerts for the same failures found); if none does, the most
    precise."""
    probability = gate.store_probability(store)
    scores = {}
    for threshold in np.round(np.linspace(0.05, 0.95, 19), 2):
        verdicts = gate.verdicts(store, probability, float(threshold))
        scores[float(threshold)] = score_detector(store, verdicts, held_back, gate.config.lead_s)
    precise = [t for t, s in scores.items() if (s.precision or 0.0) >= gate.config.target_precision]
    if precise:
        chosen = max(precise, key=lambda t: (scores[t].recall or 0.0, t))
    else:
        chosen = max(scores, key=lambda t: (scores[t].precision or 0.0, scores[t].recall or 0.0))
    return chosen, {"held_back_episodes": len(held_back), **scores[chosen].as_json()}
