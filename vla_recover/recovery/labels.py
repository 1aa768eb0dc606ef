"""Which stored states needed correction, from the failures the fleet recorded with each episode.

The ground truth (``vla_recover.fleet.failures``): a failure begins at the first policy step the simulator flags
(an injected failure fired, or progress fell) and ends at the takeover, when the policy regains what it lost, or
when the attempt ends. A state *needs correction* when it lies in such a window and the scripted expert, started
from the onset, could still finish the task (``recoverable_at_onset``). Labels are per stored row and only on the
policy's own rows: 1 needs correction, 0 does not, -1 unlabelled (human, rewind and hold rows; a failure the expert
could not recover from, or whose probe never answered; episodes recorded without failure records, such as
demonstrations and real robots).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from vla_recover.data import EpisodeStore
from vla_recover.data.schema import ACTORS

__all__ = ["NEEDS_CORRECTION", "UNLABELLED", "correction_labels", "correction_windows"]

NEEDS_CORRECTION, FINE, UNLABELLED = 1, 0, -1
_POLICY = (ACTORS.index("policy"), ACTORS.index("guided"))


def correction_windows(info: dict[str, Any]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(recoverable windows, other failure windows) as episode row ranges [onset_row, end_row) of one episode."""
    recoverable: list[tuple[int, int]] = []
    other: list[tuple[int, int]] = []
    for failure in info.get("failures") or []:
        start = int(failure["onset_row"])
        stop = failure.get("end_row")
        window = (start, int(stop) if stop is not None else start + 1)
        (recoverable if failure.get("recoverable_at_onset") is True else other).append(window)
    return recoverable, other


def correction_labels(store: EpisodeStore, episodes: Iterable[int] | None = None) -> np.ndarray:
    """(n_steps,) int8 labels of every stored row (module docstring); rows of episodes not in ``episodes`` -1."""
    labels = np.full(store.n_steps, UNLABELLED, dtype=np.int8)
    wanted = None if episodes is None else set(episodes)
    actor = store.read("actor")
    for row in store.episodes():
        if (wanted is not None and row.id not in wanted) or "failures" not in row.info:
            continue
        policy = np.isin(actor[row.start : row.stop], _POLICY)
        episode = np.where(policy, FINE, UNLABELLED).astype(np.int8)
        recoverable, other = correction_windows(row.info)
        for start, stop in other:
            episode[start:stop] = UNLABELLED
        for start, stop in recoverable:
            episode[start:stop] = np.where(policy[start:stop], NEEDS_CORRECTION, UNLABELLED)
        labels[row.start : row.stop] = episode
    return labels
