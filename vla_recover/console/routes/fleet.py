"""The fleet: its state, operator actions on a robot, live camera frames and the WebSocket stream."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from vla_recover.console.access import PERMISSIONS, ROBOT_ACTIONS, ApiError, RateLimiter
from vla_recover.console.runner import PUBLISH_EVERY_S
from vla_recover.console.state import Console, console_of, fleet_error, json_body
from vla_recover.console.users import User
from vla_recover.fleet.views import SIZES, ViewFeed

__all__ = ["NO_FLEET", "ROUTES"]

NO_FLEET: dict[str, Any] = {  # what /ws streams when the console only browses a store
    "sim_time": 0.0, "ticks": 0, "finished": True, "running": False, "action_dim": 0, "robots": [], "queue": [],
    "allocation": "fifo", "control_dt": 0.0, "effort": {},
}  # fmt: skip
VIEW_POLL_S = 0.02  # how often a client's feed looks for new frames: a frame waits at most this long to be sent


async def fleet_state(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    return JSONResponse(console.fleet().snapshot())


async def robot_action(request: Request) -> Response:
    console = console_of(request)
    action, robot = request.path_params["action"], request.path_params["robot"]
    if action not in ROBOT_ACTIONS:
        raise ApiError(404, f"no action {action!r} (one of {', '.join(ROBOT_ACTIONS)})")
    user = console.caller(request, action, state_changing=True)
    _within_rate(console.command_limiter if action == "command" else console.limiter, user)
    body = await json_body(request)
    call = _operation(console, user, robot, action, body)
    try:  # on a worker thread: the event loop keeps serving while the control thread gets to it
        result = await anyio.to_thread.run_sync(console.fleet().call, call)
    except Exception as exc:
        raise fleet_error(exc) from exc
    return JSONResponse({"ok": True, **(result or {})})


async def camera(request: Request) -> Response:
    console = console_of(request)
    console.caller(request, "view")
    robot, name = request.path_params["robot"], request.query_params.get("camera", "front")

    def latest(fleet: Any) -> Any:
        obs = fleet.slot(robot).obs or {}
        cameras = sorted(k.removeprefix("images.") for k in obs if k.startswith("images."))
        if f"images.{name}" not in obs:
            raise KeyError(f"camera: robot {robot} has no camera {name!r} (cameras: {', '.join(cameras) or 'none'})")
        return np.asarray(obs[f"images.{name}"])

    try:
        frame = await anyio.to_thread.run_sync(console.fleet().call, latest)
    except KeyError as exc:
        raise fleet_error(exc) from exc
    import imageio.v3 as iio

    png = iio.imwrite("<bytes>", frame, extension=".png")
    return Response(png, media_type="image/png", headers={"Cache-Control": "no-store"})


async def view(request: Request) -> Response:
    """The newest frame of a sim robot's view (``size``: large, the driven robot's; thumb, a card's), asked for
    again with every request, so it is painted while someone watches (vla_recover.fleet.views)."""
    console = console_of(request)
    console.caller(request, "view")
    robot, size = request.path_params["robot"], request.query_params.get("size", "thumb")
    runner = console.fleet()
    try:
        slot = runner.fleet.slot(robot)
    except KeyError as exc:
        raise fleet_error(exc) from exc
    board = runner.fleet.views
    if board is None or not slot.worker.simulated:
        raise ApiError(404, f"view: robot {robot} has no painted view (sim robots of a console-run fleet have one)")
    try:
        board.want(robot, size)
    except ValueError as exc:
        raise fleet_error(exc) from exc
    frame = board.frame(robot)
    if frame is None:  # the first is painted after the robot's next step
        return Response(status_code=204, headers={"Cache-Control": "no-store", "Retry-After": "1"})
    jpeg, age = frame
    return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store", "X-Frame-Age": f"{age:.3f}"})


async def rewind_preview(request: Request) -> Response:
    """The driven robot as a rewind of ``steps`` (absent: to its last in-distribution state) would leave it, for the
    lease holder's rewind slider; the robot does not move."""
    console = console_of(request)
    user = console.caller(request, "rewind")
    robot, raw = request.path_params["robot"], request.query_params.get("steps")
    _within_rate(console.limiter, user)
    if raw is not None and (not raw.isdigit() or int(raw) < 1):
        raise ApiError(422, f"steps: expected a whole number of steps >= 1, got {raw[:20]!r}")
    steps = None if raw is None else int(raw)
    token = _lease_token(console, user.name, robot, "preview a rewind of")
    width, height, _ = SIZES["large"]
    try:
        frame = await anyio.to_thread.run_sync(
            console.fleet().call, lambda fleet: fleet.rewind_preview(robot, token, steps, width, height)
        )
    except Exception as exc:
        raise fleet_error(exc) from exc
    return Response(frame, media_type="image/jpeg", headers={"Cache-Control": "no-store"})


async def stream(websocket: WebSocket) -> None:
    console = console_of(websocket)
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


