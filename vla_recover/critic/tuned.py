"""A segmenter tuned against simulator ground truth: a random forest over features of one critic's progress curve.

The rule segmenters (`vla_recover.critic.segmenter`) have a handful of thresholds; tuning them on a sim fleet's
ground truth moves macro-F1 by little, since a critic's curve errs in ways no single slope or dead band separates
from the truth's small moves. The tuned segmenter learns that mapping instead: every timeline step (rewinds left
out) is described by its curve smoothed at several widths, the rise over the steps before it and after it at
several spans, how far it lies below the best reached earlier and below the best still to come, whether a human
is in control and for how long, and how still the robot and the objects were around it (`StateMotion`: the largest
change of their state entries within a few spans); a random forest (scikit-learn), fit on a fleet store whose
episodes carry the simulator's progress, names the step's kind. The stillness tells a pause from a slow move,
which the curve alone blurs. Nothing in the features says how long the episode is or where in it the step lies, so
the length control of the benchmark holds.

A tuned segmenter belongs to the critic whose curves it was fit on: it is saved in the critic's directory
(``tuned_segmenter.json`` and ``.safetensors``, trees as plain arrays, loaded without unpickling) and removed when a
critic is saved over it. ``vla-recover critic tune`` makes one.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from vla_recover.config import FrozenConfig
from vla_recover.critic.segmenter import CRITIC_KINDS
from vla_recover.curves import best_before, smoothed

__all__ = [
    "TUNED_FILES",
    "StateMotion",
    "TuneConfig",
    "TunedSegmenter",
    "curve_features",
    "fit_tuned_segmenter",
    "step_features",
]

TUNED_SCHEMA = 2  # 2: the state's motion among the features
TUNED_FILES = ("tuned_segmenter.json", "tuned_segmenter.safetensors")
SMOOTHING_WIDTHS = (1, 3, 5, 9)
RISE_SPANS = (2, 5, 10, 20)
STILLNESS_SPANS = (1, 6, 24)  # the largest change within this many steps of a step


class TuneConfig(FrozenConfig):
    trees: int = Field(default=100, ge=1, le=2000, description="trees in the forest")
    min_leaf_steps: int = Field(default=10, ge=1, description="steps in a leaf at least: larger is smoother")
    balance_kinds: bool = Field(default=True, description="weigh kinds equally, as macro-F1 does")
    state_motion: bool = Field(default=True, description="describe steps by how still the critic's state was, too")
    seed: int = Field(default=0, ge=0, description="the forest's random state")


def _shifted(values: np.ndarray, span: int) -> np.ndarray:
    """``values`` ``span`` steps later (earlier for a negative span), the ends repeated."""
    return values[np.clip(np.arange(len(values)) + span, 0, len(values) - 1)]


@dataclass(frozen=True)
class StateMotion:
    """How still the critic's state input was around each step: what the tuned segmenter sees beside the curve.

    For the robot's entries and the objects' (the first ``robot_entries`` and the rest; the whole state as one part
    when the split is unknown) and each of ``STILLNESS_SPANS``, the largest change of any entry within that many
    steps before or after the step. A few numbers, not the state itself: enough to tell a pause from a slow move,
    too little to learn the task's progress without the curve (the benchmark reports the segmenter without it)."""

    key: str
    width: int
    robot_entries: int = 0

    @property
    def parts(self) -> tuple[slice, ...]:
        if 0 < self.robot_entries < self.width:
            return slice(0, self.robot_entries), slice(self.robot_entries, self.width)
        return (slice(0, self.width),)

    @property
    def feature_count(self) -> int:
        return len(self.parts) * len(STILLNESS_SPANS)

    def features(self, state: np.ndarray) -> np.ndarray:
        """(steps, feature_count) for one timeline's ``state`` (steps, width)."""
        state = np.asarray(state, dtype=np.float64)
        if state.ndim != 2 or state.shape[1] != self.width:
            raise ValueError(f"{self.key}: expected (steps, {self.width}) for the tuned segmenter, got {state.shape}")
        columns = []
        for part in self.parts:
            values = state[:, part]
            for span in STILLNESS_SPANS:
                before = np.abs(values - _shifted(values, -span)).max(axis=1)
                after = np.abs(_shifted(values, span) - values).max(axis=1)
                columns.append(np.maximum(before, after))
        return np.stack(columns, axis=1)

    def to_meta(self) -> dict[str, Any]:
        return {"key": self.key, "width": self.width, "robot_entries": self.robot_entries}

    @classmethod
    def from_meta(cls, meta: dict[str, Any] | None) -> StateMotion | None:
        if meta is None:
            return None
        return cls(str(meta["key"]), int(meta["width"]), int(meta["robot_entries"]))


