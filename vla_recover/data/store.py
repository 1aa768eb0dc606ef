"""The episode store: per-key step arrays in zarr (v3), committed through a SQLite index.

Layout of a store directory::

    steps.zarr/data/<key>           (N, ...) every step of every episode, concatenated along time
    steps.zarr/meta/episode_ends    (E,) int64, cumulative end of each episode
    index.sqlite                    episodes, segments, names, events (see index.py)
    writer.lock                     held by the one process that writes
    console_users.sqlite            the operator console's users, when a console serves the store

Writing episodes: their steps go to zarr first (each chunk file is replaced atomically by zarr's local store), then
one SQLite transaction inserts their rows; those rows are the commit. Readers only ever read below the committed end.
While a writer is open the arrays grow by doubling (capacity past the committed end); closing shrinks them to the
committed end. A writer that opens a store left by a crash truncates whatever lies past the committed end and says
so in the event log.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec
from zarr.core.sync import sync as zarr_sync

from vla_recover.data.index import BEING_CREATED, EpisodeRow, Event, Index, SegmentRow
from vla_recover.data.schema import ACTORS, OUTCOME_LABELS, PROVENANCE_KEYS, EpisodeData, KeySpec, SchemaError

__all__ = ["EpisodeStore", "EventRecord"]

# (kind, actor, payload, robot, episode, wall time or None for now): one event for EpisodeStore.append_events
EventRecord = tuple[str, str, dict[str, Any], str | None, int | None, float | None]

_ZARR = "steps.zarr"
_INDEX = "index.sqlite"
_LOCK = "writer.lock"
_IMAGE_CHUNK = 16  # steps per chunk for images: a training window touches one or two chunks
_LOWDIM_CHUNK_BYTES = 256 * 1024


def _compressor(is_image: bool) -> BloscCodec:
    return BloscCodec(cname="zstd", clevel=3 if is_image else 5, shuffle="bitshuffle" if is_image else "shuffle")


CONSOLE_USERS = "console_users.sqlite"  # the operator console keeps its users beside the store it serves
# what a store, or its interrupted creation, puts in its directory
STORE_ENTRIES = frozenset(
    {_ZARR, _LOCK}
    | {
        f"{db}{suffix}"
        for db in (_INDEX, _INDEX + BEING_CREATED, CONSOLE_USERS)
        for suffix in ("", "-wal", "-shm", "-journal")
    }
)


def not_a_store(path: Path) -> str | None:
    """Why the directory ``path`` is some other directory, not a store (nor one whose creation was interrupted):
    it has no index and holds what no store puts there; None when it could be a store."""
    if (path / _INDEX).exists():
        return None
    foreign = sorted(entry.name for entry in path.iterdir() if entry.name not in STORE_ENTRIES)
    if not foreign:
        return None
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    return f"{path}: not an episode store (it holds {shown})"


def _refuse_foreign(path: Path) -> None:
    """Opening to write creates a store: only where there is none yet, an empty directory, or a store."""
    if path.exists() and not path.is_dir():
        raise SchemaError(f"{path}: is a file, not a store directory")
    problem = not_a_store(path) if path.is_dir() else None
    if problem:
        raise SchemaError(f"{problem}; give a new or empty directory for a new store")


def _write_all(writes: list[Coroutine[Any, Any, None]]) -> None:
    """Run the keys' writes together on zarr's event loop: one hand-over instead of one per key, and their
    chunks compress and land concurrently (low-dim batches write about 40% faster). Every write has finished when
    this returns or raises: one left running after a failure could land over the next batch's chunks."""

    async def gather() -> list[Any]:
        return await asyncio.gather(*writes, return_exceptions=True)

    failed = [result for result in zarr_sync(gather()) if isinstance(result, BaseException)]
    if failed:
        raise failed[0]