def _operation(console: Console, user: User, robot: str, action: str, body: dict[str, Any]) -> Callable[[Any], Any]:
    """The fleet call for ``action``, checked before it is queued; it runs on the control thread."""
    from vla_recover.teleop.kinds import make_device

    name = user.name
    if robot != "all":  # an unknown robot is a 404 before any lease or body is looked at
        try:
            console.fleet().fleet.slot(robot)
        except KeyError as exc:
            raise fleet_error(exc) from None
    if action in ("request_takeover", "reset", "confirm_reset", "pause", "resume"):
        reason = str(body.get("reason", ""))[:200]
        calls: dict[str, Callable[[Any], Any]] = {
            "request_takeover": lambda fleet: fleet.request_takeover(robot, name, reason or "requested in the console"),
            "reset": lambda fleet: fleet.reset(robot, name),
            "confirm_reset": lambda fleet: fleet.confirm_reset(robot, name),
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
            lease = fleet.grant_takeover(robot, name, make_device("remote"))
            console.leases[robot] = (name, lease.token)
            return {"lease_expires_s": round(lease.expires - fleet.now(), 2)}

        return grant
    token = _lease_token(console, name, robot, action)
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


def _within_rate(limiter: RateLimiter, user: User) -> None:
    if not limiter.allow(user.name):
        raise ApiError(429, f"{user.name}: too many requests; at most {limiter.rate:g} a second")


def _lease_token(console: Console, name: str, robot: str, action: str) -> str:
    """The lease token of ``robot`` when ``name`` holds it; a 403 naming the holder otherwise."""
    holder, token = console.leases.get(robot, ("", ""))
    if holder != name:
        raise ApiError(403, f"only the lease holder ({holder or 'nobody'}) can {action} {robot}")
    return token


def _action_vector(value: Any) -> np.ndarray:
    if not isinstance(value, list) or not value or not all(isinstance(v, int | float) for v in value):
        raise ApiError(422, f"action: expected a list of numbers, got {str(value)[:80]}")
    if not all(math.isfinite(v) for v in value):
        raise ApiError(422, "action: NaN or Inf")
    return np.asarray(value, dtype=np.float64)


async def _serve_stream(console: Console, websocket: WebSocket, user: User) -> None:
    """State ten times a second and the views the client watches (binary messages, vla_recover.fleet.views.ViewFeed);
    in: teleop commands (``{"type": "command", "robot": ..., "action": [...]}``) and what to watch (``{"type": "views",
    "views": {robot: "thumb" | "large"}}``)."""
    board = console.runner.fleet.views if console.runner is not None else None
    feed = ViewFeed(board) if board is not None else None

    async def send_state() -> None:
        while True:
            if console.runner is not None:
                await websocket.send_text(console.runner.snapshot_message())
            else:
                await websocket.send_json({"type": "fleet", **NO_FLEET})
            await anyio.sleep(PUBLISH_EVERY_S)

    async def send_views(feed: ViewFeed) -> None:
        while True:
            for message in feed.due():
                await websocket.send_bytes(message)
            await anyio.sleep(VIEW_POLL_S)

    async def receive_commands() -> None:
        while True:
            raw = await websocket.receive_text()
            try:
                reply = await anyio.to_thread.run_sync(_stream_command, console, user, raw, feed)
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
        if feed is not None:  # a console that only browses a store has no views
            tasks.start_soon(until_closed, partial(send_views, feed), tasks)


def _stream_command(console: Console, user: User, raw: str, feed: ViewFeed | None) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except json.JSONDecodeError:
        raise ApiError(400, "message: not valid JSON") from None
    if isinstance(message, dict) and message.get("type") == "views":
        return _watch(console, feed, message.get("views"))
    if not isinstance(message, dict) or message.get("type") != "command":
        raise ApiError(400, 'message: expected {"type": "command", ...} or {"type": "views", ...}')
    if user.role not in PERMISSIONS["command"]:
        raise ApiError(403, f"{user.name} ({user.role}) may not command")
    if not console.command_limiter.allow(user.name):
        raise ApiError(429, f"{user.name}: too many commands; at most {console.command_limiter.rate:g} a second")
    robot = message.get("robot")
    if not isinstance(robot, str):
        raise ApiError(422, "robot: expected a robot name")
    call = _operation(console, user, robot, "command", message)
    try:
        console.fleet().call(call, publish=False)
    except Exception as exc:
        raise fleet_error(exc) from exc
    return {"type": "ack", "robot": robot}


def _watch(console: Console, feed: ViewFeed | None, views: Any) -> dict[str, Any]:
    if not isinstance(views, dict) or not all(isinstance(r, str) and isinstance(s, str) for r, s in views.items()):
        raise ApiError(422, f"views: expected {{robot: size}}, got {str(views)[:80]}")
    if feed is None:
        if views:
            raise ApiError(404, "views: this console runs no fleet with painted views")
        return {"type": "watching", "views": {}}
    for robot in views:
        try:
            slot = console.fleet().fleet.slot(robot)
        except KeyError as exc:
            raise fleet_error(exc) from None
        if not slot.worker.simulated:
            raise ApiError(404, f"views.{robot}: not a sim robot; its cameras are at /api/robots/{robot}/image")
    try:
        feed.watch(views)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    return {"type": "watching", "views": views}


ROUTES: list[BaseRoute] = [
    Route("/api/fleet", fleet_state),
    Route("/api/robots/{robot}/{action}", robot_action, methods=["POST"]),
    Route("/api/robots/{robot}/image", camera),
    Route("/api/robots/{robot}/view", view),
    Route("/api/robots/{robot}/rewind_preview", rewind_preview),
    WebSocketRoute("/ws", stream),
]
