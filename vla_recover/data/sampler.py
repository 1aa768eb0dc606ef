"""Training windows from the store: (observation history, action chunk) pairs with per-step weights.

A window anchored at step t of an episode holds observations t-To+1 … t and actions t … t+H-1, as diffusion_policy
and LeRobot build them, within what the robot actually went through and what one controller chose:

- the observation history starts at the episode's first row or at the first row after a rewind (the robot jumped
  back: the fleet starts a policy's history afresh there too), and runs on through hand-backs, as the fleet's does;
- the action targets end (repeated and marked in ``action_is_pad``) at the last row of the anchor's controller: the
  first row another actor chose, or a row no one chose (a hold, a rewind row). ``cross_boundary_targets`` lets them
  run on across controllers (a human's correction into the policy's steps after it), still never into a hold or a
  rewind row, and always within the episode.

Rows no one chose (actor ``hold`` or ``rewind``, and rows under a ``rewind`` segment in stores written before those
actors existed) never anchor a window.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_recover.data.schema import ACTORS, OUTCOMES, SEGMENT_KINDS, UNCHOSEN_ACTORS
from vla_recover.data.store import EpisodeStore

__all__ = ["WindowSampler", "WindowSpec"]


@dataclass(frozen=True)
class WindowSpec:
    obs_keys: tuple[str, ...] = ("obs.state",)
    obs_horizon: int = 2
    action_horizon: int = 16
    action_key: str = "action"
    cross_boundary_targets: bool = False  # targets may run on into another controller's rows (module docstring)

    def __post_init__(self) -> None:
        if self.obs_horizon < 1 or self.action_horizon < 1:
            raise ValueError(
                f"obs_horizon and action_horizon must be >= 1, got {self.obs_horizon}, {self.action_horizon}"
            )


class WindowSampler:
    """Index of the steps that may anchor a window, and batched gathering of those windows.

    Filters: ``outcomes`` (episode outcome), ``actors`` (who acted at the anchor step), ``segment_kinds`` (the anchor
    lies in a segment of one of these kinds, from ``segment_source`` if given). ``step_weights`` (one per stored
    step) is attached to each window; steps of weight 0 are never anchors. Stores up to ``cache_bytes`` are read
    into memory once; larger ones are read from zarr per batch.
    """

    def __init__(
        self,
        store: EpisodeStore,
        spec: WindowSpec | None = None,
        outcomes: Iterable[str] | None = None,
        actors: Iterable[str] | None = None,
        segment_kinds: Iterable[str] | None = None,
        segment_source: str | None = None,
        step_weights: np.ndarray | None = None,
        cache_bytes: int = 4 << 30,
        seed: int = 0,
    ) -> None:
        self.store = store
        self.spec = spec or WindowSpec()
        keys = store.specs()
        for key in (*self.spec.obs_keys, self.spec.action_key):
            if key not in keys:
                raise KeyError(f"window key {key!r} is not in the store; keys: {', '.join(sorted(keys))}")
        self.n_steps = store.n_steps
        self.rng = np.random.default_rng(seed)
        self._episode_start = np.zeros(self.n_steps, dtype=np.int64)
        self._episode_id = np.full(self.n_steps, -1, dtype=np.int64)
        allowed = np.zeros(self.n_steps, dtype=bool)
        outcome_set = _checked(outcomes, OUTCOMES, "outcome")
        for row in store.episodes():
            self._episode_start[row.start : row.stop] = row.start
            self._episode_id[row.start : row.stop] = row.id
            if outcome_set is None or row.outcome in outcome_set:
                allowed[row.start : row.stop] = True
        actor = store.read("actor") if self.n_steps else np.zeros(0, dtype=np.uint8)
        rewind = _rewind_rows(store, actor)
        unchosen = rewind | np.isin(actor, [ACTORS.index(a) for a in UNCHOSEN_ACTORS])
        allowed &= ~unchosen
        self._history_first = _history_first(self._episode_start, rewind)
        controller = unchosen.astype(np.int64) if self.spec.cross_boundary_targets else actor.astype(np.int64)
        controller[rewind] = len(ACTORS)  # a rewind row of an older store (actor human) ends a human's targets too
        self._target_last = _run_last(controller, self._episode_start)
        actor_set = _checked(actors, ACTORS, "actor")
        if actor_set is not None:
            codes = [ACTORS.index(a) for a in actor_set]
            allowed &= np.isin(actor, codes)
        kind_set = _checked(segment_kinds, SEGMENT_KINDS, "segment kind")
        if kind_set is not None:
            in_segment = np.zeros(self.n_steps, dtype=bool)
            starts = {row.id: row.start for row in store.episodes()}
            for segment in store.segments(source=segment_source):
                if segment.kind in kind_set and segment.episode in starts:
                    base = starts[segment.episode]
                    in_segment[base + segment.start : base + segment.stop] = True
            allowed &= in_segment
        self.weights: np.ndarray
        if step_weights is None:
            self.weights = np.ones(self.n_steps, dtype=np.float32)
        else:
            step_weights = np.asarray(step_weights, dtype=np.float32)
            if step_weights.shape != (self.n_steps,):
                raise ValueError(f"step_weights: expected shape ({self.n_steps},), got {step_weights.shape}")
            self.weights = step_weights
            allowed &= step_weights > 0
        self.anchors = np.flatnonzero(allowed)
        self._cache: dict[str, np.ndarray] = {}
        needed = (*self.spec.obs_keys, self.spec.action_key)
        total = sum(int(np.prod(keys[k].shape)) * np.dtype(keys[k].dtype).itemsize * self.n_steps for k in needed)
        if total <= cache_bytes:
            self._cache = {k: store.read(k) for k in needed}

    def __len__(self) -> int:
        return int(self.anchors.shape[0])

    def __getitem__(self, i: int) -> dict[str, Any]:
        batch = self.gather(self.anchors[[i]])
        return {k: v[0] for k, v in batch.items()}

    def episode_of(self, index: np.ndarray) -> np.ndarray:
        """Episode ids of global step indices."""
        return self._episode_id[index]

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        if len(self) == 0:
            raise ValueError("no step passes the sampler's filters: nothing to sample")
        return self.gather(self.rng.choice(self.anchors, size=batch_size))

    def gather(self, anchors: np.ndarray) -> dict[str, np.ndarray]:
        """Windows anchored at global step indices ``anchors`` (B,)."""
        spec = self.spec
        first, last = self._history_first[anchors, None], self._target_last[anchors, None]
        obs_index = np.clip(anchors[:, None] + np.arange(-spec.obs_horizon + 1, 1), first, anchors[:, None])  # (B, To)
        raw_action_index = anchors[:, None] + np.arange(spec.action_horizon)  # (B, H)
        action_index = np.minimum(raw_action_index, last)
        batch = {key: self._take(key, obs_index) for key in spec.obs_keys}
        batch[spec.action_key] = self._take(spec.action_key, action_index)
        batch["action_is_pad"] = raw_action_index > last
        batch["weight"] = self.weights[anchors]
        batch["episode"] = self._episode_id[anchors]
        batch["index"] = anchors
        return batch

    def _take(self, key: str, index: np.ndarray) -> np.ndarray:
        cached = self._cache.get(key)
        if cached is not None:
            return cached[index]
        flat = index.reshape(-1)
        unique, inverse = np.unique(flat, return_inverse=True)
        rows = self.store._fresh_array(key, self.n_steps).get_orthogonal_selection((unique,))
        return np.asarray(rows)[inverse].reshape(*index.shape, *rows.shape[1:])


def _rewind_rows(store: EpisodeStore, actor: np.ndarray) -> np.ndarray:
    """(N,) bool: rows recorded going back through a rewind (actor ``rewind``, or under a ``rewind`` segment)."""
    rewind = actor == ACTORS.index("rewind")
    starts = {row.id: row.start for row in store.episodes()}
    for segment in store.segments(source="supervision"):
        if segment.kind == "rewind" and segment.episode in starts:
            base = starts[segment.episode]
            rewind[base + segment.start : base + segment.stop] = True
    return rewind


def _history_first(episode_start: np.ndarray, rewind: np.ndarray) -> np.ndarray:
    """(N,) the first row a window's observation history may reach: the episode's first row or the row after the
    latest rewind row before it."""
    index = np.arange(rewind.shape[0])
    latest_rewind = np.maximum.accumulate(np.where(rewind, index, -1)) if rewind.size else index
    return np.minimum(np.maximum(episode_start, latest_rewind + 1), index)


def _run_last(label: np.ndarray, episode_start: np.ndarray) -> np.ndarray:
    """(N,) the last row of each row's run: consecutive rows of one episode with the same ``label``."""
    n = label.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    new_run = np.ones(n, dtype=bool)
    new_run[1:] = (label[1:] != label[:-1]) | (episode_start[1:] != episode_start[:-1])
    run = np.cumsum(new_run) - 1
    last = np.zeros(int(run[-1]) + 1, dtype=np.int64)
    np.maximum.at(last, run, np.arange(n))
    return last[run]


def _checked(values: Iterable[str] | None, valid: tuple[str, ...], what: str) -> set[str] | None:
    if values is None:
        return None
    chosen = set(values)
    unknown = sorted(chosen - set(valid))
    if unknown:
        raise ValueError(f"{what}: got {unknown}; valid choices: {', '.join(valid)}")
    return chosen
