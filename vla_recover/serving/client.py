"""A client of ``vla-recover serve``: one kept-alive HTTP connection, the shared token, errors with the server's
words."""

from __future__ import annotations

import http.client
import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from vla_recover.serving.protocol import TOKEN_ENV, decode_reply, encode_request

__all__ = ["PolicyClient", "ServerError"]


class ServerError(RuntimeError):
    """The server refused a request (``status``: its HTTP status) or could not be reached (``status`` None); the
    message says which and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class PolicyClient:
    """Not thread-safe: one client per thread (a connection carries one request at a time)."""

    def __init__(self, url: str, token: str | None = None, timeout_s: float = 10.0) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"remote: got {url!r}; expected http://HOST:PORT of a `vla-recover serve`")
        self.url, self.host, self.port = url, parts.hostname, parts.port or 80
        token = token if token is not None else os.environ.get(TOKEN_ENV, "")
        if not token:
            raise ValueError(f"token: none given and {TOKEN_ENV} is not set; the server needs its shared token")
        self.headers = {"Authorization": f"Bearer {token}"}
        self.timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None

    def info(self, wait_s: float = 0.0) -> dict[str, Any]:
        """What the served policy reads and writes (``GET /v1/info``); ``wait_s``: how long to keep trying a server
        that does not answer yet (one starting up)."""
        result: dict[str, Any] = json.loads(self._call("GET", "/v1/info", None, {}, wait_s))
        return result

    def chunks(
        self,
        inputs: dict[str, np.ndarray],
        seeds: list[int],
        instructions: list[str] | None = None,
        wait_s: float = 0.0,
    ) -> tuple[np.ndarray, dict[str, str]]:
        """Action chunks (B, H, A) for B observation windows, one seed each, and the reply's metadata (``version``,
        ``batch``); ``wait_s``: how long to keep trying a server that cannot be reached (one restarting)."""
        body = encode_request(inputs, seeds, instructions)
        reply = self._call("POST", "/v1/chunks", body, {"Content-Type": "application/octet-stream"}, wait_s)
        return decode_reply(reply)

    def _call(self, method: str, path: str, body: bytes | None, headers: dict[str, str], wait_s: float = 0.0) -> bytes:
        """One request; a server that cannot be reached is tried again until ``wait_s`` has passed, a refusal is
        raised at once."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return self._call_once(method, path, body, headers)
            except ServerError as exc:
                if exc.status is not None or time.monotonic() >= deadline:
                    if exc.status is None and wait_s > 0:
                        raise ServerError(f"{exc} (unreachable for {wait_s:g} s)") from exc
                    raise
                time.sleep(0.2)

    def _call_once(self, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> bytes:
        for attempt in (0, 1):  # a kept-alive connection the server closed is opened again, once
            connection = self._connect()
            try:
                connection.request(method, path, body=body, headers={**self.headers, **headers})
                response = connection.getresponse()
                data = response.read()
            except (ConnectionError, http.client.HTTPException, TimeoutError, OSError) as exc:
                self.close()
                if attempt:
                    raise ServerError(f"{self.url}{path}: {exc}") from exc
                continue
            if response.status != 200:
                try:
                    message = json.loads(data)["error"]
                except (ValueError, KeyError, TypeError):
                    message = data[:200].decode(errors="replace")
                raise ServerError(f"{self.url}{path}: {response.status} {message}", response.status)
            return data
        raise AssertionError("unreachable")

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            self._connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        return self._connection

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
