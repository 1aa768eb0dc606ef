"""Move episodes between our store and LeRobotDataset v3.0 directories (the format of LeRobot 0.4.x).

``export_lerobot(store, out_dir)`` writes one (see ``lerobot_export``); ``import_lerobot(dataset_dir, store)``
reads one written by LeRobot itself (state, embedded images, AV1 or other video) or by ``export_lerobot``.

Import maps ``observation.<x>`` -> ``obs.<x>``, ``next.<x>`` -> ``<x>`` (``next.reward`` -> ``reward``), ``action`` as
is. Who acted: ``human`` where an ``intervention`` feature is true, else ``default_actor``. Outcome: from
``next.success`` (any true), else ``next.reward`` (any reward >= ``success_reward``), else ``next.done`` (last frame
done, else ``truncated``), else ``success``. The instruction is the episode's LeRobot task string. A dataset we
exported carries ``meta/vla_recover.json``, which restores everything exactly (outcome, robot, actor names, phases).

Every file's metadata and schema is checked before the store is touched; episodes are then appended in batches,
each of complete episodes only, so an error part way leaves the store with whole episodes and says how many.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vla_recover.data.lerobot_export import ExportReport, export_lerobot
from vla_recover.data.lerobot_format import (
    INDEX_FEATURES,
    INFO,
    OURS_META,
    Feature,
    LeRobotFormatError,
    column_to_numpy,
    decode_image,
    from_lerobot_key,
    parse_features,
    read_episode_meta,
    read_info,
    read_json,
    read_tasks,
    require,
)
from vla_recover.data.lerobot_video import decode_frames, video_file
from vla_recover.data.schema import ACTORS, PROVENANCE_KEYS, EpisodeData
from vla_recover.data.store import EpisodeStore

__all__ = ["ExportReport", "ImportReport", "LeRobotFormatError", "export_lerobot", "import_lerobot"]

_BATCH_BYTES = 256 << 20  # decoded step bytes appended to the store at once
_FOREIGN_PROVENANCE = ("intervention", "progress")  # provenance we take from any LeRobot dataset


@dataclass
class ImportReport:
    store: Path
    episodes: int = 0
    steps: int = 0
    ids: list[int] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # LeRobot feature -> store key
    skipped: list[str] = field(default_factory=list)  # features not imported (strings)


@dataclass
class _Plan:
    root: Path
    fps: float
    features: dict[str, Feature]
    keys: dict[str, str]
    skipped: list[str]
    tasks: dict[int, str]
    episodes: dict[int, dict[str, Any]]
    files: list[Path]
    video_path: str | None
    ours: dict[str, Any] | None
    default_robot: str


def _store_key(name: str, ours: dict[str, Any] | None) -> str:
    if ours is not None and name in ours.get("keys", {}):
        return str(ours["keys"][name]["key"])
    if name in _FOREIGN_PROVENANCE:
        return name
    key = from_lerobot_key(name)
    return f"lerobot.{key}" if key in PROVENANCE_KEYS else key


def _plan(root: Path) -> _Plan:
    """Read and cross-check all metadata and every data file's schema; touches nothing."""
    pq = require("pyarrow.parquet")
    info = read_info(root)
    features = parse_features(info, root / INFO)
    ours = read_json(root / OURS_META) if (root / OURS_META).is_file() else None
    keys: dict[str, str] = {}
    skipped: list[str] = []
    derived = set(ours.get("derived", [])) if ours is not None else set()  # computed on export, not data
    for name, feature in features.items():
        if name in INDEX_FEATURES or name in derived:
            continue
        if feature.dtype == "string":
            skipped.append(name)
            continue
        keys[name] = _store_key(name, ours)
    tasks = read_tasks(root)
    episodes = {int(row["episode_index"]): row for row in read_episode_meta(root)}
    files = sorted((root / "data").glob("*/*.parquet"))
    if not files:
        raise LeRobotFormatError(f"{root / 'data'}: no data files (chunk-*/file-*.parquet)")
    in_columns = [n for n in keys if features[n].dtype != "video"] + list(INDEX_FEATURES)
    rows = 0
    for path in files:
        try:
            schema = pq.read_schema(path)
            rows += pq.read_metadata(path).num_rows
        except (OSError, ValueError) as exc:
            raise LeRobotFormatError(f"{path}: not a readable parquet file ({exc})") from None
        for name in in_columns:
            if name not in schema.names:
                raise LeRobotFormatError(f"{path}: column {name!r} declared in meta/info.json is missing")
            kind = schema.field(name).type
            size = getattr(kind, "list_size", None)
            feature = features[name]
            if size is not None and len(feature.shape) == 1 and size != feature.size:
                raise LeRobotFormatError(
                    f"{path}: column {name!r} holds {size} values per row; "
                    f"meta/info.json declares shape {list(feature.shape)}"
                )
    expected = sum(int(row["length"]) for row in episodes.values())
    if rows != expected:
        raise LeRobotFormatError(f"{root / 'data'}: {rows} rows in data files, but meta/episodes lists {expected}")
    for name in keys:
        if features[name].dtype == "video":
            for row in episodes.values():
                path = video_file(root, info.get("video_path"), name, row)
                if not path.is_file():
                    raise LeRobotFormatError(f"{path}: missing (video of feature {name!r})")
    return _Plan(
        root, float(info["fps"]), features, keys, skipped, tasks, episodes, files,
        info.get("video_path"), ours, str(info.get("robot_type") or "lerobot"),
    )  # fmt: skip


