"""The store and the loop runs as the console's API shows them: episodes, steps, labels, run summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from starlette.requests import Request

from vla_recover.console.access import ApiError

__all__ = [
    "episode_card",
    "episode_row",
    "loop_run",
    "loop_runs",
    "open_store",
    "plain",
    "requested_episode",
    "requested_step",
    "run_card",
    "stored_step",
    "write_label",
]  # fmt: skip


class open_store:
    """The console's episode store for one request: read-only unless ``mode="a"``."""

    def __init__(self, path: Path | None, mode: str = "r") -> None:
        if path is None:
            raise ApiError(503, "no store: start the console with --store PATH")
        self.path, self.mode = path, mode

    def __enter__(self) -> Any:
        from vla_recover.data import EpisodeStore

        self.store = EpisodeStore(self.path, mode=self.mode)
        return self.store

    def __exit__(self, *exc: object) -> None:
        self.store.close()


def episode_row(store: Any, episode_id: int) -> Any:
    try:
        return store.episode_row(episode_id)
    except KeyError:
        raise ApiError(404, f"episode: no episode {episode_id}") from None


def requested_episode(request: Request) -> int:
    try:
        return int(request.path_params["episode"])
    except ValueError:
        raise ApiError(422, f"episode: {request.path_params['episode']!r} is not an id") from None


def plain(value: Any) -> Any:
    """A stored value as JSON: floats rounded (NaN, as an arm's unknown progress, as null), booleans and integers
    as they are."""
    array = np.asarray(value)
    if array.dtype.kind != "f":
        return array.tolist()
    array = array.astype(np.float64)  # float32 rounded to 4 places prints with 18 digits
    return np.where(np.isfinite(array), array.round(4), np.array(None)).tolist()


def requested_step(request: Request) -> int:
    try:
        return int(request.path_params["step"])
    except ValueError:
        raise ApiError(422, f"step: {request.path_params['step']!r} is not a step number") from None


def stored_step(store: Any, episode_id: int, index: int) -> Any:
    row = episode_row(store, episode_id)
    if not 0 <= index < row.length:
        raise ApiError(404, f"step: episode {episode_id} has steps 0-{row.length - 1}, not {index}")
    return row


def write_label(episode_id: int, start: int, stop: int, kind: str, user: str, store: Any) -> dict[str, Any]:
    """A human's segment label on a stored episode, and the event that says who set it."""
    length = episode_row(store, episode_id).length
    if not 0 <= start < stop <= length:
        raise ValueError(f"start / stop: [{start}, {stop}) is not inside episode {episode_id} (0-{length})")
    payload = {"start": start, "stop": stop, "kind": kind}
    (segment,) = store.write_segments(
        episode_id, "human", [(start, stop, kind, None)], actor=user, event="segment_relabelled", payload=payload
    )
    return {"id": segment, "start": start, "stop": stop, "kind": kind, "source": "human"}


def write_outcome(episode_id: int, label: str, user: str, store: Any) -> dict[str, Any]:
    """A person's success / failure / unsure on a stored episode, with the event that says who set it."""
    row = store.label_outcome(episode_id, label, user)
    return {"id": episode_id, "label": label, "outcome": row.outcome}


def loop_runs(directory: Path | None) -> list[Path]:
    if directory is None or not directory.is_dir():
        return []
    return sorted(p.parent for p in directory.glob("*/summary.json"))


def loop_run(directory: Path | None, name: str) -> Path:
    if directory is None:
        raise ApiError(404, "run: this console was started without a folder of loop runs (--runs)")
    runs = {path.name: path for path in loop_runs(directory)}
    if name not in runs:
        raise ApiError(404, f"run: no loop run {name!r} in {directory} ({', '.join(sorted(runs)) or 'none'})")
    return runs[name]


def run_card(path: Path) -> dict[str, Any]:
    """A loop run at a glance: success rate per round, what was promoted, human effort."""
    summary = json.loads((path / "summary.json").read_text())
    rounds = []
    for entry in summary.get("rounds", []):
        fleet = entry.get("fleet") or {}
        rounds.append({
            "round": entry.get("round"),
            "success_rate": (entry.get("eval") or {}).get("success_rate"),
            "promoted": entry.get("promoted"),
            "current": entry.get("current"),
            "operator_s": sum((fleet.get("operator_s") or {}).values()),
            "interventions": fleet.get("interventions"),
            "successes_per_operator_hour": fleet.get("successes_per_operator_hour"),
        })  # fmt: skip
    return {"name": path.name, "task": summary.get("task"), "method": summary.get("method"), "rounds": rounds}


def episode_card(row: Any) -> dict[str, Any]:
    return {
        "id": row.id, "robot": row.robot, "task": row.task, "instruction": row.instruction, "outcome": row.outcome,
        "length": row.length, "policy_version": row.info.get("policy_version", ""), "info": row.info,
    }  # fmt: skip