def curve_features(curve: np.ndarray, human: np.ndarray) -> np.ndarray:
    """(steps, features) for one timeline: ``curve`` the critic's progress, ``human`` whether a human had control."""
    curve = np.asarray(curve, dtype=np.float64)
    n = curve.size
    index = np.arange(n)
    columns = []
    for width in SMOOTHING_WIDTHS:
        at_width = smoothed(curve, width, causal=False)
        columns.append(at_width)
        for span in RISE_SPANS:
            columns.append(at_width - at_width[np.clip(index - span, 0, n - 1)])  # the rise just done
            columns.append(at_width[np.clip(index + span, 0, n - 1)] - at_width)  # the rise to come
        columns.append(at_width - np.maximum(best_before(at_width), at_width.min()))  # below the best so far
    columns.append(np.maximum.accumulate(curve[::-1])[::-1] - curve)  # below the best still to come
    human = np.asarray(human, dtype=bool)
    columns.append(human.astype(np.float64))
    in_control = np.zeros(n)
    run = 0
    for t in range(n):
        run = run + 1 if human[t] else 0
        in_control[t] = run
    columns.append(in_control)
    return np.stack(columns, axis=1).astype(np.float32)  # the forest splits on float32, as scikit-learn's trees do


CURVE_FEATURES = curve_features(np.zeros(1), np.zeros(1, dtype=bool)).shape[1]


def step_features(
    curve: np.ndarray, human: np.ndarray, motion: StateMotion | None = None, state: np.ndarray | None = None
) -> np.ndarray:
    """What the tuned segmenter sees of each timeline step: `curve_features`, then ``motion``'s of ``state``."""
    features = curve_features(curve, human)
    if motion is None:
        return features
    if state is None:
        raise ValueError(f"this tuned segmenter reads how still {motion.key!r} was: pass the episode's {motion.key}")
    if len(state) != len(curve):
        raise ValueError(f"{motion.key}: {len(state)} steps for a curve of {len(curve)}")
    return np.concatenate([features, motion.features(state).astype(np.float32)], axis=1)


class TunedSegmenter:
    """A forest of decision trees as flat arrays; ``roots[i]`` is tree i's first node, ``left``/``right`` are
    absolute node indices (-1 at a leaf), ``value`` the leaf's share of each kind."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        self.arrays, self.meta = arrays, meta
        self.motion = StateMotion.from_meta(meta.get("state_motion"))

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """(steps, kinds): the mean over trees of each step's leaf shares."""
        a = self.arrays
        steps = features.shape[0]
        node = np.repeat(a["roots"][None, :], steps, axis=0)  # (steps, trees)
        rows = np.arange(steps)[:, None]
        while True:
            inner = a["left"][node] >= 0
            if not inner.any():
                break
            go_left = features[rows, np.maximum(a["feature"][node], 0)] <= a["threshold"][node]
            node = np.where(inner, np.where(go_left, a["left"][node], a["right"][node]), node)
        return a["value"][node].mean(axis=1)

    def step_kinds(self, curve: np.ndarray, human: np.ndarray, state: np.ndarray | None = None) -> list[str]:
        """The kind of every timeline step; ``state``: the critic's state input along the timeline, which a
        segmenter tuned with `StateMotion` needs."""
        choice = self.probabilities(step_features(curve, human, self.motion, state)).argmax(axis=1)
        return [CRITIC_KINDS[k] for k in choice]

    def save(self, directory: str | Path) -> None:
        from safetensors.numpy import save_file

        directory = Path(directory)
        save_file(self.arrays, str(directory / TUNED_FILES[1]))
        meta = {"kind": "tuned_segmenter", "schema_version": TUNED_SCHEMA, **self.meta}
        (directory / TUNED_FILES[0]).write_text(json.dumps(meta, indent=2))

    @classmethod
    def load(cls, directory: str | Path) -> TunedSegmenter | None:
        """The tuned segmenter saved in a critic's directory; None when it has none."""
        from safetensors.numpy import load_file

        from vla_recover.policies.common.checkpoint import read_checkpoint_config

        directory = Path(directory)
        meta_path, arrays_path = (directory / name for name in TUNED_FILES)
        if not meta_path.is_file():
            return None
        meta = read_checkpoint_config(meta_path)
        if meta.get("kind") != "tuned_segmenter" or meta.get("schema_version") != TUNED_SCHEMA:
            raise ValueError(
                f"{meta_path}: kind {meta.get('kind')!r} schema {meta.get('schema_version')}; "
                f"this vla_recover reads tuned_segmenter schema {TUNED_SCHEMA}; tune the segmenter again"
            )
        if not arrays_path.is_file():
            raise FileNotFoundError(f"{arrays_path}: missing beside {meta_path.name}; tune the segmenter again")
        try:
            motion = StateMotion.from_meta(meta.get("state_motion"))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{meta_path}: state_motion {meta.get('state_motion')!r} is not a key, width and robot_entries "
                f"({exc}); tune the segmenter again"
            ) from exc
        arrays = load_file(str(arrays_path))
        problem = _forest_problem(arrays, CURVE_FEATURES + (motion.feature_count if motion else 0))
        if problem:
            raise ValueError(
                f"{arrays_path}: not a forest this vla_recover can walk: {problem}; tune the segmenter again"
            )
        return cls(arrays, {k: v for k, v in meta.items() if k not in ("kind", "schema_version")})