def _outcome(values: dict[str, np.ndarray], success_reward: float) -> str:
    if "next.success" in values:
        return "success" if bool(np.any(values["next.success"])) else "failure"
    if "next.reward" in values:
        return "success" if float(np.max(values["next.reward"])) >= success_reward else "failure"
    if "next.done" in values:
        return "success" if bool(values["next.done"].reshape(-1)[-1]) else "truncated"
    return "success"


def _episode(plan: _Plan, index: int, values: dict[str, np.ndarray], options: dict[str, Any]) -> EpisodeData:
    """One episode's columns (LeRobot names, frames in order) as EpisodeData."""
    length = len(values["frame_index"])
    steps: dict[str, np.ndarray] = {}
    for name, key in plan.keys.items():
        value = values[name]
        if plan.ours is not None and name in plan.ours["keys"]:
            spec = plan.ours["keys"][name]
            value = value.reshape(length, *spec["shape"]).astype(spec["dtype"], copy=False)
        elif plan.features[name].shape == (1,):
            value = value.reshape(length)
        steps[key] = value
    task_indices = [int(t) for t in dict.fromkeys(values["task_index"].tolist())]
    unknown = [t for t in task_indices if t not in plan.tasks]
    if unknown:
        raise LeRobotFormatError(f"{plan.root / 'meta/tasks.parquet'}: no task_index {unknown[0]} (episode {index})")
    instruction = plan.tasks[task_indices[0]]
    ours_episodes = plan.ours.get("episodes", []) if plan.ours is not None else []
    if index < len(ours_episodes):
        meta = ours_episodes[index]
        actor_names = list(plan.ours.get("actors", ACTORS)) if plan.ours else list(ACTORS)
        actors = [actor_names[int(a)] for a in steps.pop("actor")] if "actor" in steps else options["actor"]
        names = {int(code): name for code, name in (plan.ours or {}).get("policy_versions", {}).items()}
        codes = steps.pop("policy_version", None)
        versions: str | list[str] = [names.get(int(c), "") for c in codes] if codes is not None else ""
        return EpisodeData(
            task=meta["task"], steps=steps, robot=meta["robot"], instruction=meta["instruction"],
            outcome=meta["outcome"], actor=actors, policy_version=versions, phases=tuple(meta["phases"]),
            info=meta["info"],
        )  # fmt: skip
    if "intervention" in steps:
        steps["intervention"] = steps["intervention"].astype(bool)
        actors = ["human" if flag else options["actor"] for flag in steps["intervention"]]
    else:
        actors = [options["actor"]] * length
    steps.setdefault("sim_time", values["timestamp"].astype(np.float64))
    info: dict[str, Any] = {"source": "lerobot", "dataset": plan.root.name, "episode_index": index}
    if len(task_indices) > 1:
        info["tasks"] = [plan.tasks[t] for t in task_indices]
    return EpisodeData(
        task=options["task"] or plan.root.name, steps=steps, robot=options["robot"] or plan.default_robot,
        instruction=instruction, outcome=_outcome(values, options["success_reward"]), actor=actors, info=info,
    )  # fmt: skip


