"""Write a store as a LeRobotDataset v3.0 directory that LeRobot 0.4.x loads with ``LeRobotDataset(repo_id, root)``.

Images are embedded in the data parquet as PNG ({bytes, path} structs, as LeRobot writes ``image`` features), not
encoded as AV1 video: LeRobot 0.4.4 decodes video only through torchcodec or torchvision's VideoReader, and the
latter is gone from current torchvision, so embedded images are what it loads everywhere. PNG is lossless too.

The directory is written under a temporary name beside ``out_dir`` and renamed into place when complete.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.data.lerobot_format import (
    CHUNKS_SIZE,
    CODEBASE_VERSION,
    DATA_PATH,
    EPISODES_PATH,
    INDEX_FEATURES,
    INFO,
    NUMERIC_DTYPES,
    OURS_META,
    STATS,
    TASKS,
    Feature,
    LeRobotFormatError,
    encode_png,
    require,
    to_lerobot_key,
)
from vla_recover.data.lerobot_stats import aggregate_stats, episode_stats
from vla_recover.data.schema import ACTORS, PROVENANCE_KEYS, UNCHOSEN_ACTORS, KeySpec
from vla_recover.data.store import EpisodeStore

__all__ = ["ExportReport", "export_lerobot"]

_BATCH_BYTES = 64 << 20  # raw step bytes read from the store per batch of episodes
_SKIPPED_KEYS = ("robot",)  # per episode in meta/vla_recover.json instead
# Derived per frame for LeRobot users, not read back: False where no one chose the action (a hold, a rewind row), so
# a training script can drop those frames without knowing vla_recover's actor codes.
ACTION_CHOSEN = "action_chosen"
_UNCHOSEN_CODES = [ACTORS.index(actor) for actor in UNCHOSEN_ACTORS]


@dataclass
class ExportReport:
    out: Path
    episodes: int
    frames: int
    tasks: int
    features: dict[str, str]  # store key -> LeRobot feature
    data_files: int


@dataclass(frozen=True)
class _Column:
    key: str
    spec: KeySpec
    feature: Feature

    @property
    def image(self) -> bool:
        return self.feature.dtype == "image"


def _columns(specs: dict[str, KeySpec]) -> list[_Column]:
    def order(key: str) -> tuple[int, str]:
        if key.startswith("obs."):
            return 0, key
        if key == "action":
            return 1, key
        return (3 if key in PROVENANCE_KEYS else 2), key

    columns = []
    for key in sorted(specs, key=order):
        if key in _SKIPPED_KEYS:
            continue
        spec, name = specs[key], to_lerobot_key(key)
        if name in INDEX_FEATURES or name == "task":
            raise LeRobotFormatError(f"store key {key!r} would be LeRobot's reserved feature {name!r}; rename it")
        dtype = np.dtype(spec.dtype).name
        if len(spec.shape) == 3 and dtype == "uint8" and spec.shape[2] in (1, 3, 4):
            feature = Feature(name, "image", spec.shape, ["height", "width", "channels"])
        elif dtype in NUMERIC_DTYPES:
            size = int(np.prod(spec.shape, dtype=np.int64)) if spec.shape else 1
            feature = Feature(name, dtype, (size,))
        else:
            raise LeRobotFormatError(f"store key {key!r} has dtype {spec.dtype}, which LeRobot cannot hold")
        columns.append(_Column(key, spec, feature))
    return columns


def _arrow_column(values: np.ndarray, feature: Feature, frame_index: np.ndarray) -> Any:
    pa = require("pyarrow")
    if feature.dtype == "image":
        blobs = pa.array([encode_png(image) for image in values], type=pa.binary())
        paths = pa.array([f"frame-{i:06d}.png" for i in frame_index], type=pa.string())
        return pa.StructArray.from_arrays([blobs, paths], names=["bytes", "path"])
    flat = np.ascontiguousarray(values).reshape(len(values), -1)
    if feature.shape == (1,):
        return pa.array(flat[:, 0])
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), feature.size)


def _tasks_table(tasks: dict[str, int]) -> Any:
    """meta/tasks.parquet as pandas writes a DataFrame indexed by task string (LeRobot reads it with pandas)."""
    pa = require("pyarrow")
    table = pa.table(
        {
            "task_index": pa.array(list(tasks.values()), type=pa.int64()),
            "__index_level_0__": pa.array(list(tasks), type=pa.string()),
        }
    )
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
             "metadata": {"encoding": "UTF-8"}},
        ],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
             "metadata": None},
            {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
             "metadata": None},
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }  # fmt: skip
    return table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})


class _DataWriter:
    """data/chunk-CCC/file-FFF.parquet, a new file once one passes ``file_mb``; episodes never straddle files."""

    def __init__(self, root: Path, features: list[Feature], file_mb: int) -> None:
        pa = require("pyarrow")
        self.root, self.limit = root, file_mb << 20
        hf = {"info": {"features": {f.name: f.hf_json() for f in features}}}
        fields = []
        for f in features:
            if f.dtype == "image":
                kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
            else:
                value = pa.from_numpy_dtype(np.dtype(f.dtype))
                kind = value if f.shape == (1,) else pa.list_(value, f.size)
            fields.append(pa.field(f.name, kind))
        self.schema = pa.schema(fields, metadata={"huggingface": json.dumps(hf)})
        self.chunk, self.file = 0, -1
        self.writer: Any = None
        self.pending: list[Any] = []
        self.pending_bytes = self.file_bytes = 0
        self.files = 0

    def location(self, episode_bytes: int) -> tuple[int, int]:
        """The (chunk, file) the next episode goes to, rolling over to a new file when this one is full."""
        if self.writer is None or (self.file_bytes + self.pending_bytes > 0 and
                                   self.file_bytes + self.pending_bytes + episode_bytes > self.limit):  # fmt: skip
            self.flush()
            if self.writer is not None:
                self.writer.close()
            self.file += 1
            if self.file == CHUNKS_SIZE:
                self.chunk, self.file = self.chunk + 1, 0
            pq = require("pyarrow.parquet")
            path = self.root / DATA_PATH.format(chunk_index=self.chunk, file_index=self.file)
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(path, self.schema, compression="snappy")
            self.file_bytes = 0
            self.files += 1
        return self.chunk, self.file

    def add(self, table: Any) -> None:
        self.pending.append(table.cast(self.schema))
        self.pending_bytes += table.nbytes

    def flush(self) -> None:
        if self.pending:
            pa = require("pyarrow")
            self.writer.write_table(pa.concat_tables(self.pending))
            self.file_bytes += self.pending_bytes
            self.pending, self.pending_bytes = [], 0

    def close(self) -> None:
        self.flush()
        if self.writer is not None:
            self.writer.close()


def _batches(rows: list[Any], step_bytes: int) -> Iterator[list[Any]]:
    """Consecutive episodes whose steps fit ``_BATCH_BYTES`` together (at least one a batch): one store read each."""
    i = 0
    while i < len(rows):
        batch = [rows[i]]
        while i + len(batch) < len(rows) and (rows[i + len(batch)].stop - batch[0].start) * step_bytes < _BATCH_BYTES:
            batch.append(rows[i + len(batch)])
        yield batch
        i += len(batch)


def _add_index_columns(
    values: dict[str, np.ndarray], n: int, fps: int, episode: int, first_frame: int, task_index: int
) -> np.ndarray:
    """LeRobot's index columns for one episode of ``n`` frames, added to ``values``; returns its frame index."""
    frame_index = np.arange(n, dtype=np.int64)
    values["timestamp"] = (frame_index / fps).astype(np.float32)
    values["frame_index"] = frame_index
    values["episode_index"] = np.full(n, episode, dtype=np.int64)
    values["index"] = frame_index + first_frame
    values["task_index"] = np.full(n, task_index, dtype=np.int64)
    return frame_index


