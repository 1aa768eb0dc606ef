"""``vla-recover serve``: one policy on one device answering many clients, their requests batched into one forward.

Requests that arrive while a forward runs (or within ``max_wait_ms`` of the first) share the next forward, up to
``max_batch_rows`` rows. Each row's chunk is sampled from its own seed (`Policy.predict_chunk` with one seed per row),
so a robot's actions do not depend on which other requests shared its batch. Forwards run one at a time on a single
thread beside the event loop, which keeps reading, checking and queueing requests meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from vla_recover.serving.protocol import ChunkRequest, InputSpec, RequestError, decode_request, encode_reply

__all__ = ["PolicyServer", "ServeConfig", "build_app"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    token: str
    device: str = "auto"
    max_wait_ms: float = 1.0  # after the first request of a batch, how long to wait for more
    max_batch_rows: int = 64  # rows of one forward
    max_rows: int = 256  # rows of one request
    max_body_bytes: int = 64 * 2**20


@dataclass
class _Pending:
    request: ChunkRequest
    reply: asyncio.Future[tuple[np.ndarray, int]]
    queued: float = field(default_factory=time.perf_counter)


class PolicyServer:
    """A checkpoint loaded on its device, sampled through its traces, and the queue its forwards drain."""

    def __init__(self, checkpoint: str | Path, config: ServeConfig) -> None:
        from vla_recover.devices import resolve_device
        from vla_recover.policies.common.checkpoint import Checkpoint

        if not config.token:
            raise ValueError("token: empty; the server answers only clients that present the shared token")
        self.config = config
        opened = Checkpoint.open(checkpoint)
        self.device = resolve_device(config.device)
        self.policy, self.embedder = opened.load(self.device)
        self.policy.trace_networks()  # as evaluation and the fleet sample (vla_recover.fleet.inference)
        self.version = opened.version
        cfg = self.policy.config
        keys = ([cfg.state_key] if cfg.state_key else []) + list(cfg.image_keys)
        self.spec = InputSpec(
            shapes={key: tuple(self.policy.shapes[key]) for key in keys},
            dtypes={key: "uint8" if key in cfg.image_keys else "float32" for key in keys},
            obs_horizon=cfg.obs_horizon,
            use_language=cfg.use_language,
            max_rows=config.max_rows,
        )
        self._queue: asyncio.Queue[_Pending] | None = None
        self._forwards = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy-forward")
        self.stats = {"requests": 0, "rows": 0, "forwards": 0, "refused": 0}

    def info(self) -> dict[str, Any]:
        import torch

        cfg = self.policy.config
        return {
            "version": self.version,
            "policy": self.policy.name,
            "device": str(self.device),
            "cpu_threads": torch.get_num_threads(),
            "action_dim": self.policy.action_dim,
            "action_horizon": cfg.action_horizon,
            "action_exec": cfg.action_exec,
            **self.spec.describe(),
            "stats": dict(self.stats),
        }

    async def chunks(self, request: ChunkRequest) -> tuple[np.ndarray, int]:
        """This request's chunks and the rows of the forward that made them."""
        if self._queue is None:
            self._queue = asyncio.Queue()
            asyncio.get_running_loop().create_task(self._drain(self._queue))
        pending = _Pending(request, asyncio.get_running_loop().create_future())
        await self._queue.put(pending)
        return await pending.reply

    async def _drain(self, queue: asyncio.Queue[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = [await queue.get()]
            deadline = loop.time() + self.config.max_wait_ms / 1000
            while sum(p.request.rows for p in batch) < self.config.max_batch_rows:
                if not queue.empty():
                    batch.append(queue.get_nowait())
                    continue
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(queue.get(), left))
                except TimeoutError:
                    break
            try:
                actions = await loop.run_in_executor(self._forwards, self._forward, [p.request for p in batch])
            except Exception as exc:  # a forward that fails fails its requests, not the server
                log.exception("forward failed")
                for pending in batch:
                    pending.reply.set_exception(exc)
                continue
            rows = len(actions)
            start = 0
            for pending in batch:
                end = start + pending.request.rows
                if not pending.reply.done():
                    pending.reply.set_result((actions[start:end], rows))
                start = end

    def _forward(self, requests: list[ChunkRequest]) -> np.ndarray:
        batch = {key: np.concatenate([r.inputs[key] for r in requests]) for key in self.spec.shapes}
        if self.spec.use_language:
            batch["instruction_embedding"] = self.embedder.embed([text for r in requests for text in r.instructions])
        seeds = [seed for r in requests for seed in r.seeds]
        actions = self.policy.predict_chunk(batch, seed=seeds)
        self.stats["forwards"] += 1
        return actions

    def close(self) -> None:
        self._forwards.shutdown(wait=False, cancel_futures=True)


def build_app(server: PolicyServer) -> Starlette:
    """``GET /v1/info`` and ``POST /v1/chunks`` (vla_recover.serving.protocol), both behind the shared token."""
    expected = f"Bearer {server.config.token}".encode()

    def refuse(message: str, status: int) -> JSONResponse:
        server.stats["refused"] += 1
        return JSONResponse({"error": message}, status_code=status)

    def authorised(request: Request) -> bool:
        return hmac.compare_digest(request.headers.get("authorization", "").encode(), expected)

    async def info(request: Request) -> Response:
        if not authorised(request):
            return refuse("authorization: missing or wrong token (send 'Authorization: Bearer <token>')", 401)
        return JSONResponse(server.info())

    async def chunks(request: Request) -> Response:
        if not authorised(request):
            return refuse("authorization: missing or wrong token (send 'Authorization: Bearer <token>')", 401)
        limit = server.config.max_body_bytes
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            return refuse(f"body: {declared} bytes, over the server's limit of {limit}", 413)
        body = bytearray()
        async for part in request.stream():
            body += part
            if len(body) > limit:
                return refuse(f"body: over the server's limit of {limit} bytes", 413)
        try:
            decoded = decode_request(bytes(body), server.spec)
        except RequestError as exc:
            return refuse(str(exc), exc.status)
        server.stats["requests"] += 1
        server.stats["rows"] += decoded.rows
        try:
            actions, rows = await server.chunks(decoded)
        except Exception as exc:
            return JSONResponse({"error": f"forward failed: {exc}"}, status_code=500)
        return Response(encode_reply(actions, server.version, rows), media_type="application/octet-stream")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        server.close()

    routes = [Route("/v1/info", info, methods=["GET"]), Route("/v1/chunks", chunks, methods=["POST"])]
    return Starlette(routes=routes, lifespan=lifespan)