def _file_episodes(plan: _Plan, path: Path, options: dict[str, Any]) -> Iterator[EpisodeData]:
    """Every episode of one data file, each checked complete against meta/episodes, decoded one at a time."""
    pq = require("pyarrow.parquet")
    names = [n for n in plan.keys if plan.features[n].dtype != "video"] + list(INDEX_FEATURES)
    table = pq.read_table(path, columns=names)
    index_values = {n: column_to_numpy(table.column(n), plan.features[n], path) for n in INDEX_FEATURES}
    episode_index = index_values["episode_index"].reshape(-1)
    order = np.lexsort((index_values["frame_index"].reshape(-1), episode_index))
    arrays = {n: v.reshape(-1)[order] for n, v in index_values.items()}
    for name in names:
        feature = plan.features[name]
        if name not in INDEX_FEATURES and feature.dtype != "image":
            arrays[name] = column_to_numpy(table.column(name), feature, path)[order]
    bounds = np.flatnonzero(np.diff(arrays["episode_index"])) + 1
    for rows in np.split(np.arange(len(order)), bounds):
        if not len(rows):
            continue
        index = int(arrays["episode_index"][rows[0]])
        meta = plan.episodes.get(index)
        if meta is None or int(meta["length"]) != len(rows):
            expected = "no such episode" if meta is None else f"length {meta['length']}"
            raise LeRobotFormatError(
                f"{path}: episode {index} has {len(rows)} frames here; meta/episodes says {expected}"
            )
        values = {n: v[rows] for n, v in arrays.items()}
        for name in plan.keys:
            feature = plan.features[name]
            if feature.dtype == "image":
                cells = table.column(name).take(order[rows]).to_pylist()
                values[name] = np.stack(
                    [
                        decode_image(cell, feature, plan.root, path, int(order[r]))
                        for r, cell in zip(rows, cells, strict=True)
                    ]
                )
            elif feature.dtype == "video":
                video = video_file(plan.root, plan.video_path, name, meta)
                start = float(meta.get(f"videos/{name}/from_timestamp", 0.0))
                values[name] = decode_frames(video, start + values["timestamp"].astype(np.float64), feature, plan.fps)
        yield _episode(plan, index, values, options)


def import_lerobot(
    dataset_dir: str | os.PathLike[str],
    store_path: str | os.PathLike[str],
    *,
    default_actor: str = "scripted",
    robot: str | None = None,
    task: str | None = None,
    success_reward: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Append every episode of the LeRobot v3.0 dataset at ``dataset_dir`` to the store at ``store_path``.

    ``robot`` and ``task`` name the robot and our task for a dataset that is not our export (defaults: info.json's
    robot_type, the directory's name). ``progress(done, total)`` is called as episodes are read.
    """
    if default_actor not in ACTORS:
        raise ValueError(f"default_actor: got {default_actor!r}; valid actors: {', '.join(ACTORS)}")
    plan = _plan(Path(dataset_dir))
    options = {"actor": default_actor, "robot": robot, "task": task, "success_reward": success_reward}
    report = ImportReport(Path(store_path), keys=dict(plan.keys), skipped=list(plan.skipped))
    total = len(plan.episodes)
    with EpisodeStore(store_path, mode="a") as store:
        held = set(store.specs()) - set(PROVENANCE_KEYS)
        coming = set(plan.keys.values()) - set(PROVENANCE_KEYS)
        if held and held != coming:
            raise LeRobotFormatError(
                f"{plan.root}: its keys do not match the store {store.path}: the store lacks "
                f"{sorted(coming - held) or 'none'}, the dataset lacks {sorted(held - coming) or 'none'}"
            )
        pending: list[EpisodeData] = []
        pending_bytes = 0

        def flush() -> None:
            nonlocal pending, pending_bytes
            if pending:
                report.ids += store.append_episodes(pending)
                report.episodes += len(pending)
                report.steps += sum(e.length for e in pending)
                pending, pending_bytes = [], 0

        try:
            done = 0
            for path in plan.files:
                for episode in _file_episodes(plan, path, options):
                    pending.append(episode)
                    pending_bytes += sum(v.nbytes for v in episode.steps.values())
                    done += 1
                    if pending_bytes >= _BATCH_BYTES:
                        flush()
                    if progress is not None:
                        progress(done, total)
            flush()
        except LeRobotFormatError as exc:
            if report.episodes:
                ids = f"ids {report.ids[0]}..{report.ids[-1]}"
                raise LeRobotFormatError(
                    f"{exc} ({report.episodes} complete episodes, {ids}, were appended to {store.path} before this)"
                ) from None
            raise
    return report
