"""rosbag2 recordings (sqlite3 or mcap) ↔ the store, through the pure-Python `rosbags` library.

Export writes one episode per bag: every data key on a topic of its own (``obs.state`` → ``/vla/obs/state``,
``action`` → ``/vla/action``), one message per step stamped with the episode's clock, the per-step provenance as JSON
on ``/vla/provenance`` and the episode's metadata (task, outcome, instruction, phases, segments) as JSON on
``/vla/episode``. Import reads such a bag back exactly, or a robot's own recording given a topic map: one step per
message of the action topic, each observation topic sampled at its latest message at or before that step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from vla_recover.data.schema import ACTORS, EpisodeData
from vla_recover.data.store import EpisodeStore
from vla_recover.ros2.messages import decode, from_message, to_message, typestore

__all__ = ["export_episode_bag", "read_bag"]

EPISODE_TOPIC, PROVENANCE_TOPIC = "/vla/episode", "/vla/provenance"
BAG_SCHEMA = 1


def _topic(key: str) -> str:
    return "/vla/" + key.replace(".", "/")


def export_episode_bag(
    store: EpisodeStore, episode_id: int, out: str | Path, storage: Literal["sqlite3", "mcap"] = "sqlite3"
) -> Path:
    """Write episode ``episode_id`` of ``store`` as the rosbag2 directory ``out`` (which must not exist)."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    out = Path(out)
    if out.exists():
        raise FileExistsError(f"out: {out} exists; a bag is written into a new directory")
    row = next((r for r in store.episodes() if r.id == episode_id), None)
    if row is None:
        raise KeyError(f"episode {episode_id} is not in {store.path} ({len(store)} episodes)")
    steps = store.episode(episode_id)
    data_keys = [k for k in steps if k.startswith("obs.") or k == "action"]
    start_ns = int(float(steps["wall_time"][0]) * 1e9) if "wall_time" in steps else 0
    stamps = [start_ns + round(float(t) * 1e9) for t in steps["sim_time"]]
    versions, robots = store.names("policy_version"), store.names("robot")
    segments = [(s.start, s.stop, s.kind) for s in store.segments(episode=episode_id, source="supervision")]
    meta = {"schema": BAG_SCHEMA, "task": row.task, "robot": row.robot, "instruction": row.instruction,
            "outcome": row.outcome, "phases": list(row.phases), "info": row.info, "segments": segments}  # fmt: skip
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(out, version=9, storage_plugin=plugin) as writer:
        connections: dict[str, Any] = {}

        def write(topic: str, value: Any, stamp: int) -> None:
            kind, raw = to_message(value, stamp)
            if topic not in connections:
                connections[topic] = writer.add_connection(topic, kind, typestore=typestore())
            writer.write(connections[topic], stamp, raw)

        write(EPISODE_TOPIC, json.dumps(meta), stamps[0])
        for t, stamp in enumerate(stamps):
            for key in data_keys:
                write(_topic(key), steps[key][t], stamp)
            provenance = {
                "actor": ACTORS[int(steps["actor"][t])],
                "policy_version": versions.get(int(steps["policy_version"][t]), ""),
                "robot": robots.get(int(steps["robot"][t]), row.robot),
                "phase": int(steps["phase"][t]),
                "progress": None if np.isnan(steps["progress"][t]) else float(steps["progress"][t]),
                "sim_time": float(steps["sim_time"][t]),
            }
            write(PROVENANCE_TOPIC, json.dumps(provenance), stamp)
    return out


def _messages(bag: Path) -> dict[str, list[tuple[int, Any]]]:
    """topic → [(timestamp ns, decoded value)], in time order."""
    from rosbags.rosbag2 import Reader, ReaderError

    if not (bag / "metadata.yaml").is_file():
        raise FileNotFoundError(f"bag: {bag} is not a rosbag2 directory (no metadata.yaml)")
    by_topic: dict[str, list[tuple[int, Any]]] = {}
    try:
        with Reader(bag) as reader:
            for connection, stamp, raw in reader.messages():
                value = from_message(decode(raw, connection.msgtype), connection.msgtype)
                by_topic.setdefault(connection.topic, []).append((stamp, value))
    except ReaderError as exc:  # a broken metadata.yaml or storage file
        raise ValueError(f"bag: {bag} cannot be read ({exc})") from None
    for messages in by_topic.values():
        messages.sort(key=lambda item: item[0])
    return by_topic


