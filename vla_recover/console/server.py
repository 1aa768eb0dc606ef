"""The console's ASGI app: a JSON API over the fleet's operator API and the store, a WebSocket stream of fleet
state, and the static front end.

Every endpoint checks the caller's role (`console.access.PERMISSIONS`; the store and loop runs are read through
`console.records`); a browser session is a cookie plus a CSRF token that every
state-changing request repeats in ``X-CSRF-Token``; scripts send ``Authorization: Bearer <token>``. Operator
actions are rate-limited per user, go to the fleet between two ticks (`FleetRunner.call`) and are events in the
store under the user's name. Errors come back as ``{"error": ...}`` with the status that fits, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.websockets import WebSocket, WebSocketDisconnect

from vla_recover.console.access import PERMISSIONS, ROBOT_ACTIONS, ApiError, RateLimiter
from vla_recover.console.records import (
    episode_card,
    episode_row,
    loop_run,
    loop_runs,
    open_store,
    plain,
    requested_episode,
    requested_step,
    run_card,
    stored_step,
    write_label,
)
from vla_recover.console.runner import FleetRunner
from vla_recover.console.users import User, UserDB
from vla_recover.critic.segmenter import CRITIC_KINDS
from vla_recover.data.provenance import policy_version_use
from vla_recover.data.schema import ACTORS

__all__ = ["PERMISSIONS", "RateLimiter", "build_app"]  # the first two re-exported from console.access

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
COOKIE = "vla_session"

NO_FLEET: dict[str, Any] = {  # what /ws streams when the console only browses a store
    "sim_time": 0.0, "ticks": 0, "finished": True, "running": False, "action_dim": 0, "robots": [], "queue": [],
    "allocation": "fifo", "control_dt": 0.0, "effort": {},
}  # fmt: skip


class Console:
    """The app's state: users, browser sessions, who holds which robot's lease, the fleet runner."""

    def __init__(
        self, runner: FleetRunner | None, users: UserDB, store: Path | None, origins: list[str], runs: Path | None
    ) -> None:
        self.runner, self.users, self.store, self.origins, self.runs = runner, users, store, origins, runs
        self.sessions: dict[str, tuple[User, str, float]] = {}  # session token → (user, csrf token, expiry)
        self.session_ttl_s = 12 * 3600.0  # a shift
        self.leases: dict[str, tuple[str, str]] = {}  # robot → (user, lease token)
        self.limiter = RateLimiter(rate=20.0, burst=40)  # operator actions
        self.command_limiter = RateLimiter(rate=60.0, burst=60)  # teleop commands stream at the control rate

    # -- who is asking ----------------------------------------------------------------------------------------------
    def caller(self, connection: HTTPConnection, permission: str, state_changing: bool = False) -> User:
        user, csrf = self._authenticate(connection)
        if user.role not in PERMISSIONS[permission]:
            raise ApiError(403, f"{user.name} ({user.role}) may not {permission.replace('_', ' ')}")
        if state_changing and csrf is not None and connection.headers.get("x-csrf-token") != csrf:
            raise ApiError(403, "missing or wrong X-CSRF-Token header")
        return user

    def _authenticate(self, connection: HTTPConnection) -> tuple[User, str | None]:
        """(user, the session's CSRF token or None for a bearer token)."""
        header = connection.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            user = self.users.check_token(header[7:].strip())
            if user is None:
                raise ApiError(401, "unknown or revoked token")
            return user, None
        token = connection.cookies.get(COOKIE, "")
        session = self.sessions.get(token)
        if session is None:
            raise ApiError(401, "log in first")
        user, csrf, expires = session
        if time.monotonic() > expires:
            self.sessions.pop(token, None)
            raise ApiError(401, "the session expired; log in again")
        return user, csrf

    def fleet(self) -> FleetRunner:
        if self.runner is None:
            raise ApiError(503, "no fleet is running in this console (start it with --fleet CONFIG)")
        return self.runner


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json() if await request.body() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "body: not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(body).__name__}")
    return body


def _action_vector(value: Any) -> np.ndarray:
    if not isinstance(value, list) or not value or not all(isinstance(v, int | float) for v in value):
        raise ApiError(422, f"action: expected a list of numbers, got {str(value)[:80]}")
    if not all(math.isfinite(v) for v in value):
        raise ApiError(422, "action: NaN or Inf")
    return np.asarray(value, dtype=np.float64)


