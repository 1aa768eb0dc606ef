"""The SQLite half of the store: episode and segment index, name tables, and the append-only event log.

WAL mode lets readers (trainer, console) query while the recorder writes. An episode row is the commit point of
an episode: its steps are in zarr before the row is inserted, so a reader never sees a half-written episode.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vla_recover.data.schema import OUTCOMES, SCHEMA_VERSION, SEGMENT_KINDS, SchemaError

__all__ = ["BEING_CREATED", "EpisodeRow", "Event", "Index", "SegmentRow"]

BEING_CREATED = ".creating"  # the suffix of an index still being built beside its final name

_TABLES = {
    "meta": "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "names": """CREATE TABLE IF NOT EXISTS names (
        kind TEXT NOT NULL, code INTEGER NOT NULL, name TEXT NOT NULL,
        PRIMARY KEY (kind, code), UNIQUE (kind, name))""",
    "episodes": """CREATE TABLE IF NOT EXISTS episodes (
        id INTEGER PRIMARY KEY, start INTEGER NOT NULL, stop INTEGER NOT NULL, robot TEXT NOT NULL,
        task TEXT NOT NULL, instruction TEXT NOT NULL, outcome TEXT NOT NULL, phases TEXT NOT NULL,
        info TEXT NOT NULL, created_at REAL NOT NULL)""",
    "segments": """CREATE TABLE IF NOT EXISTS segments (
        id INTEGER PRIMARY KEY AUTOINCREMENT, episode INTEGER NOT NULL REFERENCES episodes(id),
        start INTEGER NOT NULL, stop INTEGER NOT NULL, kind TEXT NOT NULL, source TEXT NOT NULL,
        score REAL, created_at REAL NOT NULL)""",
    "events": """CREATE TABLE IF NOT EXISTS events (
        id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL, actor TEXT NOT NULL,
        robot TEXT, episode INTEGER, payload TEXT NOT NULL)""",
}
_INDEXES = (
    "CREATE INDEX IF NOT EXISTS segments_episode ON segments(episode)",
    "CREATE INDEX IF NOT EXISTS events_robot ON events(robot, id)",
)


@dataclass(frozen=True)
class EpisodeRow:
    id: int
    start: int
    stop: int
    robot: str
    task: str
    instruction: str
    outcome: str
    phases: tuple[str, ...]
    info: dict[str, Any]
    created_at: float

    @property
    def length(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class SegmentRow:
    id: int
    episode: int
    start: int
    stop: int
    kind: str
    source: str
    score: float | None
    created_at: float


@dataclass(frozen=True)
class Event:
    id: int
    time: float
    kind: str
    actor: str
    robot: str | None
    episode: int | None
    payload: dict[str, Any]


class Index:
    def __init__(self, path: Path, create: bool, read_only: bool = False) -> None:
        self.path = path
        if not path.is_file():
            if not create:
                raise FileNotFoundError(
                    f"{path}: no index database (not a vla_recover store, or its creation was interrupted)"
                )
            _create_atomically(path)
        uri = f"file:{path}?mode=ro" if read_only else f"file:{path}"
        try:
            self.db = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None, check_same_thread=False)
            if not read_only:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
            self._check_tables()
        except sqlite3.DatabaseError as exc:
            raise SchemaError(f"{path}: not a readable SQLite index ({exc})") from None

    def _check_tables(self) -> None:
        present = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = sorted(set(_TABLES) - present)
        if missing:
            raise SchemaError(f"{self.path}: index is missing table(s) {', '.join(missing)}")
        row = self.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        version = int(row[0]) if row else None
        if version != SCHEMA_VERSION:
            raise SchemaError(
                f"{self.path}: store schema version {version}, this vla_recover reads version {SCHEMA_VERSION}"
            )

    def transaction(self) -> sqlite3.Connection:
        """``with index.transaction():`` runs the block as one IMMEDIATE transaction."""
        return _Transaction(self.db)  # type: ignore[return-value]

    def close(self) -> None:
        self.db.close()

    # -- names -----------------------------------------------------------------------------------------------------
    def code(self, kind: str, name: str) -> int:
        """The integer code of ``name`` in the ``kind`` table, created on first use (inside a transaction)."""
        row = self.db.execute("SELECT code FROM names WHERE kind=? AND name=?", (kind, name)).fetchone()
        if row:
            return int(row[0])
        (count,) = self.db.execute("SELECT COUNT(*) FROM names WHERE kind=?", (kind,)).fetchone()
        self.db.execute("INSERT INTO names VALUES (?, ?, ?)", (kind, count, name))
        return int(count)

    def names(self, kind: str) -> dict[int, str]:
        return dict(self.db.execute("SELECT code, name FROM names WHERE kind=?", (kind,)).fetchall())

    # -- episodes ----------------------------------------------------------------------------------------------------
    def insert_episode(self, row: EpisodeRow) -> None:
        if row.outcome not in OUTCOMES:
            raise SchemaError(f"outcome: got {row.outcome!r}; valid outcomes: {', '.join(OUTCOMES)}")
        self.db.execute(
            "INSERT INTO episodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (row.id, row.start, row.stop, row.robot, row.task, row.instruction, row.outcome,
             json.dumps(list(row.phases)), json.dumps(row.info), row.created_at),
        )  # fmt: skip

    def episodes(self, where: str = "", params: tuple[Any, ...] = ()) -> list[EpisodeRow]:
        sql = "SELECT * FROM episodes" + (f" WHERE {where}" if where else "") + " ORDER BY id"
        return [
            EpisodeRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], tuple(json.loads(r[7])), json.loads(r[8]), r[9])
            for r in self.db.execute(sql, params)
        ]

    def set_outcome(self, episode: int, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise SchemaError(f"outcome: got {outcome!r}; valid outcomes: {', '.join(OUTCOMES)}")
        self.db.execute("UPDATE episodes SET outcome=? WHERE id=?", (outcome, episode))

    def committed_steps(self) -> tuple[int, int]:
        """(episode count, total steps) of committed episodes."""
        count, stop = self.db.execute("SELECT COUNT(*), COALESCE(MAX(stop), 0) FROM episodes").fetchone()
        return int(count), int(stop)

    # -- segments ---------------------------------------------------------------------------------------------------
    def insert_segment(
        self, episode: int, start: int, stop: int, kind: str, source: str, score: float | None = None
    ) -> int:
        if kind not in SEGMENT_KINDS:
            raise SchemaError(f"segment kind: got {kind!r}; valid kinds: {', '.join(SEGMENT_KINDS)}")
        if not 0 <= start < stop:
            raise SchemaError(f"segment range: got [{start}, {stop}); need 0 <= start < stop")
        cursor = self.db.execute(
            "INSERT INTO segments (episode, start, stop, kind, source, score, created_at) VALUES (?,?,?,?,?,?,?)",
            (episode, start, stop, kind, source, score, time.time()),
        )
        return int(cursor.lastrowid or 0)

    def delete_segments(self, episode: int, source: str) -> int:
        """Drop the episode's segments from ``source`` (before relabelling it); returns how many went."""
        cursor = self.db.execute("DELETE FROM segments WHERE episode=? AND source=?", (episode, source))
        return int(cursor.rowcount)

    def segments(self, episode: int | None = None, source: str | None = None) -> list[SegmentRow]:
        where, params = _where({"episode": episode, "source": source})
        rows = self.db.execute(f"SELECT * FROM segments{where} ORDER BY episode, start", params)
        return [SegmentRow(*r) for r in rows]

    # -- events -----------------------------------------------------------------------------------------------------
    def insert_event(
        self,
        kind: str,
        actor: str,
        payload: dict[str, Any],
        robot: str | None = None,
        episode: int | None = None,
        when: float | None = None,
    ) -> int:
        """Log an event; ``when``: its wall-clock time, if not now (a writer that logs it later)."""
        cursor = self.db.execute(
            "INSERT INTO events (time, kind, actor, robot, episode, payload) VALUES (?,?,?,?,?,?)",
            (time.time() if when is None else when, kind, actor, robot, episode, json.dumps(payload)),
        )
        return int(cursor.lastrowid or 0)

    def events(self, robot: str | None = None, after: int = 0, kind: str | None = None) -> list[Event]:
        where, params = _where({"robot": robot, "kind": kind}, "id > ?", after)
        rows = self.db.execute(f"SELECT * FROM events{where} ORDER BY id", params)
        return [Event(r[0], r[1], r[2], r[3], r[4], r[5], json.loads(r[6])) for r in rows]


def _create_atomically(path: Path) -> None:
    """Build the empty index beside ``path`` and move it into place: a crash never leaves a half-made index."""
    tmp = path.with_name(path.name + BEING_CREATED)
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("BEGIN")
        for sql in (*_TABLES.values(), *_INDEXES):
            db.execute(sql)
        db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    for suffix in ("-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    os.replace(tmp, path)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def _where(equal: dict[str, Any], first: str | None = None, *first_params: Any) -> tuple[str, list[Any]]:
    """A WHERE clause (or "") for ``first`` and every column of ``equal`` whose value is not None, with its
    parameters. Column names come from this module, never from callers' input."""
    clauses = [first] if first else []
    params = list(first_params)
    for column, value in equal.items():
        if value is not None:
            clauses.append(f"{column}=?")
            params.append(value)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params
