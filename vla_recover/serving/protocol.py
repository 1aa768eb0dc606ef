"""The policy server's wire format: observation windows in, action chunks out, both as safetensors bodies.

``POST /v1/chunks`` with ``Authorization: Bearer <token>`` and a safetensors body holding one array per policy input
(``obs.state`` (B, To, D) float32, ``obs.images.<cam>`` (B, To, H, W, 3) uint8) and ``seed`` (B,) int64, one
sampling seed per row; a policy that reads instructions takes them as the JSON list ``instructions`` in the body's
metadata. The answer is a safetensors body with ``action`` (B, H, A) float32 in the environment's units and the
metadata ``version`` (the checkpoint's id) and ``batch`` (the rows of the forward it shared). ``GET /v1/info`` says
what the policy reads and writes. Errors are JSON ``{"error": ...}`` naming the field and the value: 400 malformed,
401 no or wrong token, 413 too large.

safetensors carries dtype and shape in a JSON header and nothing executable, so a request cannot run code on the
server, and numpy reads it without copying.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load, save

__all__ = [
    "TOKEN_ENV",
    "ChunkRequest",
    "InputSpec",
    "RequestError",
    "decode_reply",
    "decode_request",
    "encode_reply",
    "encode_request",
]

TOKEN_ENV = "VLA_RECOVER_SERVE_TOKEN"  # where the server and its clients read the shared token


class RequestError(ValueError):
    """A request the server refuses; ``status`` is the HTTP status it answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class InputSpec:
    """What one policy reads: each input's per-step shape and dtype, the observation horizon, the row limit."""

    shapes: dict[str, tuple[int, ...]]  # per observation step, without the batch and time axes
    dtypes: dict[str, str]
    obs_horizon: int
    use_language: bool
    max_rows: int

    def describe(self) -> dict[str, Any]:
        return {
            "inputs": {key: {"shape": list(shape), "dtype": self.dtypes[key]} for key, shape in self.shapes.items()},
            "obs_horizon": self.obs_horizon,
            "use_language": self.use_language,
            "max_rows": self.max_rows,
        }


@dataclass
class ChunkRequest:
    inputs: dict[str, np.ndarray]
    seeds: list[int]
    instructions: list[str] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return len(self.seeds)


def encode_request(inputs: dict[str, np.ndarray], seeds: list[int], instructions: list[str] | None = None) -> bytes:
    arrays = {key: np.ascontiguousarray(value) for key, value in inputs.items()}
    arrays["seed"] = np.asarray(seeds, dtype=np.int64)
    metadata = {"instructions": json.dumps(instructions)} if instructions is not None else None
    return save(arrays, metadata=metadata)


def decode_request(body: bytes, spec: InputSpec) -> ChunkRequest:
    """The request in ``body``, checked against what the policy reads; a `RequestError` names what is wrong."""
    try:
        arrays = load(body)
        metadata = _metadata(body)
    except (SafetensorError, ValueError, json.JSONDecodeError) as exc:
        raise RequestError(f"body: not a safetensors request ({exc})") from None
    if "seed" not in arrays:
        raise RequestError("seed: missing; one int64 sampling seed per row is required")
    seeds = arrays.pop("seed")
    if seeds.ndim != 1 or seeds.dtype != np.int64 or not 1 <= len(seeds) <= spec.max_rows:
        raise RequestError(
            f"seed: got {seeds.dtype} of shape {list(seeds.shape)}; expected int64 of shape [B], 1 <= B <= "
            f"{spec.max_rows}"
        )
    rows = len(seeds)
    unknown = sorted(set(arrays) - set(spec.shapes))
    if unknown:
        raise RequestError(f"{unknown[0]}: not an input of this policy (it reads {', '.join(spec.shapes)})")
    for key, shape in spec.shapes.items():
        if key not in arrays:
            raise RequestError(f"{key}: missing; the policy reads {', '.join(spec.shapes)}")
        value, expected = arrays[key], (rows, spec.obs_horizon, *shape)
        if value.shape != expected or value.dtype != np.dtype(spec.dtypes[key]):
            raise RequestError(
                f"{key}: got {value.dtype} of shape {list(value.shape)}; expected {spec.dtypes[key]} of shape "
                f"{list(expected)}"
            )
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise RequestError(f"{key}: holds NaN or Inf")
    instructions: list[str] = []
    if spec.use_language:
        raw = metadata.get("instructions")
        instructions = json.loads(raw) if raw else []
        if not (isinstance(instructions, list) and len(instructions) == rows and all(
            isinstance(text, str) for text in instructions
        )):  # fmt: skip
            raise RequestError(f"instructions: expected a JSON list of {rows} strings in the metadata, got {raw!r}")
    return ChunkRequest(arrays, [int(seed) for seed in seeds], instructions)


def encode_reply(actions: np.ndarray, version: str, batch: int) -> bytes:
    return save({"action": np.ascontiguousarray(actions, dtype=np.float32)}, {"version": version, "batch": str(batch)})


def decode_reply(body: bytes) -> tuple[np.ndarray, dict[str, str]]:
    return load(body)["action"], _metadata(body)


def _metadata(body: bytes) -> dict[str, str]:
    """The safetensors header's ``__metadata__`` (its first 8 bytes are the header's length)."""
    if len(body) < 8:
        raise ValueError("shorter than a safetensors header")
    size = int.from_bytes(body[:8], "little")
    if size > len(body) - 8:
        raise ValueError("header longer than the body")
    header = json.loads(body[8 : 8 + size])
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise ValueError("__metadata__ is not an object")
    return {str(k): str(v) for k, v in metadata.items()}
