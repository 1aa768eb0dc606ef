"""Stored episodes as the critic sees them: its inputs, the outcome, and which rows are the robot's own timeline.

A rewind's rows replay visited states backwards, so they are left out of the timeline: step ``t`` of an episode's
timeline is its t-th row outside ``rewind`` segments. Ground-truth progress (sim only) is carried for evaluation and
never fed to the critic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from vla_recover.data import EpisodeStore

__all__ = [
    "CriticEpisode",
    "human_steps",
    "length_bin_edges",
    "load_episodes",
    "non_finite_step",
    "spearman",
    "timeline_rows",
]


@dataclass
class CriticEpisode:
    id: int
    task: str
    instruction: str
    outcome: str
    inputs: dict[str, np.ndarray]  # timeline rows only
    rows: np.ndarray  # the episode row of each timeline step
    length: int  # rows in the episode, rewinds included
    supervision: list[tuple[int, int, str]] = field(default_factory=list)
    true_progress: np.ndarray | None = None  # timeline rows only
    intervention: np.ndarray | None = None  # timeline rows only

    @property
    def steps(self) -> int:
        return int(self.rows.size)

    @property
    def success(self) -> bool:
        return self.outcome == "success"

    def on_rows(self, timeline_values: np.ndarray) -> np.ndarray:
        """One value per episode row: ``timeline_values`` (one per timeline step) at their rows, 0 on rewinds, which
        the segmenters skip."""
        full = np.zeros(self.length)
        full[self.rows] = timeline_values
        return full

    def normalised_time(self) -> np.ndarray:
        """t / (T - 1) along the timeline; 1.0 for a single step."""
        return np.linspace(0.0, 1.0, self.steps) if self.steps > 1 else np.ones(1)


def load_episodes(store: EpisodeStore, keys: tuple[str, ...], task: str | None = None) -> list[CriticEpisode]:
    """Every committed episode (of ``task``, if given) with the input ``keys``."""
    missing = [key for key in keys if key not in store.specs()]
    if missing:
        raise KeyError(f"{store.path}: no key {missing[0]!r}; keys: {', '.join(sorted(store.specs()))}")
    columns = {key: store.read(key) for key in keys}
    extra = {key: store.read(key) for key in ("progress", "intervention") if key in store.specs()}
    segments: dict[int, list[tuple[int, int, str]]] = {}
    for segment in store.segments(source="supervision"):
        segments.setdefault(segment.episode, []).append((segment.start, segment.stop, segment.kind))
    episodes = []
    for row in store.episodes(**({"task": task} if task else {})):
        supervision = segments.get(row.id, [])
        rows = timeline_rows(row.length, supervision)
        picked = row.start + rows
        episodes.append(
            CriticEpisode(
                id=row.id,
                task=row.task,
                instruction=row.instruction,
                outcome=row.outcome,
                inputs={key: column[picked] for key, column in columns.items()},
                rows=rows,
                length=row.length,
                supervision=supervision,
                true_progress=extra["progress"][picked].astype(np.float64) if "progress" in extra else None,
                intervention=extra["intervention"][picked].astype(bool) if "intervention" in extra else None,
            )
        )
    return episodes


def timeline_rows(length: int, supervision: Sequence[tuple[int, int, str]] = ()) -> np.ndarray:
    """The episode rows outside ``rewind`` segments: the robot's own timeline."""
    rewound = np.zeros(length, dtype=bool)
    for start, stop, kind in supervision:
        if kind == "rewind":
            rewound[start:stop] = True
    return np.flatnonzero(~rewound)


def human_steps(length: int, supervision: Sequence[tuple[int, int, str]] = ()) -> np.ndarray:
    """Per timeline step (`timeline_rows`): inside an ``intervention`` supervision segment (a human in control)."""
    human = np.zeros(length, dtype=bool)
    for start, stop, kind in supervision:
        if kind == "intervention":
            human[start:stop] = True
    return human[timeline_rows(length, supervision)]


def length_bin_edges(lengths: np.ndarray, bins: int) -> np.ndarray:
    """Quantile edges that cut these episode lengths into ``bins`` bins; ``searchsorted(edges, n, "right")`` is n's
    bin."""
    if bins <= 1:
        return np.array([])
    return np.unique(np.quantile(np.asarray(lengths), np.linspace(0, 1, bins + 1)[1:-1]))


def non_finite_step(values: np.ndarray) -> int | None:
    """The first step (row) holding NaN or Inf, or None; integer arrays have none."""
    if not np.issubdtype(values.dtype, np.floating):
        return None
    bad = np.flatnonzero(~np.isfinite(values.reshape(len(values), -1)).all(axis=1))
    return int(bad[0]) if bad.size else None


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks with ties averaged."""
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.arange(values.size, dtype=np.float64)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation; NaN when either side is constant."""
    ra, rb = _ranks(np.asarray(a, np.float64)), _ranks(np.asarray(b, np.float64))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])