def _episode_stats(
    values: dict[str, np.ndarray], features: list[Feature], stats: dict[str, list[dict[str, np.ndarray]]]
) -> dict[str, Any]:
    """One episode's per-feature stats as its metadata columns; each is also kept in ``stats`` for the dataset's."""
    columns: dict[str, Any] = {}
    for f in features:
        ep = episode_stats(values[f.name], f.dtype == "image")
        stats[f.name].append(ep)
        columns.update({f"stats/{f.name}/{k}": v.tolist() for k, v in ep.items()})
    return {**columns, "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}


def _info(
    features: list[Feature],
    episodes: int,
    frames: int,
    tasks: int,
    fps: int,
    data_file_mb: int,
    robot_type: str | None,
    repo_id: str | None,
) -> dict[str, Any]:
    """LeRobot's ``meta/info.json``."""
    info: dict[str, Any] = {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": CHUNKS_SIZE,
        "data_files_size_in_mb": data_file_mb,
        "video_files_size_in_mb": 200,
        "fps": fps,
        "splits": {"train": f"0:{episodes}"},
        "data_path": DATA_PATH,
        "video_path": None,
        "features": {f.name: f.as_json() for f in features},
    }
    if repo_id:
        info["repo_id"] = repo_id  # not read by LeRobot (it takes repo_id as an argument); a label
    return info


def _write_meta(
    root: Path,
    episodes_meta: list[dict[str, Any]],
    tasks: dict[str, int],
    stats: dict[str, list[dict[str, np.ndarray]]],
    ours: dict[str, Any],
    info: dict[str, Any],
) -> None:
    """The dataset's metadata files: episodes, tasks, stats, info, and this project's own provenance."""
    pq, pa = require("pyarrow.parquet"), require("pyarrow")
    path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(episodes_meta), path, compression="snappy")
    pq.write_table(_tasks_table(tasks), root / TASKS)
    dataset_stats = {name: {k: v.tolist() for k, v in aggregate_stats(s).items()} for name, s in stats.items()}
    (root / STATS).write_text(json.dumps(dataset_stats, indent=2))
    (root / OURS_META).write_text(json.dumps(ours, indent=1))
    (root / INFO).write_text(json.dumps(info, indent=4))


