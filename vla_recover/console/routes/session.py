"""Signing in and out: browser sessions (a cookie and a CSRF token) and who is asking."""

from __future__ import annotations

import secrets
import time

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from vla_recover.console.access import ApiError
from vla_recover.console.state import COOKIE, STATIC, console_of, json_body

__all__ = ["ROUTES"]


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html")


async def login(request: Request) -> Response:
    console = console_of(request)
    body = await json_body(request)
    name, password = body.get("username"), body.get("password")
    if not isinstance(name, str) or not isinstance(password, str):
        raise ApiError(422, "username / password: both are required strings")
    if not console.limiter.allow(f"login:{name}"):
        raise ApiError(429, "too many login attempts; wait a moment")
    user = console.users.check_password(name, password)
    if user is None:
        raise ApiError(401, "wrong user name or password")
    session, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(16)
    console.sessions[session] = (user, csrf, time.monotonic() + console.session_ttl_s)
    response = JSONResponse({"user": user.name, "role": user.role, "csrf": csrf})
    response.set_cookie(COOKIE, session, httponly=True, samesite="strict")
    return response


async def logout(request: Request) -> Response:
    console = console_of(request)
    console.sessions.pop(request.cookies.get(COOKIE, ""), None)
    response = JSONResponse({"ok": True})
    response.delete_cookie(COOKIE)
    return response


async def me(request: Request) -> Response:
    console = console_of(request)
    user = console.caller(request, "view")
    return JSONResponse({"user": user.name, "role": user.role})


ROUTES: list[BaseRoute] = [
    Route("/", index),
    Route("/api/login", login, methods=["POST"]),
    Route("/api/logout", logout, methods=["POST"]),
    Route("/api/me", me),
]
