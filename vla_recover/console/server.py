"""The console's ASGI app: a JSON API over the fleet's operator API and the store, a WebSocket stream of fleet
state, and the static front end. The routes live in `console.routes`, one module per concern (sessions, the fleet,
the store, loop runs); the state they share is `console.state.Console`.

Every endpoint checks the caller's role (`console.access.PERMISSIONS`; the store and loop runs are read through
`console.records`); a browser session is a cookie plus a CSRF token that every
state-changing request repeats in ``X-CSRF-Token``; scripts send ``Authorization: Bearer <token>``. Operator
actions are rate-limited per user, go to the fleet between two ticks (`FleetRunner.call`) and are events in the
store under the user's name. Errors come back as ``{"error": ...}`` with the status that fits, never a traceback.
"""

from __future__ import annotations

import logging
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from vla_recover.console.access import PERMISSIONS, RateLimiter
from vla_recover.console.routes import ROUTES
from vla_recover.console.runner import FleetRunner
from vla_recover.console.state import STATIC, Console
from vla_recover.console.users import UserDB

__all__ = ["PERMISSIONS", "RateLimiter", "build_app"]  # the first two re-exported from console.access

log = logging.getLogger(__name__)


def build_app(
    runner: FleetRunner | None,
    users: UserDB,
    store: Path | None = None,
    origins: list[str] | None = None,
    runs: Path | None = None,
) -> Starlette:
    """``origins``: where a WebSocket may be opened from; ``runs``: the folder of loop runs (runs/loop)."""
    routes = [*ROUTES, Mount("/static", StaticFiles(directory=STATIC), name="static")]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _on_error, Exception: _on_error})
    app.state.console = Console(runner, users, store, origins or [], runs)
    return app


async def _on_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return JSONResponse({"error": exc.detail}, status_code=exc.status_code)
    log.exception("console: %s %s failed", request.method, request.url.path)
    return JSONResponse({"error": "internal error (see the console's log)"}, status_code=500)