def _write_dataset(
    store: EpisodeStore,
    root: Path,
    fps: int,
    data_file_mb: int,
    robot_type: str | None,
    repo_id: str | None,
    progress: Callable[[int, int], None] | None,
) -> ExportReport:
    """Every committed episode of ``store`` as a LeRobot dataset in the folder ``root``."""
    pa = require("pyarrow")
    rows = store.episodes()
    columns = _columns(store.specs())
    versions = store.names("policy_version")
    index_features = [Feature(name, dtype, (1,)) for name, dtype in INDEX_FEATURES.items()]
    derived = [Feature(ACTION_CHOSEN, "bool", (1,))] if "actor" in store.specs() else []
    features = [c.feature for c in columns] + derived + index_features
    writer = _DataWriter(root, features, data_file_mb)
    tasks: dict[str, int] = {}
    episodes_meta: list[dict[str, Any]] = []
    ours_episodes: list[dict[str, Any]] = []
    stats: dict[str, list[dict[str, np.ndarray]]] = {f.name: [] for f in features}
    step_bytes = sum(max(1, int(np.prod(c.spec.shape))) * np.dtype(c.spec.dtype).itemsize for c in columns)
    frames = 0
    for batch in _batches(rows, step_bytes):
        lo, hi = batch[0].start, batch[-1].stop
        data = {c.key: store.read(c.key, lo, hi) for c in columns}
        for row in batch:
            n, e = row.length, len(episodes_meta)
            task_text = row.instruction or row.task
            values = {c.feature.name: data[c.key][row.start - lo : row.stop - lo] for c in columns}
            if derived:
                values[ACTION_CHOSEN] = ~np.isin(values[to_lerobot_key("actor")], _UNCHOSEN_CODES)
            frame_index = _add_index_columns(values, n, fps, e, frames, tasks.setdefault(task_text, len(tasks)))
            table = pa.table({f.name: _arrow_column(values[f.name], f, frame_index) for f in features})
            chunk, file = writer.location(table.nbytes)
            writer.add(table)
            meta: dict[str, Any] = {
                "episode_index": e, "tasks": [task_text], "length": n,
                "data/chunk_index": chunk, "data/file_index": file,
                "dataset_from_index": frames, "dataset_to_index": frames + n,
            }  # fmt: skip
            meta.update(_episode_stats(values, features, stats))
            episodes_meta.append(meta)
            ours_episodes.append(
                {"id": row.id, "robot": row.robot, "task": row.task, "instruction": row.instruction,
                 "outcome": row.outcome, "phases": list(row.phases), "info": row.info}
            )  # fmt: skip
            frames += n
            if progress is not None:
                progress(e + 1, len(rows))
        writer.flush()
    writer.close()
    ours = {
        "format": 1,
        "actors": list(ACTORS),
        "derived": [f.name for f in derived],
        "policy_versions": {str(code): name for code, name in versions.items()},
        "keys": {c.feature.name: {"key": c.key, **c.spec.as_json()} for c in columns},
        "episodes": ours_episodes,
    }
    info = _info(features, len(episodes_meta), frames, len(tasks), fps, data_file_mb, robot_type, repo_id)
    _write_meta(root, episodes_meta, tasks, stats, ours, info)
    return ExportReport(
        root, len(episodes_meta), frames, len(tasks), {c.key: c.feature.name for c in columns}, writer.files
    )


def export_lerobot(
    store_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    fps: int = 20,
    repo_id: str | None = None,
    robot_type: str | None = None,
    *,
    overwrite: bool = False,
    data_file_mb: int = 100,
    progress: Callable[[int, int], None] | None = None,
) -> ExportReport:
    """Write every committed episode of the store at ``store_path`` as a LeRobot v3.0 dataset in ``out_dir``.

    Keys map to LeRobot's names (``obs.state`` -> ``observation.state``, ``obs.images.<cam>`` ->
    ``observation.images.<cam>``, ``reward`` -> ``next.reward``); provenance columns (``actor``, ``intervention``,
    ``policy_version``, ``phase``, ``progress``, ``sim_time``, ``wall_time``) become extra features, and
    ``action_chosen`` says per frame whether anyone chose its action (False on holds and rewind rows). The
    instruction is the LeRobot task string. ``progress(done, total)`` is called after each episode.
    """
    require("pyarrow.parquet")  # missing pyarrow is said before any work
    if fps <= 0:
        raise ValueError(f"fps must be positive, got {fps}")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise ValueError(f"{out}: exists and is not empty; pass overwrite=True (--overwrite) to replace it")
    with EpisodeStore(store_path, mode="r") as store:
        rows = store.episodes()
        if not rows:
            raise LeRobotFormatError(f"{store.path}: no committed episodes to export")
        tmp = out.parent / f".{out.name}.partial-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            report = _write_dataset(store, tmp, fps, data_file_mb, robot_type, repo_id, progress)
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dataclasses.replace(report, out=out)
