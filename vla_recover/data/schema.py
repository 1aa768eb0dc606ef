"""The store's vocabulary: schema version, provenance columns, actors, outcomes, segment kinds.

Per-step columns live in zarr as ``data/<key>``; strings that repeat (actor, policy version, robot, phase) are
stored as small integer codes whose names live in the SQLite index.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ACTORS",
    "OUTCOMES",
    "OUTCOME_LABELS",
    "PROVENANCE_KEYS",
    "SCHEMA_VERSION",
    "SEGMENT_KINDS",
    "UNCHOSEN_ACTORS",
    "EpisodeData",
    "KeySpec",
    "SchemaError",
]

SCHEMA_VERSION = 1

# Who chose a step's action. ``hold``, ``rewind`` and ``safety`` mark rows no one chose: the robot held still (a human
# reacting, a lost lease or a silent device, a rejected policy chunk), went back through states it had visited, or
# was sent what a hardware slot's safety filter made of the command (held or clipped). The codes are stored, so new
# actors are only ever appended.
ACTORS: tuple[str, ...] = ("policy", "human", "guided", "scripted", "hold", "rewind", "safety")
UNCHOSEN_ACTORS: tuple[str, ...] = ("hold", "rewind", "safety")  # rows no method imitates
OUTCOMES: tuple[str, ...] = ("success", "failure", "truncated", "aborted")
# what a person may say of an episode no success detector judged (EpisodeStore.label_outcome)
OUTCOME_LABELS: tuple[str, ...] = ("success", "failure", "unsure")
SEGMENT_KINDS: tuple[str, ...] = (
    # from supervision
    "autonomous",
    "intervention",
    "rewind",
    "reset",
    # from the critic
    "progress",
    "idle",
    "failure_inducing",
    "recovery",
)

# Columns every episode carries per step, whatever its observations; name → dtype.
PROVENANCE_KEYS: dict[str, np.dtype[Any]] = {
    "actor": np.dtype(np.uint8),  # index into ACTORS
    "policy_version": np.dtype(np.int32),  # code into the index's policy-version table, -1 when none
    "robot": np.dtype(np.int32),  # code into the index's robot table
    "intervention": np.dtype(np.bool_),  # a human was in control (holds and rewinds during a takeover included)
    "wall_time": np.dtype(np.float64),  # seconds since the epoch
    "sim_time": np.dtype(np.float64),  # seconds since the episode began, simulator or robot clock
    "phase": np.dtype(np.int8),  # ground-truth phase index in the task's PHASES, -1 when unknown
    "progress": np.dtype(np.float32),  # ground-truth progress in [0, 1], NaN when unknown
}


class SchemaError(ValueError):
    """Data that does not fit the store; the message names the key or file."""


@dataclass(frozen=True)
class KeySpec:
    """Shape of one step of a key (without the time axis) and its dtype."""

    shape: tuple[int, ...]
    dtype: str

    @classmethod
    def of(cls, array: np.ndarray) -> KeySpec:
        return cls(tuple(int(n) for n in array.shape[1:]), np.dtype(array.dtype).str)

    def as_json(self) -> dict[str, Any]:
        return {"shape": list(self.shape), "dtype": self.dtype}


@dataclass
class EpisodeData:
    """One episode ready to store.

    ``steps`` maps data keys (``obs.state``, ``obs.images.front``, ``action``, …) to arrays of shape (T, ...);
    ``actor`` and the other provenance columns may be given per step there too, or per episode here (they are
    broadcast). Names (robot, policy version, actor, phase) are given as strings and coded by the store.
    """

    task: str
    steps: dict[str, np.ndarray]
    robot: str = "robot0"
    instruction: str = ""
    outcome: str = "success"
    actor: str | list[str] = "scripted"
    policy_version: str | list[str] = ""
    phases: tuple[str, ...] = ()  # names of the task's phases, for decoding the phase column
    info: dict[str, Any] = field(default_factory=dict)  # free-form JSON (seed, failures injected, …)
    # supervision segments committed with the episode: (start, stop, kind), who was in control when
    segments: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def length(self) -> int:
        lengths = {len(v) for v in self.steps.values()}
        if len(lengths) != 1:
            detail = ", ".join(f"{k}: {len(v)}" for k, v in self.steps.items())
            raise SchemaError(f"episode steps have different lengths ({detail})")
        return lengths.pop()

    def check_segments(self, length: int) -> None:
        for start, stop, kind in self.segments:
            if kind not in SEGMENT_KINDS:
                raise SchemaError(f"segment kind: got {kind!r}; valid kinds: {', '.join(SEGMENT_KINDS)}")
            if not 0 <= start < stop <= length:
                raise SchemaError(f"segment range: got [{start}, {stop}) in an episode of {length} steps")
