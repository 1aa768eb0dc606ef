"""A policy server in a child process, for benchmarks, tests and scripts that need one for a while."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from vla_recover.serving.client import PolicyClient, ServerError
from vla_recover.serving.protocol import TOKEN_ENV

__all__ = ["free_port", "policy_server"]


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (for a server a test or benchmark starts)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def policy_server(
    policy: str | Path,
    device: str = "cpu",
    threads: int = 0,
    max_wait_ms: float = 1.0,
    wait_s: float = 120.0,
) -> Iterator[tuple[str, str]]:
    """``vla-recover serve`` on loopback for the ``with`` block: yields (its URL, its token) once it answers."""
    port, token = free_port(), secrets.token_urlsafe(16)
    command = [
        sys.executable, "-m", "vla_recover", "serve", "--policy", str(policy), "--port", str(port),
        "--device", device, "--threads", str(threads), "--max-wait-ms", str(max_wait_ms),
    ]  # fmt: skip
    server = subprocess.Popen(command, env={**os.environ, TOKEN_ENV: token}, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            PolicyClient(url, token).info(wait_s=wait_s)
        except ServerError as exc:
            code = server.poll()
            raise RuntimeError(f"the policy server for {policy} did not start (exit code {code}): {exc}") from None
        yield url, token
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
