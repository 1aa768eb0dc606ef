"""One stored episode in the Rerun viewer (rerun-sdk, as LeRobot's dataset visualiser uses it), everything on one
``step`` timeline: each camera (``cameras/<name>``), the state and action series (``state``, ``action``), ground-
truth progress (``progress``), who chose each step (``actor``, logged where it changes), the segments by source
(``segments/<source>``, at their first step) and the episode's events (``events``).

Headless, it saves an ``.rrd`` file to open later (``rerun episode.rrd``); with a display it spawns the viewer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.data.schema import ACTORS
from vla_recover.data.store import EpisodeStore

__all__ = ["log_episode", "save_episode_recording"]


def log_episode(store: EpisodeStore, episode_id: int, recording: Any) -> int:
    """Log episode ``episode_id`` of ``store`` to the Rerun ``recording`` (a `rerun.RecordingStream`); returns its
    number of steps."""
    import rerun as rr

    row = store.episode_row(episode_id)
    steps = store.episode(episode_id)
    length = row.length
    cameras = sorted(key for key in steps if key.startswith("obs.images."))
    series = [(key.removeprefix("obs."), key) for key in ("obs.state", "action") if key in steps]
    recording.log("episode", rr.TextDocument(_summary(row)), static=True)
    actor = None
    for step in range(length):
        recording.set_time("step", sequence=step)
        for key in cameras:
            recording.log(f"cameras/{key.removeprefix('obs.images.')}", rr.Image(np.asarray(steps[key][step])))
        for name, key in series:
            recording.log(name, rr.Scalars(np.asarray(steps[key][step], dtype=np.float64).reshape(-1)))
        progress = float(steps["progress"][step]) if "progress" in steps else float("nan")
        if np.isfinite(progress):
            recording.log("progress", rr.Scalars(progress))
        if "actor" in steps and ACTORS[int(steps["actor"][step])] != actor:
            actor = ACTORS[int(steps["actor"][step])]
            recording.log("actor", rr.TextLog(f"chosen by {actor}"))
    for segment in store.segments(episode=episode_id):
        recording.set_time("step", sequence=segment.start)
        text = f"{segment.kind}: steps {segment.start}-{segment.stop}"
        recording.log(f"segments/{segment.source}", rr.TextLog(text + _score(segment.score)))
    for event in store.events(episode=episode_id):
        at = event.payload.get("step")  # the events that name a step are logged there, the others at the start
        recording.set_time("step", sequence=at if isinstance(at, int) and 0 <= at < length else 0)
        recording.log("events", rr.TextLog(f"{event.kind} by {event.actor}: {event.payload}"))
    return length


def save_episode_recording(store_path: str | Path, episode_id: int, out: str | Path | None = None,
                           spawn: bool = False) -> Path | None:  # fmt: skip
    """The episode as a Rerun recording: saved to ``out`` (an ``.rrd`` file) and/or shown in a spawned viewer."""
    import rerun as rr

    if out is None and not spawn:
        raise ValueError("out: give an .rrd path to save to, or spawn the viewer")
    with EpisodeStore(store_path) as store:
        row = store.episode_row(episode_id)
        recording = rr.RecordingStream("vla_recover", recording_id=f"{Path(store_path).name}-episode-{episode_id}")
        if spawn:
            recording.spawn()
        if out is not None:
            out = Path(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            recording.save(out)
        log_episode(store, row.id, recording)
        recording.flush()
    return out


def _summary(row: Any) -> str:
    return (
        f"episode {row.id} of {row.task} on {row.robot}: {row.outcome}, {row.length} steps\n\n"
        f"instruction: {row.instruction}"
    )


def _score(score: float | None) -> str:
    return "" if score is None else f" (score {score:.2f})"
