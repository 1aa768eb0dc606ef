"""LeRobotDataset v3.0 as files: paths, feature specs, key names, and arrow <-> numpy conversion.

Shared by the export and import halves (``vla_recover.data.lerobot``). A v3.0 dataset directory holds::

    meta/info.json                                     fps, features (dtype, shape, names), file layout
    meta/stats.json                                    per-feature min/max/mean/std/count/quantiles
    meta/tasks.parquet                                 task strings (the pandas index) -> task_index
    meta/episodes/chunk-CCC/file-FFF.parquet           one row per episode: length, row range, file indices
    data/chunk-CCC/file-FFF.parquet                    one row per frame; images embedded as {bytes, path}
    videos/<key>/chunk-CCC/file-FFF.mp4                video features, episodes one after another in a file

``meta/vla_recover.json`` is ours: what LeRobot's layout cannot say (outcome, robot, phases, per-episode info, the
names behind integer codes), so that a store survives export and re-import unchanged. LeRobot ignores it.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.data.schema import SchemaError

__all__ = [
    "CODEBASE_VERSION",
    "INDEX_FEATURES",
    "OURS_META",
    "Feature",
    "LeRobotFormatError",
    "column_to_numpy",
    "decode_image",
    "encode_png",
    "from_lerobot_key",
    "parse_features",
    "read_episode_meta",
    "read_info",
    "read_tasks",
    "require",
    "to_lerobot_key",
]

CODEBASE_VERSION = "v3.0"
INFO = "meta/info.json"
STATS = "meta/stats.json"
TASKS = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
OURS_META = "meta/vla_recover.json"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE + ".parquet"
CHUNKS_SIZE = 1000  # files per chunk folder
INDEX_FEATURES: dict[str, str] = {
    "timestamp": "float32",
    "frame_index": "int64",
    "episode_index": "int64",
    "index": "int64",
    "task_index": "int64",
}
NUMERIC_DTYPES = frozenset(
    ("bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64")
)
VISUAL_DTYPES = frozenset(("image", "video"))
# our key <-> LeRobot's name, beyond the obs./observation. prefix
_NEXT = {"reward": "next.reward", "done": "next.done", "success": "next.success"}


class LeRobotFormatError(SchemaError):
    """A LeRobot dataset that cannot be read or written as asked; the message names the file and the key."""


def require(module: str) -> Any:
    """Import an optional dependency of the LeRobot adapter, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        package = {"pyarrow.parquet": "pyarrow", "pyarrow.compute": "pyarrow", "PIL.Image": "pillow"}.get(
            module, module
        )
        raise LeRobotFormatError(
            f"the LeRobot adapter needs the Python package {package!r}: pip install {package}"
        ) from None


def to_lerobot_key(key: str) -> str:
    if key.startswith("obs."):
        return "observation." + key[len("obs.") :]
    return _NEXT.get(key, key)


def from_lerobot_key(name: str) -> str:
    if name.startswith("observation."):
        return "obs." + name[len("observation.") :]
    if name.startswith("next."):
        return name[len("next.") :]
    return name


@dataclass(frozen=True)
class Feature:
    """One entry of info.json's ``features``."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    names: Any = None
    info: dict[str, Any] | None = None

    @property
    def visual(self) -> bool:
        return self.dtype in VISUAL_DTYPES

    @property
    def hwc(self) -> tuple[int, int, int]:
        """Image shape as (height, width, channels), whichever order info.json lists it in."""
        if len(self.shape) != 3:
            raise LeRobotFormatError(f"feature {self.name!r}: image shape must have 3 dims, got {list(self.shape)}")
        first = str(self.names[0]).lower() if isinstance(self.names, list) and self.names else ""
        if first in ("channels", "channel", "c"):
            return self.shape[1], self.shape[2], self.shape[0]
        return self.shape[0], self.shape[1], self.shape[2]

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape), "names": self.names}
        if self.info is not None:
            out["info"] = self.info
        return out

    def hf_json(self) -> dict[str, Any]:
        """The feature as Hugging Face ``datasets`` describes it in a parquet file's schema metadata."""
        if self.dtype == "image":
            return {"_type": "Image"}
        value = {"dtype": self.dtype, "_type": "Value"}
        if self.shape == (1,):
            return value
        return {"feature": value, "length": self.size, "_type": "List"}