class EpisodeStore:
    """Open with ``EpisodeStore(path, mode="a")`` to write (creates the store), ``mode="r"`` to read."""

    def __init__(self, path: str | os.PathLike[str], mode: str = "r") -> None:
        if mode not in ("r", "a"):
            raise ValueError(f"mode: got {mode!r}; expected 'r' (read) or 'a' (append)")
        self.path = Path(path)
        self.writable = mode == "a"
        if not self.writable and not self.path.is_dir():
            raise FileNotFoundError(f"{self.path}: no such store")
        self._lock_file = None
        self._arrays: dict[str, Any] = {}
        zarr_path = self.path / _ZARR
        if self.writable:
            _refuse_foreign(self.path)
            self.path.mkdir(parents=True, exist_ok=True)
            self._lock_file = self._acquire_writer_lock()
            # the steps group first, the index last: a reader that finds the index finds a whole store
            self.root = zarr.open_group(str(zarr_path), mode="a")
            self.root.require_group("data")
            self.root.require_group("meta")
            self._index = Index(self.path / _INDEX, create=True)
            self.recovered_steps = self._truncate_uncommitted()
            return
        self._index = Index(self.path / _INDEX, create=False, read_only=True)
        if not zarr_path.is_dir():
            raise SchemaError(f"{zarr_path}: missing steps array group")
        self.root = zarr.open_group(str(zarr_path), mode="r")

    # -- lifecycle ---------------------------------------------------------------------------------------------------
    def _acquire_writer_lock(self) -> Any:
        handle = open(self.path / _LOCK, "a+")  # noqa: SIM115 (held for the store's lifetime)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise RuntimeError(f"{self.path}: store is open for writing by {owner}; open it with mode='r'") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        return handle

    def close(self) -> None:
        if self.writable and self._lock_file is not None:
            self._truncate_uncommitted(after_crash=False)
            self.root.attrs["clean_close"] = True
        self._index.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def __enter__(self) -> EpisodeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _truncate_uncommitted(self, after_crash: bool = True) -> int:
        """Cut steps past the last committed episode: capacity slack, or a write a crash interrupted.

        Returns the steps removed when ``after_crash`` and the last writer did not close cleanly, else 0.
        """
        unclean = after_crash and not self.root.attrs.get("clean_close", True)
        if after_crash:
            self.root.attrs["clean_close"] = False
        n_episodes, stop = self._index.committed_steps()
        removed = 0
        for key in self.data_keys():
            array = self._array(key)
            if array.shape[0] > stop:
                removed = max(removed, array.shape[0] - stop)
                array.resize((stop, *array.shape[1:]))
        ends = self._meta_ends()
        if ends is not None and ends.shape[0] != n_episodes:
            ends.resize((n_episodes,))
        for partial in (self.path / _ZARR).rglob("*.partial"):
            partial.unlink()
        if not unclean:
            return 0
        with self._index.transaction():
            self._index.insert_event(
                "store_recovered",
                "store",
                {"truncated_steps": removed, "committed_steps": stop, "committed_episodes": n_episodes},
            )
        return removed

    # -- schema ------------------------------------------------------------------------------------------------------
    def data_keys(self) -> list[str]:
        return sorted(self.specs())

    def specs(self) -> dict[str, KeySpec]:
        raw: dict[str, Any] = dict(self.root.attrs.get("keys", {}))  # type: ignore[arg-type]
        return {k: KeySpec(tuple(v["shape"]), str(v["dtype"])) for k, v in raw.items()}

    def _array(self, key: str) -> Any:
        array = self._arrays.get(key)
        if array is None:
            array = self._arrays[key] = self.root[f"data/{key}"]
        return array

    def _fresh_array(self, key: str, min_length: int) -> Any:
        """The array, reopened if another process has grown it since we last looked."""
        array = self._array(key)
        if array.shape[0] < min_length:
            array = self._arrays[key] = zarr.open_array(str(self.path / _ZARR / "data" / key), mode="r")
        return array

    def _meta_ends(self) -> Any:
        try:
            return self.root["meta/episode_ends"]
        except KeyError:
            return None

    def _create_keys(self, columns: dict[str, np.ndarray]) -> None:
        specs = {key: KeySpec.of(value) for key, value in columns.items()}
        for key, spec in specs.items():
            is_image = len(spec.shape) == 3 and np.dtype(spec.dtype) == np.uint8
            row_bytes = max(1, int(np.prod(spec.shape, dtype=np.int64)) * np.dtype(spec.dtype).itemsize)
            rows = _IMAGE_CHUNK if is_image else max(256, _LOWDIM_CHUNK_BYTES // row_bytes)
            self.root.create_array(
                f"data/{key}",
                shape=(0, *spec.shape),
                chunks=(rows, *spec.shape),
                dtype=spec.dtype,
                compressors=[_compressor(is_image)],
            )
        self.root.create_array("meta/episode_ends", shape=(0,), chunks=(4096,), dtype="int64")
        self.root.attrs["keys"] = {k: s.as_json() for k, s in specs.items()}

    def _validate(self, columns: dict[str, np.ndarray]) -> None:
        specs = self.specs()
        missing = sorted(set(specs) - set(columns))
        extra = sorted(set(columns) - set(specs))
        if missing or extra:
            raise SchemaError(
                f"episode keys do not match the store: missing {missing or 'none'}, unexpected {extra or 'none'}"
            )
        for key, value in columns.items():
            got = KeySpec.of(value)
            if got != specs[key]:
                raise SchemaError(
                    f"key {key!r}: got shape {got.shape} dtype {got.dtype}, "
                    f"store holds shape {specs[key].shape} dtype {specs[key].dtype}"
                )

    # -- writing -----------------------------------------------------------------------------------------------------
    def append_episode(self, episode: EpisodeData) -> int:
        """Store ``episode``; returns its id. Visible to readers only once this returns."""
        return self.append_episodes([episode])[0]

    def append_episodes(self, episodes: list[EpisodeData]) -> list[int]:
        """Store several episodes with one write per key and one commit: the fast path for recorders."""
        self._require_writable()
        if not episodes:
            return []
        lengths = [episode.length for episode in episodes]
        if min(lengths) == 0:
            raise SchemaError(f"episode {lengths.index(0)} of the batch has no steps")
        for episode, length in zip(episodes, lengths, strict=True):
            episode.check_segments(length)
        with self._index.transaction():
            per_episode = [self._columns(episode, n) for episode, n in zip(episodes, lengths, strict=True)]
        if not self.specs():
            self._create_keys(per_episode[0])
        for columns in per_episode:
            self._validate(columns)
        n_episodes, start = self._index.committed_steps()
        stop = start + sum(lengths)
        writes = []
        for key in per_episode[0]:
            array = self._array(key)
            if array.shape[0] < stop:  # grow by doubling: a resize rewrites metadata, so keep them rare
                array.resize((max(stop, 2 * array.shape[0], array.chunks[0]), *array.shape[1:]))
            rows = np.concatenate([columns[key] for columns in per_episode])
            writes.append(array.async_array.setitem(slice(start, stop), rows))
        _write_all(writes)
        ends = self._meta_ends()
        ids = list(range(n_episodes, n_episodes + len(episodes)))
        bounds = start + np.cumsum([0, *lengths])
        ends.resize((n_episodes + len(episodes),))
        ends[n_episodes:] = bounds[1:]
        now = time.time()
        with self._index.transaction():
            for episode_id, episode, lo, hi in zip(ids, episodes, bounds[:-1], bounds[1:], strict=True):
                row = EpisodeRow(
                    episode_id, int(lo), int(hi), episode.robot, episode.task, episode.instruction,
                    episode.outcome, tuple(episode.phases), episode.info, now,
                )  # fmt: skip
                self._index.insert_episode(row)
                for seg_start, seg_stop, kind in episode.segments:
                    self._index.insert_segment(episode_id, seg_start, seg_stop, kind, "supervision")
                self._index.insert_event(
                    "episode_recorded",
                    "recorder",
                    {"length": row.length, "outcome": episode.outcome, "task": episode.task},
                    robot=episode.robot,
                    episode=episode_id,
                )
        return ids

    def _columns(self, episode: EpisodeData, length: int) -> dict[str, np.ndarray]:
        """Data keys plus the provenance columns, coded and broadcast to one value per step."""
        columns = {k: np.ascontiguousarray(v) for k, v in episode.steps.items() if k not in PROVENANCE_KEYS}
        for key, value in columns.items():
            if not np.all(np.isfinite(value)) and np.issubdtype(value.dtype, np.floating):
                raise SchemaError(f"key {key!r}: contains NaN or Inf")
        actors = [episode.actor] * length if isinstance(episode.actor, str) else list(episode.actor)
        unknown = sorted(set(actors) - set(ACTORS))
        if unknown:
            raise SchemaError(f"actor: got {unknown}; valid actors: {', '.join(ACTORS)}")
        versions = (
            [episode.policy_version] * length if isinstance(episode.policy_version, str) else episode.policy_version
        )
        codes = {v: (self._index.code("policy_version", v) if v else -1) for v in set(versions)}
        defaults: dict[str, Any] = {
            "actor": np.array([ACTORS.index(a) for a in actors]),
            "policy_version": np.array([codes[v] for v in versions]),
            "robot": np.full(length, self._index.code("robot", episode.robot)),
            "intervention": np.array([a in ("human", "rewind") for a in actors]),
            "wall_time": np.full(length, time.time()),
            "sim_time": np.arange(length, dtype=np.float64),
            "phase": np.full(length, -1),
            "progress": np.full(length, np.nan),
        }
        for key, dtype in PROVENANCE_KEYS.items():
            value = np.asarray(episode.steps.get(key, defaults[key]))
            if value.shape != (length,):
                raise SchemaError(f"key {key!r}: expected shape ({length},), got {value.shape}")
            columns[key] = value.astype(dtype)
        return columns

    # -- reading -----------------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._index.committed_steps()[0]

    @property
    def n_steps(self) -> int:
        return self._index.committed_steps()[1]

    def episodes(self, **filters: Any) -> list[EpisodeRow]:
        """Committed episodes, optionally filtered by column equality (``outcome="success"``, ``task=...``)."""
        where = " AND ".join(f"{k}=?" for k in filters)
        return self._index.episodes(where, tuple(filters.values()))

    def episode(self, episode_id: int) -> dict[str, np.ndarray]:
        row = self.episode_row(episode_id)
        return {key: self._fresh_array(key, row.stop)[row.start : row.stop] for key in self.data_keys()}

    def read(self, key: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Steps [start, stop) of ``key``, never past the committed end."""
        committed = self.n_steps
        stop = committed if stop is None else min(stop, committed)
        if key not in self.specs():
            raise KeyError(f"key {key!r} is not in {self.path}; keys: {', '.join(self.data_keys())}")
        return np.asarray(self._fresh_array(key, stop)[start:stop])

    def iter_episodes(self) -> Iterator[tuple[EpisodeRow, dict[str, np.ndarray]]]:
        for row in self.episodes():
            yield row, self.episode(row.id)

    def names(self, kind: str) -> dict[int, str]:
        return self._index.names(kind)

    def find_episodes(
        self,
        task: str | None = None,
        outcome: str | None = None,
        robot: str | None = None,
        policy_version: str | None = None,
        intervened: bool | None = None,
    ) -> list[EpisodeRow]:
        """Committed episodes by task, outcome and robot; by a policy version that chose at least one of their steps;
        and by whether a human intervened in them (``intervened``: True, False or None for either)."""
        filters = {k: v for k, v in {"task": task, "outcome": outcome, "robot": robot}.items() if v is not None}
        rows = self.episodes(**filters)
        if policy_version is not None:
            from vla_recover.data.provenance import policy_version_use

            use = policy_version_use(self).get(policy_version)
            chosen_by = set(use.episodes) if use is not None else set()
            rows = [r for r in rows if r.id in chosen_by]
        if intervened is not None:
            with_intervention = {s.episode for s in self.segments(kind="intervention")}
            rows = [r for r in rows if (r.id in with_intervention) == intervened]
        return rows

    # -- segments and events -----------------------------------------------------------------------------------------
    def segments(
        self, episode: int | None = None, source: str | None = None, kind: str | None = None
    ) -> list[SegmentRow]:
        """Segments by episode, source (``supervision``, ``critic``, ``human``) and kind, in episode and step order."""
        rows = self._index.segments(episode=episode, source=source)
        return rows if kind is None else [s for s in rows if s.kind == kind]

    def write_segments(
        self,
        episode: int,
        source: str,
        segments: Sequence[tuple[int, int, str, float | None]],
        *,
        actor: str,
        event: str,
        payload: dict[str, Any],
        replace: bool = False,
    ) -> list[int]:
        """Store ``(start, stop, kind, score)`` segments of ``episode`` from ``source`` and log ``event`` by ``actor``
        (its payload gains the new ``segment_ids``), all in one transaction: a failure writes none of it.
        ``replace``: drop the episode's segments from ``source`` first (a relabelling)."""
        self._require_writable()
        self.episode_row(episode)
        with self._index.transaction():
            if replace:
                self._index.delete_segments(episode, source)
            ids = [
                self._index.insert_segment(episode, start, stop, kind, source, score=score)
                for start, stop, kind, score in segments
            ]
            self._index.insert_event(event, actor, {**payload, "segment_ids": ids}, episode=episode)
        return ids

    def label_outcome(self, episode: int, label: str, actor: str) -> EpisodeRow:
        """A person's verdict on an episode no success detector judged (a real arm's): ``success`` or ``failure``
        becomes its outcome, ``unsure`` leaves it; either way an ``outcome_labelled`` event says who said what, in
        the same transaction. Returns the episode's row after it."""
        if label not in OUTCOME_LABELS:
            raise ValueError(f"label: got {label!r}; valid labels: {', '.join(OUTCOME_LABELS)}")
        self._require_writable()
        previous = self.episode_row(episode).outcome
        with self._index.transaction():
            if label != "unsure":
                self._index.set_outcome(episode, label)
            self._index.insert_event("outcome_labelled", actor, {"label": label, "previous": previous}, episode=episode)
        return self.episode_row(episode)

    def events(
        self, robot: str | None = None, after: int = 0, kind: str | None = None, episode: int | None = None
    ) -> list[Event]:
        """The event log in order, from after event id ``after``, by robot, kind and episode."""
        rows = self._index.events(robot=robot, after=after, kind=kind)
        return rows if episode is None else [e for e in rows if e.episode == episode]

    def append_events(self, events: Sequence[EventRecord]) -> list[int]:
        """Log ``(kind, actor, payload, robot, episode, when)`` events in one transaction; ``when``: wall time, if not
        now (a writer that logs them later). Returns their ids."""
        self._require_writable()
        with self._index.transaction():
            return [
                self._index.insert_event(kind, actor, payload, robot=robot, episode=episode, when=when)
                for kind, actor, payload, robot, episode, when in events
            ]

    def append_event(
        self, kind: str, actor: str, payload: dict[str, Any], robot: str | None = None, episode: int | None = None
    ) -> int:
        """Log one event now; returns its id."""
        return self.append_events([(kind, actor, payload, robot, episode, None)])[0]

    def episode_row(self, episode_id: int) -> EpisodeRow:
        """The index row of one committed episode (a KeyError naming the store's ids if there is none)."""
        rows = self._index.episodes("id=?", (episode_id,)) if 0 <= episode_id < 2**63 else []  # SQLite's integers
        if not rows:
            count = len(self)
            raise KeyError(f"episode {episode_id} is not in {self.path} ({count} committed, ids 0..{count - 1})")
        return rows[0]

    def _require_writable(self) -> None:
        if not self.writable:
            raise PermissionError(f"{self.path}: store opened read-only")

    def size_on_disk(self) -> int:
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())
