"""The episode store: episodes by task, outcome, robot, actor or policy version, their steps and frames, relabels."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from vla_recover.console.access import ApiError
from vla_recover.console.records import (
    episode_card,
    episode_row,
    open_store,
    plain,
    requested_episode,
    requested_step,
    stored_step,
    write_label,
    write_outcome,
)
from vla_recover.console.state import console_of, fleet_error, json_body
from vla_recover.critic.segmenter import CRITIC_KINDS
from vla_recover.data.schema import ACTORS, OUTCOME_LABELS

__all__ = ["ROUTES"]


async def episodes(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    filters = {field: request.query_params.get(field) or None for field in ("task", "outcome", "robot")}
    version = request.query_params.get("policy_version") or None
    try:
        limit = int(request.query_params.get("limit", "200"))
    except ValueError:
        raise ApiError(422, f"limit: {request.query_params['limit']!r} is not a whole number") from None
    if not 1 <= limit <= 5000:
        raise ApiError(422, f"limit: {limit} is not between 1 and 5000")
    actors = request.query_params.get("actors")
    if actors not in (None, "", "autonomous", "intervened"):
        raise ApiError(422, f"actors: {actors!r} is not autonomous or intervened")
    with open_store(console.store) as store:
        intervened = None if not actors else actors == "intervened"
        rows = store.find_episodes(**filters, policy_version=version, intervened=intervened)
    return JSONResponse([episode_card(row) for row in rows[-limit:]])


async def episode(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    episode_id = requested_episode(request)
    with open_store(console.store) as store:
        row = episode_row(store, episode_id)
        data = store.episode(episode_id)
        segments = store.segments(episode=episode_id)
    critic = await anyio.to_thread.run_sync(_critic_curve, console, data, row.instruction)
    return JSONResponse({
        **episode_card(row),
        "progress": plain(data["progress"]) if "progress" in data else [],
        "critic": critic,
        "actor": [ACTORS[int(a)] for a in data["actor"]] if "actor" in data else [],
        "segments": [{"start": s.start, "stop": s.stop, "kind": s.kind, "source": s.source} for s in segments],
    })  # fmt: skip


def _critic_curve(console: Any, data: dict[str, np.ndarray], instruction: str) -> list[float] | None:
    """The running fleet's critic's rating of every step (None without one, or for data it cannot read)."""
    rater = console.runner.fleet.critic if console.runner is not None else None
    if rater is None or not all(key in data for key in rater.critic.input_keys):
        return None
    steps = {key: data[key] for key in rater.critic.input_keys}
    return plain(rater.critic.predict(steps, instruction, where="console"))


async def episode_step(request: Request) -> Response:
    """One step of a stored episode, for scrubbing: who acted, what it did, progress, and its cameras."""
    console = console_of(request)
    console.caller(request, "view")
    episode_id, index = requested_episode(request), requested_step(request)
    with open_store(console.store) as store:
        row = stored_step(store, episode_id, index)
        at = row.start + index
        values = {key: store.read(key, at, at + 1)[0] for key in store.data_keys() if "images." not in key}
        cameras = sorted(k.removeprefix("obs.images.") for k in store.data_keys() if k.startswith("obs.images."))
    actor = values.get("actor")
    return JSONResponse({
        "episode": episode_id, "step": index, "length": row.length, "cameras": cameras,
        "actor": ACTORS[int(actor)] if actor is not None and int(actor) < len(ACTORS) else None,
        **{k.removeprefix("obs."): plain(v) for k, v in values.items() if k != "actor"},
    })  # fmt: skip


async def episode_frame(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    episode_id, index = requested_episode(request), requested_step(request)
    name = request.query_params.get("camera", "front")
    with open_store(console.store) as store:
        row = stored_step(store, episode_id, index)
        key = f"obs.images.{name}"
        if key not in store.data_keys():
            raise ApiError(404, f"camera: episode {episode_id} has no camera {name!r}")
        frame = store.read(key, row.start + index, row.start + index + 1)[0]
    import imageio.v3 as iio

    return Response(iio.imwrite("<bytes>", np.asarray(frame), extension=".png"), media_type="image/png")


async def relabel(request: Request) -> Response:
    console = console_of(request)
    user = console.caller(request, "relabel", state_changing=True)
    episode_id = requested_episode(request)
    body = await json_body(request)
    start, stop, kind = body.get("start"), body.get("stop"), body.get("kind")
    if not isinstance(start, int) or not isinstance(stop, int):
        raise ApiError(422, f"start / stop: expected whole step numbers, got {start!r} / {stop!r}")
    if kind not in CRITIC_KINDS:
        raise ApiError(422, f"kind: {kind!r} is not one of {', '.join(CRITIC_KINDS)}")
    segment = await _write(console, partial(write_label, episode_id, start, stop, str(kind), user.name))
    return JSONResponse({"ok": True, "segment": segment})


async def label_outcome(request: Request) -> Response:
    """A floor operator's verdict on an episode that no success detector judged: success, failure or unsure."""
    console = console_of(request)
    user = console.caller(request, "relabel", state_changing=True)
    episode_id = requested_episode(request)
    label = (await json_body(request)).get("label")
    if label not in OUTCOME_LABELS:
        raise ApiError(422, f"label: {label!r} is not one of {', '.join(OUTCOME_LABELS)}")
    answer = await _write(console, partial(write_outcome, episode_id, str(label), user.name))
    return JSONResponse({"ok": True, **answer})


async def _write(console: Any, write: Callable[[Any], Any]) -> Any:
    """``write(store)`` by whoever holds the store for writing: the running fleet's writer, else this console."""
    try:
        if console.runner is not None:
            return await anyio.to_thread.run_sync(console.runner.call, lambda fleet: fleet.recorder.call(write))
        return await anyio.to_thread.run_sync(_write_to_store, console.store, write)
    except (KeyError, ValueError) as exc:
        raise fleet_error(exc) from exc


def _write_to_store(path: Path | None, write: Callable[[Any], Any]) -> Any:
    with open_store(path, mode="a") as store:
        return write(store)


ROUTES: list[BaseRoute] = [
    Route("/api/episodes", episodes),
    Route("/api/episodes/{episode}", episode),
    Route("/api/episodes/{episode}/segments", relabel, methods=["POST"]),
    Route("/api/episodes/{episode}/outcome", label_outcome, methods=["POST"]),
    Route("/api/episodes/{episode}/steps/{step}", episode_step),
    Route("/api/episodes/{episode}/steps/{step}/image", episode_frame),
]