def read_json(path: Path) -> Any:
    if not path.is_file():
        raise LeRobotFormatError(f"{path}: missing (not a LeRobot v3.0 dataset directory?)")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise LeRobotFormatError(f"{path}: not valid JSON ({exc})") from None


def read_info(root: Path) -> dict[str, Any]:
    path = root / INFO
    if not root.is_dir():
        raise LeRobotFormatError(f"{root}: no such dataset directory")
    info = read_json(path)
    if not isinstance(info, dict):
        raise LeRobotFormatError(f"{path}: expected a JSON object")
    version = info.get("codebase_version")
    if version != CODEBASE_VERSION:
        raise LeRobotFormatError(
            f"{path}: codebase_version {version!r} is not supported; this adapter reads {CODEBASE_VERSION!r} "
            "(convert older datasets with LeRobot's own v2.1 -> v3.0 converter)"
        )
    for field in ("fps", "features"):
        if field not in info:
            raise LeRobotFormatError(f"{path}: key {field!r} is missing")
    if not isinstance(info["fps"], int | float) or info["fps"] <= 0:
        raise LeRobotFormatError(f"{path}: key 'fps' must be a positive number, got {info['fps']!r}")
    return info


def parse_features(info: dict[str, Any], path: Path) -> dict[str, Feature]:
    raw = info["features"]
    if not isinstance(raw, dict):
        raise LeRobotFormatError(f"{path}: key 'features' must be an object")
    features = {}
    for name, spec in raw.items():
        try:
            shape = tuple(int(n) for n in spec["shape"])
            dtype = str(spec["dtype"])
        except (KeyError, TypeError, ValueError):
            raise LeRobotFormatError(f"{path}: feature {name!r} needs a 'dtype' and an integer 'shape'") from None
        if dtype not in NUMERIC_DTYPES | VISUAL_DTYPES | {"string"}:
            raise LeRobotFormatError(f"{path}: feature {name!r} has unsupported dtype {dtype!r}")
        features[name] = Feature(name, dtype, shape, spec.get("names"), spec.get("info"))
    missing = sorted(set(INDEX_FEATURES) - set(features))
    if missing:
        raise LeRobotFormatError(f"{path}: features {missing} are missing (every v3.0 dataset has them)")
    return features


def read_tasks(root: Path) -> dict[int, str]:
    """task_index -> task string. LeRobot writes the string as the pandas index column."""
    pq = require("pyarrow.parquet")
    path = root / TASKS
    if not path.is_file():
        raise LeRobotFormatError(f"{path}: missing")
    table = pq.read_table(path)
    names = table.column_names
    if "task_index" not in names:
        raise LeRobotFormatError(f"{path}: column 'task_index' is missing")
    text_column = "task" if "task" in names else None
    if text_column is None:
        pandas_meta = json.loads((table.schema.metadata or {}).get(b"pandas", b"{}"))
        index_columns = [c for c in pandas_meta.get("index_columns", []) if isinstance(c, str)]
        text_column = index_columns[0] if index_columns else None
    if text_column is None or text_column not in names:
        raise LeRobotFormatError(f"{path}: no task string column ('task' or the pandas index)")
    indices = table.column("task_index").to_pylist()
    texts = table.column(text_column).to_pylist()
    return {int(i): str(t) for i, t in zip(indices, texts, strict=True)}


def read_episode_meta(root: Path) -> list[dict[str, Any]]:
    """Episode rows (without their stats columns), sorted by episode_index."""
    pq = require("pyarrow.parquet")
    paths = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not paths:
        raise LeRobotFormatError(f"{root / EPISODES_DIR}: no episode metadata files (chunk-*/file-*.parquet)")
    rows: list[dict[str, Any]] = []
    needed = ("episode_index", "length", "dataset_from_index", "dataset_to_index")
    for path in paths:
        schema = pq.read_schema(path)
        missing = [c for c in needed if c not in schema.names]
        if missing:
            raise LeRobotFormatError(f"{path}: columns {missing} are missing")
        columns = [c for c in schema.names if not c.startswith("stats/")]
        rows.extend(pq.read_table(path, columns=columns).to_pylist())
    rows.sort(key=lambda row: int(row["episode_index"]))
    return rows


