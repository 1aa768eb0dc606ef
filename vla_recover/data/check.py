"""`vla-recover store check` and `store info`: verify a store without changing it, and summarise it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.data.provenance import policy_version_use
from vla_recover.data.schema import ACTORS
from vla_recover.data.store import EpisodeStore, not_a_store

__all__ = ["CheckReport", "check_store", "store_summary"]


@dataclass
class CheckReport:
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    episodes: int = 0
    steps: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def check_store(path: str | Path) -> CheckReport:
    """Open read-only and check: schema, index, contiguity, every committed chunk decodes, segment bounds."""
    report = CheckReport()
    if Path(path).is_dir() and not (Path(path) / "index.sqlite").exists():
        problem = not_a_store(Path(path))
        if problem:
            report.problems.append(problem)
            return report
        report.warnings.append(
            "no index: an empty store whose creation was interrupted; opening it to write completes it"
        )
        return report
    try:
        store = EpisodeStore(path, mode="r")
    except Exception as exc:  # any failure to open is the finding
        report.problems.append(str(exc))
        return report
    with store:
        rows = store.episodes()
        report.episodes, report.steps = len(rows), store.n_steps
        expected_start = 0
        for row in rows:
            if row.start != expected_start or row.stop <= row.start:
                report.problems.append(
                    f"episode {row.id}: steps [{row.start}, {row.stop}) do not follow the previous end {expected_start}"
                )
            expected_start = row.stop
        _check_episode_ends(store, rows, report)
        for key in store.data_keys():
            _check_key(store, key, report)
        lengths = {row.id: row.length for row in rows}
        for segment in store.segments():
            length = lengths.get(segment.episode)
            if length is None:
                report.problems.append(f"segment {segment.id}: episode {segment.episode} does not exist")
            elif not 0 <= segment.start < segment.stop <= length:
                report.problems.append(
                    f"segment {segment.id}: [{segment.start}, {segment.stop}) outside episode {segment.episode} "
                    f"of length {length}"
                )
        partial = list((Path(path) / "steps.zarr").rglob("*.partial"))
        if partial:
            report.warnings.append(f"{len(partial)} interrupted chunk write(s) left as *.partial (ignored)")
        if not store.root.attrs.get("clean_close", True):
            report.warnings.append(
                "the last writer did not close cleanly: steps past the committed end are ignored and will be "
                "truncated when a writer next opens the store"
            )
    return report


def _check_episode_ends(store: EpisodeStore, rows: list[Any], report: CheckReport) -> None:
    if not rows:
        return
    try:
        ends = np.asarray(store._meta_ends()[: len(rows)])
    except Exception as exc:
        report.problems.append(f"meta/episode_ends: unreadable ({exc})")
        return
    stops = np.array([row.stop for row in rows])
    if ends.shape != stops.shape or not np.array_equal(ends, stops):
        report.problems.append(f"meta/episode_ends: {ends.shape[0]} entries disagree with the index's episode ends")


def _check_key(store: EpisodeStore, key: str, report: CheckReport) -> None:
    committed = report.steps
    try:
        array = store._fresh_array(key, committed)
    except Exception as exc:
        report.problems.append(f"data/{key}: cannot open ({exc})")
        return
    if array.shape[0] < committed:
        report.problems.append(f"data/{key}: holds {array.shape[0]} steps, the index commits {committed}")
        return
    rows = array.chunks[0]
    for lo in range(0, committed, rows):
        hi = min(lo + rows, committed)
        try:
            block = np.asarray(array[lo:hi])
        except Exception as exc:
            report.problems.append(f"data/{key}: chunk {lo // rows} (steps {lo}..{hi - 1}) unreadable: {exc}")
            continue
        if block.shape[0] != hi - lo:
            report.problems.append(f"data/{key}: chunk {lo // rows} decoded to {block.shape[0]} steps")


def store_summary(path: str | Path) -> dict[str, Any]:
    """Episodes by outcome and task, actor mix (who chose the steps' actions, ``hold`` and ``rewind`` for rows no one
    chose), the steps and episodes of each policy version, segment kinds, total steps, size on disk."""
    with EpisodeStore(path, mode="r") as store:
        rows = store.episodes()
        actors: Counter[str] = Counter()
        if rows:
            codes, counts = np.unique(store.read("actor"), return_counts=True)
            actors.update({ACTORS[int(c)]: int(n) for c, n in zip(codes, counts, strict=True)})
        segments = Counter(s.kind for s in store.segments())
        versions = {
            name: {"steps": use.steps, "episodes": len(use.episodes), "successes": use.successes}
            for name, use in policy_version_use(store).items()
        }
        return {
            "path": str(path),
            "episodes": len(rows),
            "steps": store.n_steps,
            "outcomes": dict(Counter(r.outcome for r in rows)),
            "tasks": dict(Counter(r.task for r in rows)),
            "robots": dict(Counter(r.robot for r in rows)),
            "actor_steps": dict(actors),
            "policy_versions": versions,
            "segments": dict(segments),
            "events": len(store.events()),
            "keys": {k: {"shape": list(s.shape), "dtype": s.dtype} for k, s in store.specs().items()},
            "size_bytes": store.size_on_disk(),
        }