def _fleet_error(exc: Exception) -> ApiError:
    from vla_recover.fleet.states import IllegalTransition
    from vla_recover.teleop.lease import LeaseError

    if isinstance(exc, KeyError):
        return ApiError(404, str(exc.args[0]) if exc.args else "not found")
    if isinstance(exc, LeaseError | IllegalTransition):
        return ApiError(409, str(exc))
    if isinstance(exc, ValueError):
        return ApiError(422, str(exc))
    raise exc


def build_app(
    runner: FleetRunner | None,
    users: UserDB,
    store: Path | None = None,
    origins: list[str] | None = None,
    runs: Path | None = None,
) -> Starlette:
    """``origins``: where a WebSocket may be opened from; ``runs``: the folder of loop runs (runs/loop)."""
    console = Console(runner, users, store, origins or [], runs)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def login(request: Request) -> Response:
        body = await _json_body(request)
        name, password = body.get("username"), body.get("password")
        if not isinstance(name, str) or not isinstance(password, str):
            raise ApiError(422, "username / password: both are required strings")
        if not console.limiter.allow(f"login:{name}"):
            raise ApiError(429, "too many login attempts; wait a moment")
        user = users.check_password(name, password)
        if user is None:
            raise ApiError(401, "wrong user name or password")
        session, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
        console.sessions[session] = (user, csrf, time.monotonic() + console.session_ttl_s)
        response = JSONResponse({"user": user.name, "role": user.role, "csrf": csrf})
        response.set_cookie(COOKIE, session, httponly=True, samesite="strict")
        return response

    async def logout(request: Request) -> Response:
        console.sessions.pop(request.cookies.get(COOKIE, ""), None)
        response = JSONResponse({"ok": True})
        response.delete_cookie(COOKIE)
        return response

    async def me(request: Request) -> Response:
        user = console.caller(request, "view")
        return JSONResponse({"user": user.name, "role": user.role})

    async def fleet_state(request: Request) -> Response:
        console.caller(request, "view")
        return JSONResponse(console.fleet().snapshot())

    async def robot_action(request: Request) -> Response:
        action, robot = request.path_params["action"], request.path_params["robot"]
        if action not in ROBOT_ACTIONS:
            raise ApiError(404, f"no action {action!r} (one of {', '.join(ROBOT_ACTIONS)})")
        user = console.caller(request, action, state_changing=True)
        limiter = console.command_limiter if action == "command" else console.limiter
        if not limiter.allow(user.name):
            raise ApiError(429, f"{user.name}: too many requests; at most {limiter.rate:g} a second")
        body = await _json_body(request)
        call = _operation(console, user, robot, action, body)
        try:  # on a worker thread: the event loop keeps serving while the control thread gets to it
            result = await anyio.to_thread.run_sync(console.fleet().call, call)
        except Exception as exc:
            raise _fleet_error(exc) from exc
        return JSONResponse({"ok": True, **(result or {})})

    async def episodes(request: Request) -> Response:
        console.caller(request, "view")
        clauses, params = [], []
        for field in ("task", "outcome", "robot"):
            value = request.query_params.get(field)
            if value:
                clauses.append(f"{field} = ?")
                params.append(value)
        version = request.query_params.get("policy_version")
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
            rows = store.index.episodes(" AND ".join(clauses), tuple(params))
            if version:  # the episodes with a step that version chose
                use = policy_version_use(store).get(version)
                chosen_by = set(use.episodes) if use is not None else set()
                rows = [r for r in rows if r.id in chosen_by]
            if actors:
                intervened = {s.episode for s in store.index.segments() if s.kind == "intervention"}
                rows = [r for r in rows if (r.id in intervened) == (actors == "intervened")]
        return JSONResponse([episode_card(row) for row in rows[-limit:]])

    async def episode(request: Request) -> Response:
        console.caller(request, "view")
        episode_id = requested_episode(request)
        with open_store(console.store) as store:
            row = episode_row(store, episode_id)
            data = store.episode(episode_id)
            segments = store.index.segments(episode=episode_id)
        return JSONResponse({
            **episode_card(row),
            "progress": np.round(data["progress"].astype(float), 4).tolist() if "progress" in data else [],
            "actor": [ACTORS[int(a)] for a in data["actor"]] if "actor" in data else [],
            "segments": [{"start": s.start, "stop": s.stop, "kind": s.kind, "source": s.source} for s in segments],
        })  # fmt: skip

    async def episode_step(request: Request) -> Response:
        """One step of a stored episode, for scrubbing: who acted, what it did, progress, and its cameras."""
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
        user = console.caller(request, "relabel", state_changing=True)
        episode_id = requested_episode(request)
        body = await _json_body(request)
        start, stop, kind = body.get("start"), body.get("stop"), body.get("kind")
        if not isinstance(start, int) or not isinstance(stop, int):
            raise ApiError(422, f"start / stop: expected whole step numbers, got {start!r} / {stop!r}")
        if kind not in CRITIC_KINDS:
            raise ApiError(422, f"kind: {kind!r} is not one of {', '.join(CRITIC_KINDS)}")
        write = partial(write_label, episode_id, start, stop, str(kind), user.name)
        try:
            if console.runner is not None:  # the running fleet holds the store for writing: its writer writes
                segment = await anyio.to_thread.run_sync(console.runner.call, lambda fleet: fleet.recorder.call(write))
            else:
                segment = await anyio.to_thread.run_sync(_write_to_store, console.store, write)
        except (KeyError, ValueError) as exc:
            raise _fleet_error(exc) from exc
        return JSONResponse({"ok": True, "segment": segment})

    async def camera(request: Request) -> Response:
        console.caller(request, "view")
        robot, name = request.path_params["robot"], request.query_params.get("camera", "front")

        def latest(fleet: Any) -> Any:
            obs = fleet.slot(robot).obs or {}
            cameras = sorted(k.removeprefix("images.") for k in obs if k.startswith("images."))
            if f"images.{name}" not in obs:
                raise KeyError(
                    f"camera: robot {robot} has no camera {name!r} (cameras: {', '.join(cameras) or 'none'})"
                )
            return np.asarray(obs[f"images.{name}"])

        try:
            frame = await anyio.to_thread.run_sync(console.fleet().call, latest)
        except KeyError as exc:
            raise _fleet_error(exc) from exc
        import imageio.v3 as iio

        png = iio.imwrite("<bytes>", frame, extension=".png")
        return Response(png, media_type="image/png", headers={"Cache-Control": "no-store"})

    async def run_list(request: Request) -> Response:
        console.caller(request, "view")
        return JSONResponse([run_card(path) for path in loop_runs(console.runs)])

    async def run(request: Request) -> Response:
        console.caller(request, "view")
        path = loop_run(console.runs, request.path_params["run"])
        summary = json.loads((path / "summary.json").read_text())
        plots = sorted(p.name for p in (path / "plots").glob("*.png")) if (path / "plots").is_dir() else []
        return JSONResponse({**summary, "plots": plots})

    async def run_plot(request: Request) -> Response:
        console.caller(request, "view")
        path = loop_run(console.runs, request.path_params["run"])
        plots = {p.name: p for p in (path / "plots").glob("*.png")} if (path / "plots").is_dir() else {}
        name = request.path_params["plot"]
        if name not in plots:  # only files listed in the run's plots folder: no path from the request is opened
            raise ApiError(404, f"plot: run {path.name} has no plot {name!r} ({', '.join(sorted(plots)) or 'none'})")
        return FileResponse(plots[name], media_type="image/png")

    async def stream(websocket: WebSocket) -> None:
        origin = websocket.headers.get("origin")
        if origin is not None and origin not in console.origins:
            await websocket.close(code=1008, reason=f"origin {origin} not allowed")
            return
        try:
            user = console.caller(websocket, "view")
        except ApiError as refusal:
            await websocket.close(code=1008, reason=refusal.detail)
            return
        await websocket.accept()
        await _serve_stream(console, websocket, user)

    async def on_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, HTTPException):
            return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
        log.exception("console: %s %s failed", request.method, request.url.path)
        return JSONResponse({"error": "internal error (see the console's log)"}, status_code=500)

    routes = [
        Route("/", index),
        Route("/api/login", login, methods=["POST"]),
        Route("/api/logout", logout, methods=["POST"]),
        Route("/api/me", me),
        Route("/api/fleet", fleet_state),
        Route("/api/robots/{robot}/{action}", robot_action, methods=["POST"]),
        Route("/api/episodes", episodes),
        Route("/api/episodes/{episode}", episode),
        Route("/api/episodes/{episode}/segments", relabel, methods=["POST"]),
        Route("/api/episodes/{episode}/steps/{step}", episode_step),
        Route("/api/episodes/{episode}/steps/{step}/image", episode_frame),
        Route("/api/robots/{robot}/image", camera),
        Route("/api/runs", run_list),
        Route("/api/runs/{run}", run),
        Route("/api/runs/{run}/plots/{plot}", run_plot),
        WebSocketRoute("/ws", stream),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: on_error, Exception: on_error})
    app.state.console = console
    return app