def read_bag(
    bag: str | Path,
    task: str | None = None,
    topics: Mapping[str, str] | None = None,
    instruction: str = "",
) -> EpisodeData:
    """One episode from a bag: a vla_recover export as it was, or a robot recording through ``topics``
    (data key → topic, ``action`` among them)."""
    bag = Path(bag)
    by_topic = _messages(bag)
    if EPISODE_TOPIC in by_topic and topics is None:
        return _exported_episode(by_topic)
    if not topics or "action" not in topics:
        raise ValueError(f"topics: {bag} is not a vla_recover export; map data keys to topics, 'action' among them "
                         f"(topics in the bag: {', '.join(sorted(by_topic))})")  # fmt: skip
    if task is None:
        raise ValueError("task: a robot recording needs the task it is an episode of")
    missing = [topic for topic in topics.values() if topic not in by_topic]
    if missing:
        raise ValueError(f"topics: {missing[0]!r} is not in {bag} (topics: {', '.join(sorted(by_topic))})")
    actions = by_topic[topics["action"]]
    step_stamps = np.array([stamp for stamp, _ in actions])
    latest: dict[str, np.ndarray] = {}
    keep = np.ones(step_stamps.size, dtype=bool)
    for key, topic in topics.items():
        if key != "action":
            stamps = np.array([stamp for stamp, _ in by_topic[topic]])
            latest[key] = np.searchsorted(stamps, step_stamps, side="right") - 1
            keep &= latest[key] >= 0  # a step needs an observation of every topic at or before it
    if not keep.any():
        raise ValueError(f"topics: no message of {topics['action']!r} comes after a message of every observation topic")
    steps: dict[str, np.ndarray] = {"action": np.stack([np.asarray(v, np.float32) for _, v in actions])[keep]}
    for key, indices in latest.items():
        values = [np.asarray(by_topic[topics[key]][i][1]) for i in indices[keep]]
        steps[key] = np.stack([v if v.dtype == np.uint8 else v.astype(np.float32) for v in values])
    kept = step_stamps[keep]
    steps["sim_time"] = (kept - kept[0]) / 1e9
    return EpisodeData(task=task, steps=steps, instruction=instruction, actor="human", outcome="truncated",
                       info={"source": str(bag)})  # fmt: skip


def _exported_episode(by_topic: dict[str, list[tuple[int, Any]]]) -> EpisodeData:
    meta = json.loads(by_topic[EPISODE_TOPIC][0][1])
    if meta.get("schema") != BAG_SCHEMA:
        raise ValueError(f"/vla/episode: schema {meta.get('schema')}, this vla_recover reads {BAG_SCHEMA}")
    provenance = [json.loads(value) for _, value in by_topic[PROVENANCE_TOPIC]]
    length = len(provenance)
    steps: dict[str, np.ndarray] = {}
    for topic, messages in by_topic.items():
        if topic in (EPISODE_TOPIC, PROVENANCE_TOPIC):
            continue
        if len(messages) != length:
            raise ValueError(f"{topic}: {len(messages)} messages for an episode of {length} steps")
        key = topic.removeprefix("/vla/").replace("/", ".")
        values = [np.asarray(v) for _, v in messages]
        steps[key] = np.stack([v if v.dtype == np.uint8 else v.astype(np.float32) for v in values])
    steps["phase"] = np.array([p["phase"] for p in provenance], dtype=np.int8)
    steps["progress"] = np.array([np.nan if p["progress"] is None else p["progress"] for p in provenance], np.float32)
    steps["sim_time"] = np.array([p["sim_time"] for p in provenance])
    return EpisodeData(
        task=meta["task"], steps=steps, robot=meta["robot"], instruction=meta["instruction"], outcome=meta["outcome"],
        actor=[p["actor"] for p in provenance], policy_version=[p["policy_version"] for p in provenance],
        phases=tuple(meta["phases"]), info=meta["info"], segments=[tuple(s) for s in meta["segments"]],
    )  # fmt: skip
