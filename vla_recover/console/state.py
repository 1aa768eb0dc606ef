"""What every console route shares: the app's state (users, sessions, leases, the fleet runner) and its errors."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from starlette.requests import HTTPConnection, Request

from vla_recover.console.access import PERMISSIONS, ApiError, RateLimiter
from vla_recover.console.runner import FleetRunner
from vla_recover.console.users import User, UserDB

__all__ = ["COOKIE", "STATIC", "Console", "console_of", "fleet_error", "json_body"]

STATIC = Path(__file__).parent / "static"
COOKIE = "vla_session"


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


def console_of(connection: HTTPConnection) -> Console:
    """The console an app was built with (``build_app`` keeps it in ``app.state``)."""
    console: Console = connection.app.state.console
    return console


async def json_body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json() if await request.body() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ApiError(400, "body: not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(body).__name__}")
    return body


def fleet_error(exc: Exception) -> ApiError:
    from vla_recover.fleet.states import IllegalTransition
    from vla_recover.teleop.lease import LeaseError

    if isinstance(exc, KeyError):
        return ApiError(404, str(exc.args[0]) if exc.args else "not found")
    if isinstance(exc, LeaseError | IllegalTransition):
        return ApiError(409, str(exc))
    if isinstance(exc, ValueError):
        return ApiError(422, str(exc))
    raise exc
