"""Which policy version chose which stored steps: the store's answer to "what did version X do?"."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from vla_recover.data.store import EpisodeStore

__all__ = ["VersionUse", "policy_version_use"]


@dataclass
class VersionUse:
    """One policy version's share of a store: the steps it chose, and the episodes they lie in."""

    steps: int = 0
    episodes: list[int] = field(default_factory=list)
    successes: int = 0  # of those episodes


def policy_version_use(store: EpisodeStore) -> dict[str, VersionUse]:
    """Per policy version id (read from each step's ``policy_version`` column), in the order versions first appear."""
    rows = store.episodes()
    if not rows:
        return {}
    codes = store.read("policy_version")
    names = store.names("policy_version")
    use: dict[str, VersionUse] = {}
    for row in rows:
        present, counts = np.unique(codes[row.start : row.stop], return_counts=True)
        for code, count in zip(present.tolist(), counts.tolist(), strict=True):
            if code < 0:
                continue  # a step no policy chose
            entry = use.setdefault(names.get(code, f"<code {code}>"), VersionUse())
            entry.steps += count
            entry.episodes.append(row.id)
            entry.successes += row.outcome == "success"
    return use
