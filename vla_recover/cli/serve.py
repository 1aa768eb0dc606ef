"""`vla-recover serve`: a policy server for fleets and robot nodes (vla_recover.serving)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Annotated

import typer

from vla_recover.cli.common import console, user_errors
from vla_recover.devices import DEVICE_HELP

__all__ = ["serve"]


def serve(
    policy: Annotated[Path, typer.Option(help="policy checkpoint directory")],
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8700,
    host: Annotated[str, typer.Option(help="address to bind; loopback unless you mean it")] = "127.0.0.1",
    device: Annotated[str, typer.Option(help=DEVICE_HELP)] = "auto",
    max_wait_ms: Annotated[
        float, typer.Option(help="after a batch's first request, wait this long for others to share its forward", min=0)
    ] = 1.0,
    max_batch_rows: Annotated[int, typer.Option(help="rows of one forward", min=1, max=4096)] = 64,
    threads: Annotated[
        int, typer.Option(help="torch CPU threads; 0: one fewer than the cores, leaving one to answer requests", min=0)
    ] = 0,
) -> None:
    """Serve a policy's action chunks over HTTP to many clients, batching what arrives together into one forward.

    The shared token is read from VLA_RECOVER_SERVE_TOKEN; without one, a new token is made and printed."""
    import torch
    import uvicorn

    from vla_recover.serving.protocol import TOKEN_ENV
    from vla_recover.serving.server import PolicyServer, ServeConfig, build_app

    token = os.environ.get(TOKEN_ENV, "")
    made = not token
    if made:
        token = secrets.token_urlsafe(24)
    # Forwards that take every core starve the event loop reading the next requests: on 2 cores, 12 robots asking
    # every step are answered in 19 ms (p50) with 1 thread and in 96 ms with 2 (benchmarks/serve_latency.py).
    torch.set_num_threads(threads or max(1, _usable_cores() - 1))
    with user_errors():
        if not (policy / "config.json").is_file():
            raise FileNotFoundError(f"policy: {policy} is not a policy checkpoint (no config.json)")
        server = PolicyServer(
            policy, ServeConfig(token, device, max_wait_ms=max_wait_ms, max_batch_rows=max_batch_rows)
        )
    console.print(f"serving {server.version} on {server.device} at http://{host}:{port}/v1/chunks; Ctrl-C stops")
    if made:
        console.print(f"token (give clients {TOKEN_ENV}={token})", highlight=False)
    uvicorn.run(build_app(server), host=host, port=port, log_level="warning")


def _usable_cores() -> int:
    """The cores this process may run on (its affinity, where the OS has one: Linux; else every core)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
