"""Every stored step with what the weighters need to know about it: who acted, what followed, how it ended.

A fleet episode is one robot's whole attempt: autonomous stretches, rewinds (the visited states recorded in reverse
with zero actions), holds no one chose and human corrections. Only the policy's, a human's and a demonstrator's
rows are ``chosen``: holds and rewind rows teach nothing (stores written before the ``hold`` and ``rewind`` actors
existed recorded rewinds as ``human`` rows, which the ``rewind`` segments still mark). The *trajectory* a step
belongs to is what actually followed it: the next row, unless that row starts a rewind, in which case the branch was
abandoned and the step has no successor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from vla_recover.data import EpisodeStore
from vla_recover.data.schema import ACTORS

__all__ = ["StepTable", "build_step_table", "trajectory_steps_to_go"]

_POLICY = (ACTORS.index("policy"), ACTORS.index("guided"))
_HUMAN = ACTORS.index("human")
_SCRIPTED = ACTORS.index("scripted")

UNLABELLED, FAILED, SUCCEEDED = -1, 0, 1


@dataclass(frozen=True)
class StepTable:
    """Per stored step (arrays of length ``n``), in the store's global step order."""

    episode: np.ndarray  # episode id
    included: np.ndarray  # the step's episode is part of this training set
    rewind: np.ndarray  # a recorded rewind row (zero action, no training signal)
    executed: np.ndarray  # the policy (or guided policy) chose this action
    human: np.ndarray  # a teleoperator chose this action
    demo: np.ndarray  # a scripted demonstrator chose this action
    pre_intervention: np.ndarray  # an executed step in the window before a takeover
    successor: np.ndarray  # global index of the next step on the same trajectory, -1 at an end
    terminal_success: np.ndarray  # the last row of a successful episode
    episode_success: np.ndarray  # the step's episode succeeded
    outcome_label: np.ndarray  # executed steps: 1/0 outcome when it may reach them, else -1
    state: np.ndarray  # obs.state (n, D) float32
    progress: np.ndarray  # the simulator's ground-truth progress, NaN where unknown (a real robot, an import)
    supervision: dict[int, list[tuple[int, int, str]]]  # episode id → its supervision segments (episode rows)

    @property
    def n(self) -> int:
        return int(self.episode.shape[0])

    @property
    def chosen(self) -> np.ndarray:
        """Someone chose this row's action for its observation: the only rows a method may imitate."""
        return self.executed | self.human | self.demo