def _operation(console: Console, user: User, robot: str, action: str, body: dict[str, Any]) -> Callable[[Any], Any]:
    """The fleet call for ``action``, checked before it is queued; it runs on the control thread."""
    from vla_recover.teleop.devices import RemoteDevice

    name = user.name
    if robot != "all":  # an unknown robot is a 404 before any lease or body is looked at
        try:
            console.fleet().fleet.slot(robot)
        except KeyError as exc:
            raise _fleet_error(exc) from None
    if action in ("request_takeover", "reset", "pause", "resume"):
        reason = str(body.get("reason", ""))[:200]
        calls: dict[str, Callable[[Any], Any]] = {
            "request_takeover": lambda fleet: fleet.request_takeover(robot, name, reason or "requested in the console"),
            "reset": lambda fleet: fleet.reset(robot, name),
            "pause": lambda fleet: fleet.pause(robot, name),
            "resume": lambda fleet: fleet.resume(robot, name),
        }
        return calls[action]
    if action == "estop":
        return lambda fleet: fleet.estop(name, robot if robot != "all" else None)
    if action == "clear_estop":
        return lambda fleet: fleet.clear_estop(robot, name)
    if action == "takeover":

        def grant(fleet: Any) -> dict[str, Any]:
            lease = fleet.grant_takeover(robot, name, RemoteDevice())
            console.leases[robot] = (name, lease.token)
            return {"lease_expires_s": round(lease.expires - fleet.now(), 2)}

        return grant
    holder, token = console.leases.get(robot, ("", ""))
    if holder != name:
        raise ApiError(403, f"only the lease holder ({holder or 'nobody'}) can {action} {robot}")
    if action == "command":
        vector = _action_vector(body.get("action"))

        def command(fleet: Any) -> dict[str, Any]:
            lease = fleet.renew_lease(robot, token)  # a driver who keeps sending keeps the robot
            fleet.command(robot, token, vector)
            return {"lease_expires_s": round(lease.expires - fleet.now(), 2)}

        return command
    if action == "rewind":
        steps = body.get("steps")
        if steps is not None and (not isinstance(steps, int) or steps < 1):
            raise ApiError(422, f"steps: expected a whole number of steps >= 1 or null, got {steps!r}")
        return lambda fleet: {"steps_undone": fleet.rewind(robot, token, steps)}

    done = bool(body.get("correction_done", False))

    def release(fleet: Any) -> None:
        fleet.release_takeover(robot, token)
        console.leases.pop(robot, None)
        if done:
            fleet.event("correction_done", name, {}, robot)

    return release