def _flatten(array: Any, feature: Feature, path: Path) -> Any:
    """Strip list levels off an arrow array, checking each row holds exactly ``feature.size`` values."""
    pa = require("pyarrow")
    rows = len(array)
    while True:
        if isinstance(array.type, pa.ExtensionType):
            array = array.storage
        elif (
            pa.types.is_fixed_size_list(array.type)
            or pa.types.is_list(array.type)
            or pa.types.is_large_list(array.type)
        ):
            array = array.flatten()
        else:
            break
    if len(array) != rows * feature.size:
        raise LeRobotFormatError(
            f"{path}: column {feature.name!r} holds {len(array)} values for {rows} rows; "
            f"info.json declares shape {list(feature.shape)} ({feature.size} per row)"
        )
    return array


def column_to_numpy(column: Any, feature: Feature, path: Path) -> np.ndarray:
    """A non-visual column as (rows, *shape) in the declared dtype."""
    pa = require("pyarrow")
    pc = require("pyarrow.compute")
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        raise LeRobotFormatError(f"{path}: column {feature.name!r} has {array.null_count} missing values")
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        lengths = np.asarray(pc.list_value_length(array).to_numpy(zero_copy_only=False))
        inner = feature.shape[0] if feature.shape else 1
        bad = np.flatnonzero(lengths != inner)
        if bad.size:
            raise LeRobotFormatError(
                f"{path}: column {feature.name!r} row {int(bad[0])} has {int(lengths[bad[0]])} values; "
                f"info.json declares shape {list(feature.shape)}"
            )
    rows = len(array)
    flat = _flatten(array, feature, path)
    values = np.asarray(flat.to_numpy(zero_copy_only=False))
    try:
        values = values.astype(np.dtype(feature.dtype), copy=False)
    except (TypeError, ValueError):
        raise LeRobotFormatError(
            f"{path}: column {feature.name!r} of type {array.type} does not convert to {feature.dtype}"
        ) from None
    return values.reshape(rows, *feature.shape)


def decode_image(value: Any, feature: Feature, root: Path, path: Path, row: int) -> np.ndarray:
    """An image cell ({bytes, path} struct or raw bytes) as (H, W, C) uint8, checked against info.json."""
    image_mod = require("PIL.Image")
    data = value.get("bytes") if isinstance(value, dict) else value
    if data is None and isinstance(value, dict) and value.get("path"):
        image_path = root / str(value["path"])
        if not image_path.is_file():
            raise LeRobotFormatError(f"{path}: column {feature.name!r} row {row} names {image_path}, which is missing")
        data = image_path.read_bytes()
    if not data:
        raise LeRobotFormatError(f"{path}: column {feature.name!r} row {row} has no image")
    height, width, channels = feature.hwc
    try:
        with image_mod.open(io.BytesIO(data)) as image:
            mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(channels, "RGB")
            pixels = np.asarray(image.convert(mode) if image.mode != mode else image)
    except OSError:
        raise LeRobotFormatError(f"{path}: column {feature.name!r} row {row} is not a readable image") from None
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if pixels.shape != (height, width, channels):
        raise LeRobotFormatError(
            f"{path}: column {feature.name!r} row {row} is an image of shape {list(pixels.shape)}; "
            f"info.json declares (height, width, channels) {[height, width, channels]}"
        )
    return pixels


def encode_png(image: np.ndarray, compress_level: int = 1) -> bytes:
    image_mod = require("PIL.Image")
    pixels = image[:, :, 0] if image.shape[-1] == 1 else image
    buffer = io.BytesIO()
    image_mod.fromarray(np.ascontiguousarray(pixels)).save(buffer, format="PNG", compress_level=compress_level)
    return buffer.getvalue()