def build_step_table(
    store: EpisodeStore,
    episodes: Iterable[int] | None = None,
    pre_intervention_steps: int = 15,
    min_intervention_steps: int = 10,
    state_key: str = "obs.state",
) -> StepTable:
    """The table for ``store``; only ``episodes`` (ids) are marked included when given.

    Intervention-aware credit: in an episode with an intervention of at least ``min_intervention_steps`` human
    steps, only the executed steps after the last such intervention carry the episode outcome; earlier executed
    steps are unlabelled (the human, not the policy, decided how that episode ended).
    """
    if state_key not in store.specs():
        raise KeyError(f"state_key: {state_key!r} is not in store {store.path}")
    n = store.n_steps
    actor = store.read("actor")
    rows = store.episodes()
    wanted = None if episodes is None else set(episodes)
    if wanted is not None:
        unknown = sorted(wanted - {r.id for r in rows})
        if unknown:
            raise ValueError(f"episodes: ids {unknown[:10]} are not in store {store.path}")
    episode = np.full(n, -1, dtype=np.int64)
    included = np.zeros(n, dtype=bool)
    rewind = np.zeros(n, dtype=bool)
    pre = np.zeros(n, dtype=bool)
    successor = np.full(n, -1, dtype=np.int64)
    terminal_success = np.zeros(n, dtype=bool)
    episode_success = np.zeros(n, dtype=bool)
    label = np.full(n, UNLABELLED, dtype=np.int8)
    executed = np.isin(actor, _POLICY)
    human_actor = actor == _HUMAN
    segments_by_episode: dict[int, list[tuple[int, int, str]]] = {}
    for segment in store.segments(source="supervision"):
        segments_by_episode.setdefault(segment.episode, []).append((segment.start, segment.stop, segment.kind))
    for row in rows:
        lo, hi = row.start, row.stop
        episode[lo:hi] = row.id
        included[lo:hi] = wanted is None or row.id in wanted
        success = row.outcome == "success"
        episode_success[lo:hi] = success
        segments = segments_by_episode.get(row.id, [])
        for start, stop, kind in segments:
            if kind == "rewind":
                rewind[lo + start : lo + stop] = True
        successor[lo : hi - 1] = np.arange(lo + 1, hi)
        successor[hi - 1] = -1
        # a step followed by a rewind row ended its branch; rewind rows lead nowhere either
        ends = np.flatnonzero(rewind[lo + 1 : hi]) + lo
        successor[ends] = -1
        successor[lo:hi][rewind[lo:hi]] = -1
        terminal_success[hi - 1] = success
        last_takeover_end = _mark_takeovers(
            segments, lo, human_actor, executed, rewind, pre, pre_intervention_steps, min_intervention_steps
        )
        labelled = np.zeros(hi - lo, dtype=bool)
        labelled[last_takeover_end:] = True
        labelled &= executed[lo:hi] & ~rewind[lo:hi]
        label[lo:hi][labelled] = SUCCEEDED if success else FAILED
    return StepTable(
        episode=episode,
        included=included,
        rewind=rewind,
        executed=executed & ~rewind,
        human=human_actor & ~rewind,
        demo=actor == _SCRIPTED,
        pre_intervention=pre,
        successor=successor,
        terminal_success=terminal_success,
        episode_success=episode_success,
        outcome_label=label,
        state=np.asarray(store.read(state_key), dtype=np.float32),
        progress=np.asarray(store.read("progress"), dtype=np.float32),
        supervision=segments_by_episode,
    )


def _mark_takeovers(
    segments: list[tuple[int, int, str]],
    lo: int,
    human: np.ndarray,
    executed: np.ndarray,
    rewind: np.ndarray,
    pre: np.ndarray,
    pre_steps: int,
    min_steps: int,
) -> int:
    """Mark in ``pre`` the policy's steps just before each takeover of the episode starting at row ``lo``; return
    the end (within the episode) of its last intervention of at least ``min_steps`` human steps (0 if none)."""
    last_takeover_end, previous_kind = 0, "autonomous"
    for start, stop, kind in sorted(segments):
        if kind == "intervention":
            rows = slice(lo + start, lo + stop)
            if np.count_nonzero(human[rows] & ~rewind[rows]) >= min_steps:
                last_takeover_end = max(last_takeover_end, stop)
        if kind in ("intervention", "rewind") and previous_kind == "autonomous":  # a takeover began here
            window = slice(lo + max(0, start - pre_steps), lo + start)
            pre[window] = executed[window] & ~rewind[window]
        previous_kind = kind
    return last_takeover_end


def trajectory_steps_to_go(table: StepTable) -> np.ndarray:
    """Steps from each step to the end of its trajectory (following successors); -1 where it ends in a rewind."""
    n = table.n
    to_go = np.full(n, -1, dtype=np.int64)
    reaches_end = np.zeros(n, dtype=bool)
    # successors always point forward in the store, so one backward sweep resolves every chain
    for i in range(n - 1, -1, -1):
        j = table.successor[i]
        if j < 0:
            last_row = i + 1 == n or table.episode[i + 1] != table.episode[i]
            if last_row and not table.rewind[i]:
                to_go[i], reaches_end[i] = 0, True
        elif reaches_end[j]:
            to_go[i], reaches_end[i] = to_go[j] + 1, True
    return to_go