async def _serve_stream(console: Console, websocket: WebSocket, user: User) -> None:
    """State at 10 Hz; teleop commands in (``{"type": "command", "robot": ..., "action": [...]}``)."""

    async def send_state() -> None:
        while True:
            snapshot = console.runner.snapshot() if console.runner is not None else NO_FLEET
            await websocket.send_json({"type": "fleet", **snapshot})
            await anyio.sleep(0.1)

    async def receive_commands() -> None:
        while True:
            raw = await websocket.receive_text()
            try:
                reply = await anyio.to_thread.run_sync(_stream_command, console, user, raw)
            except ApiError as refusal:
                reply = {"type": "error", "status": refusal.status_code, "error": refusal.detail}
            await websocket.send_json(reply)

    async def until_closed(job: Callable[[], Any], tasks: Any) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):  # the client left (or: sent to a closed socket)
            await job()
        tasks.cancel_scope.cancel()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(until_closed, send_state, tasks)
        tasks.start_soon(until_closed, receive_commands, tasks)


def _stream_command(console: Console, user: User, raw: str) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except json.JSONDecodeError:
        raise ApiError(400, "message: not valid JSON") from None
    if not isinstance(message, dict) or message.get("type") != "command":
        raise ApiError(400, 'message: expected {"type": "command", "robot": ..., "action": [...]}')
    if user.role not in PERMISSIONS["command"]:
        raise ApiError(403, f"{user.name} ({user.role}) may not command")
    if not console.command_limiter.allow(user.name):
        raise ApiError(429, f"{user.name}: too many commands; at most {console.command_limiter.rate:g} a second")
    robot = message.get("robot")
    if not isinstance(robot, str):
        raise ApiError(422, "robot: expected a robot name")
    call = _operation(console, user, robot, "command", message)
    try:
        console.fleet().call(call)
    except Exception as exc:
        raise _fleet_error(exc) from exc
    return {"type": "ack", "robot": robot}


def _write_to_store(path: Path | None, write: Callable[[Any], Any]) -> Any:
    with open_store(path, mode="a") as store:
        return write(store)