def _forest_problem(arrays: dict[str, np.ndarray], features: int) -> str | None:
    """What is wrong with a loaded forest's arrays, or None. Children lie after their parent, as scikit-learn
    numbers them, so every walk ends at a leaf."""
    expected = {"roots", "feature", "threshold", "left", "right", "value"}
    if set(arrays) != expected:
        return f"arrays {sorted(arrays)}, expected {sorted(expected)}"
    nodes = arrays["left"].shape[0] if arrays["left"].ndim == 1 else -1
    if nodes < 1 or any(arrays[k].shape != (nodes,) for k in ("feature", "threshold", "left", "right")):
        return "feature, threshold, left and right must be 1-D arrays of one length (the nodes)"
    if arrays["value"].shape != (nodes, len(CRITIC_KINDS)) or arrays["roots"].ndim != 1 or not arrays["roots"].size:
        return f"value must be (nodes, {len(CRITIC_KINDS)}) and roots a non-empty 1-D array"
    index, leaf = np.arange(nodes), arrays["left"] < 0
    inner_ok = (arrays["left"] > index) & (arrays["right"] > index) & (arrays["right"] < nodes)
    inner_ok &= (arrays["left"] < nodes) & (arrays["feature"] >= 0) & (arrays["feature"] < features)
    if not np.all(np.where(leaf, arrays["right"] < 0, inner_ok)):
        return "a node's children or feature are out of range"
    if np.any((arrays["roots"] < 0) | (arrays["roots"] >= nodes)):
        return "a root is out of range"
    return None


def fit_tuned_segmenter(
    features: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    config: TuneConfig | None = None,
    motion: StateMotion | None = None,
) -> TunedSegmenter:
    """Fit the forest on per-timeline ``features`` (`step_features` with ``motion``) and kind indices (-1: unscored,
    left out)."""
    try:
        from sklearn.ensemble import RandomForestClassifier
    except ImportError as exc:  # a declared dependency; only a broken install lacks it
        raise ImportError("tuning the segmenter needs scikit-learn: pip install scikit-learn") from exc

    config = config or TuneConfig()
    x = np.concatenate(features)
    y = np.concatenate(labels).astype(np.int64)
    scored = y >= 0
    x, y = x[scored], y[scored]
    if y.size == 0:
        raise ValueError("labels: no scored step to tune on")
    forest = RandomForestClassifier(
        n_estimators=config.trees,
        min_samples_leaf=config.min_leaf_steps,
        class_weight="balanced" if config.balance_kinds else None,
        random_state=config.seed,
        n_jobs=1,
    ).fit(x, y)
    roots, feature, threshold, left, right, value = [], [], [], [], [], []
    offset = 0
    for tree in (estimator.tree_ for estimator in forest.estimators_):
        roots.append(offset)
        leaf = tree.children_left < 0
        feature.append(np.where(leaf, -1, tree.feature))
        threshold.append(tree.threshold)
        left.append(np.where(leaf, -1, tree.children_left + offset))
        right.append(np.where(leaf, -1, tree.children_right + offset))
        shares = np.zeros((tree.node_count, len(CRITIC_KINDS)))
        counts = tree.value[:, 0, :]
        shares[:, forest.classes_] = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1e-12)
        value.append(shares)
        offset += tree.node_count
    arrays = {
        "roots": np.asarray(roots, dtype=np.int64),
        "feature": np.concatenate(feature).astype(np.int64),
        "threshold": np.concatenate(threshold).astype(np.float64),
        "left": np.concatenate(left).astype(np.int64),
        "right": np.concatenate(right).astype(np.int64),
        "value": np.concatenate(value).astype(np.float32),
    }
    meta = {
        "config": config.model_dump(mode="json"), "steps": int(y.size), "nodes": int(offset),
        "state_motion": motion.to_meta() if motion else None,
    }  # fmt: skip
    return TunedSegmenter(arrays, meta)
