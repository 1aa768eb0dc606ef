from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.data.synthetic import synthetic_episode
from vla_recover.data import (
    ACTORS,
    EpisodeData,
    EpisodeStore,
    SchemaError,
    WindowSampler,
    WindowSpec,
    check_store,
    store_summary,
)

ROOT = Path(__file__).resolve().parents[2]


def assert_episode_equal(store: EpisodeStore, episode_id: int, expected: EpisodeData) -> None:
    stored = store.episode(episode_id)
    for key, value in expected.steps.items():
        assert np.array_equal(stored[key], value), key
    actor = expected.actor
    assert ACTORS[int(stored["actor"][0])] == actor
    row = store.episodes(id=episode_id)[0]
    assert (row.robot, row.instruction, row.outcome, row.info) == (
        expected.robot, expected.instruction, expected.outcome, expected.info
    )  # fmt: skip


def test_round_trip_with_provenance(tmp_path: Path) -> None:
    episodes = [synthetic_episode(i, images=True) for i in range(7)]
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        ids = store.append_episodes(episodes[:3]) + [store.append_episode(e) for e in episodes[3:]]
    assert ids == list(range(7))
    with EpisodeStore(tmp_path / "s") as store:
        assert len(store) == 7 and store.n_steps == sum(e.length for e in episodes)
        for i, episode in enumerate(episodes):
            assert_episode_equal(store, i, episode)
        stored = store.episode(2)
        assert stored["intervention"].all() == (episodes[2].actor == "human")
        assert store.names("robot")[int(stored["robot"][0])] == "robot2"
        assert [r.id for r in store.episodes(outcome="failure")] == [1, 3, 5]
    assert check_store(tmp_path / "s").ok


def test_arrays_are_exact_length_after_close_and_images_compressed(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([synthetic_episode(i, images=True) for i in range(4)])
        total = store.n_steps
    import zarr

    group = zarr.open_group(str(tmp_path / "s" / "steps.zarr"), mode="r")
    assert group["data/action"].shape[0] == total
    assert group["meta/episode_ends"][-1] == total
    codec = group["data/obs.images.front"].metadata.codecs[-1]
    assert "zstd" in repr(codec)


def test_append_rejects_bad_shapes_naming_the_key_and_keeps_what_is_stored(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episode(synthetic_episode(0))
        bad = synthetic_episode(1)
        bad.steps["obs.state"] = bad.steps["obs.state"][:, :5]
        with pytest.raises(SchemaError, match=r"key 'obs.state': got shape \(5,\)"):
            store.append_episode(bad)
        wrong_dtype = synthetic_episode(2)
        wrong_dtype.steps["action"] = wrong_dtype.steps["action"].astype(np.float64)
        with pytest.raises(SchemaError, match="key 'action'"):
            store.append_episode(wrong_dtype)
        missing = synthetic_episode(3)
        del missing.steps["action"]
        with pytest.raises(SchemaError, match=r"missing \['action'\]"):
            store.append_episode(missing)
        bad_actor = synthetic_episode(4)
        bad_actor.actor = "robot"
        with pytest.raises(SchemaError, match="valid actors"):
            store.append_episode(bad_actor)
        nan = synthetic_episode(5)
        nan.steps["action"][3, 1] = np.nan
        with pytest.raises(SchemaError, match="key 'action': contains NaN"):
            store.append_episode(nan)
        assert len(store) == 1
    with EpisodeStore(tmp_path / "s") as store:
        assert_episode_equal(store, 0, synthetic_episode(0))
    assert check_store(tmp_path / "s").ok


def test_one_writer_at_a_time_and_readonly_refuses_writes(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episode(synthetic_episode(0))
        with pytest.raises(RuntimeError, match="open for writing by pid"):
            EpisodeStore(tmp_path / "s", mode="a")
        reader = EpisodeStore(tmp_path / "s")
        with pytest.raises(PermissionError):
            reader.append_episode(synthetic_episode(1))


def test_a_store_is_created_only_in_a_new_or_empty_directory_or_one_a_store_left(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "a_file").write_text("mine")
    with pytest.raises(SchemaError, match=r"not an episode store \(it holds a_file, notes.txt\)"):
        EpisodeStore(tmp_path, mode="a")
    with pytest.raises(SchemaError, match="a_file: is a file, not a store directory"):
        EpisodeStore(tmp_path / "a_file", mode="a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "notes.txt"]  # nothing written
    report = check_store(tmp_path)
    assert not report.ok and "not an episode store" in report.problems[0]
    # an interrupted creation (the lock file only) is completed; an empty directory becomes a store
    (tmp_path / "interrupted").mkdir()
    (tmp_path / "interrupted" / "writer.lock").write_text("")
    (tmp_path / "empty").mkdir()
    for name in ("interrupted", "empty"):
        assert check_store(tmp_path / name).ok
        with EpisodeStore(tmp_path / name, mode="a") as store:
            store.append_episode(synthetic_episode(0))
        assert len(EpisodeStore(tmp_path / name)) == 1


def test_a_reader_during_creation_finds_no_store_or_a_whole_empty_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index is created last: a reader polling a store another process is creating never meets a half-made
    one (it used to find the index before the steps group and fail in zarr)."""
    import vla_recover.data.index as index_module

    create, seen = index_module._create_atomically, []

    def reading_first(path: Path) -> None:
        with pytest.raises(FileNotFoundError, match="no index database"):
            EpisodeStore(tmp_path / "s")
        create(path)
        with EpisodeStore(tmp_path / "s") as reader:  # the index has just landed: the store reads as empty
            seen.append((len(reader), reader.specs()))

    monkeypatch.setattr(index_module, "_create_atomically", reading_first)
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episode(synthetic_episode(0))
    assert seen == [(0, {})]
    # an index left half-built by a crash does not make the directory foreign
    (tmp_path / "s" / "index.sqlite.creating").write_text("")
    assert check_store(tmp_path / "s").ok


def test_a_failed_key_write_raises_only_once_every_other_key_has_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import asyncio

    from zarr.core.array import AsyncArray

    store = EpisodeStore(tmp_path / "s", mode="a")
    store.append_episode(synthetic_episode(0))
    setitem, landed = AsyncArray.setitem, []

    async def slow_or_failing(self: AsyncArray, selection: object, value: object) -> None:  # type: ignore[type-arg]
        if self.path.endswith("data/action"):
            raise OSError("disk full")
        await asyncio.sleep(0.05)
        await setitem(self, selection, value)
        landed.append(self.path)

    monkeypatch.setattr(AsyncArray, "setitem", slow_or_failing)
    with pytest.raises(OSError, match="disk full"):
        store.append_episode(synthetic_episode(1))
    assert len(landed) == len(store.data_keys()) - 1  # none still in flight to land over the next batch
    monkeypatch.undo()
    store.append_episode(synthetic_episode(2))
    assert len(store) == 2
    assert_episode_equal(store, 1, synthetic_episode(2))
    store.close()


def test_other_schema_version_fails_clearly(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episode(synthetic_episode(0))
    db = sqlite3.connect(tmp_path / "s" / "index.sqlite")
    db.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    db.commit()
    db.close()
    with pytest.raises(SchemaError, match="schema version 99, this vla_recover reads version 1"):
        EpisodeStore(tmp_path / "s")


def test_index_missing_a_table_fails_clearly(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episode(synthetic_episode(0))
    db = sqlite3.connect(tmp_path / "s" / "index.sqlite")
    db.execute("DROP TABLE segments")
    db.commit()
    db.close()
    with pytest.raises(SchemaError, match=r"index.sqlite: index is missing table\(s\) segments"):
        EpisodeStore(tmp_path / "s")
    report = check_store(tmp_path / "s")
    assert not report.ok and "segments" in report.problems[0]


def test_truncated_chunk_is_reported_naming_the_key(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([synthetic_episode(i) for i in range(5)])
    chunk = next((tmp_path / "s" / "steps.zarr" / "data" / "action" / "c").rglob("*"))
    while chunk.is_dir():
        chunk = next(chunk.iterdir())
    chunk.write_bytes(chunk.read_bytes()[:10])
    report = check_store(tmp_path / "s")
    assert not report.ok
    assert any("data/action: chunk 0" in p for p in report.problems)


def test_readers_see_only_committed_episodes_while_a_writer_writes(tmp_path: Path) -> None:
    writer = EpisodeStore(tmp_path / "s", mode="a")
    writer.append_episodes([synthetic_episode(i) for i in range(3)])
    reader = EpisodeStore(tmp_path / "s")
    assert len(reader) == 3
    writer.append_episodes([synthetic_episode(i) for i in range(3, 6)])
    assert len(reader) == 6
    assert_episode_equal(reader, 5, synthetic_episode(5))
    writer.close()


def _kill_writer_at_random(path: Path, rng: np.random.Generator, images: bool) -> None:
    args = [sys.executable, "-m", "tests.data.synthetic", str(path)] + (["images"] if images else [])
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60.0  # start-up (imports) takes a second or more on a busy machine
    while not (path / "index.sqlite").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(float(rng.uniform(0.0, 1.7)))  # somewhere inside the write loop
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _verify_after_kill(path: Path) -> int:
    report = check_store(path)
    assert report.ok, report.problems
    with EpisodeStore(path, mode="a") as store:  # a writer reopening recovers the tail
        assert report.episodes == len(store)  # recovery loses nothing that check saw committed
        count = len(store)
        for i in range(count):
            assert_episode_equal(store, i, synthetic_episode(i, images="obs.images.front" in store.data_keys()))
    assert check_store(path).ok
    return count


@pytest.mark.parametrize("trial", range(3))
def test_sigkill_during_writes_keeps_every_committed_episode(tmp_path: Path, trial: int) -> None:
    rng = np.random.default_rng(trial)
    path = tmp_path / "s"
    _kill_writer_at_random(path, rng, images=trial == 2)
    first = _verify_after_kill(path)
    _kill_writer_at_random(path, rng, images=trial == 2)  # again, appending to the recovered store
    assert _verify_after_kill(path) >= first


@pytest.mark.slow
def test_sigkill_twenty_trials(tmp_path: Path) -> None:
    rng = np.random.default_rng(42)
    for trial in range(20):
        path = tmp_path / f"s{trial}"
        for _ in range(2):
            _kill_writer_at_random(path, rng, images=trial % 2 == 0)
            _verify_after_kill(path)


def test_sampler_windows_pad_at_episode_edges(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([synthetic_episode(i) for i in range(6)])
    store = EpisodeStore(tmp_path / "s")
    sampler = WindowSampler(store, WindowSpec(("obs.state",), obs_horizon=3, action_horizon=8))
    first = store.episodes()[0]
    window = sampler.gather(np.array([first.start, first.stop - 2]))
    state, action = store.episode(0)["obs.state"], store.episode(0)["action"]
    assert np.array_equal(window["obs.state"][0], state[[0, 0, 0]])  # history padded with the first observation
    assert np.array_equal(window["action"][0], action[:8])
    assert np.array_equal(window["action"][1, :2], action[-2:])
    assert window["action_is_pad"][1].tolist() == [False, False] + [True] * 6
    assert np.array_equal(window["action"][1, 2:], np.repeat(action[-1:], 6, axis=0))
    uncached = WindowSampler(store, WindowSpec(("obs.state",), 3, 8), cache_bytes=0)
    again = uncached.gather(np.array([first.start, first.stop - 2]))
    assert np.array_equal(again["action"], window["action"])


def test_sampler_filters_and_weights(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([synthetic_episode(i) for i in range(9)])
        store.write_segments(0, "critic", [(0, 4, "progress", None)], actor="test", event="labels_written", payload={})
    store = EpisodeStore(tmp_path / "s")
    rows = store.episodes()
    success = WindowSampler(store, outcomes=["success"])
    assert {int(e) for e in success.episode_of(success.anchors)} == {r.id for r in rows if r.outcome == "success"}
    human = WindowSampler(store, actors=["human"])
    assert set(store.read("actor")[human.anchors]) == {ACTORS.index("human")}
    segment = WindowSampler(store, segment_kinds=["progress"])
    assert segment.anchors.tolist() == [0, 1, 2, 3]
    weights = np.zeros(store.n_steps, dtype=np.float32)
    weights[10:20] = 2.0
    weighted = WindowSampler(store, step_weights=weights)
    batch = weighted.sample(32)
    assert set(batch["index"]) <= set(range(10, 20)) and np.all(batch["weight"] == 2.0)
    with pytest.raises(ValueError, match="valid choices"):
        WindowSampler(store, outcomes=["win"])
    with pytest.raises(KeyError, match=r"window key 'obs\.rgb'"):
        WindowSampler(store, WindowSpec(("obs.rgb",)))


def test_summary_counts(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([synthetic_episode(i) for i in range(6)])
    summary = store_summary(tmp_path / "s")
    assert summary["episodes"] == 6 and summary["outcomes"] == {"success": 3, "failure": 3}
    assert set(summary["actor_steps"]) == {"scripted", "policy", "human"}
    assert os.path.getsize(tmp_path / "s" / "index.sqlite") <= summary["size_bytes"]


def _handover_episode(rewind_actor: str) -> EpisodeData:
    """policy 0-4, hold 5-6 (a human reacting), human 7-10, rewind 11-13, human 14-16, policy 17-19."""
    actors = ["policy"] * 5 + ["hold"] * 2 + ["human"] * 4 + [rewind_actor] * 3 + ["human"] * 3 + ["policy"] * 3
    steps = {"obs.state": np.arange(20, dtype=np.float32)[:, None], "action": np.arange(20, dtype=np.float32)[:, None]}
    segments = [(0, 5, "autonomous"), (5, 11, "intervention"), (11, 14, "rewind"), (14, 17, "intervention"),
                (17, 20, "autonomous")]  # fmt: skip
    return EpisodeData(task="Synthetic", steps=steps, actor=actors, segments=segments)


@pytest.mark.parametrize("rewind_actor", ["rewind", "human"])  # "human": how stores before the rewind actor had it
def test_windows_stop_where_control_changes_hands_and_never_start_on_a_row_no_one_chose(
    tmp_path: Path, rewind_actor: str
) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([_handover_episode(rewind_actor)])
    store = EpisodeStore(tmp_path / "s")
    sampler = WindowSampler(store, WindowSpec(("obs.state",), obs_horizon=3, action_horizon=6))
    assert sampler.anchors.tolist() == [0, 1, 2, 3, 4, 7, 8, 9, 10, 14, 15, 16, 17, 18, 19]
    window = sampler.gather(np.array([3, 9, 14, 17]))
    targets = window["action"][..., 0].tolist()
    assert targets[0] == [3, 4, 4, 4, 4, 4]  # the policy's targets end before the hold
    assert targets[1] == [9, 10, 10, 10, 10, 10]  # a correction's end before the rewind rows
    assert targets[2] == [14, 15, 16, 16, 16, 16]  # and before the policy's steps after the hand-back
    assert window["action_is_pad"][2].tolist() == [False] * 3 + [True] * 3
    history = window["obs.state"][..., 0].tolist()
    assert history[0] == [1, 2, 3]
    assert history[2] == [14, 14, 14]  # the robot jumped back: its history starts at the row after the rewind
    assert history[3] == [15, 16, 17]  # and runs on through the hand-back, as the fleet's does
    across = WindowSampler(store, WindowSpec(("obs.state",), 3, 6, cross_boundary_targets=True))
    targets = across.gather(np.array([3, 9, 14]))["action"][..., 0].tolist()
    assert targets == [[3, 4, 4, 4, 4, 4], [9, 10, 10, 10, 10, 10], [14, 15, 16, 17, 18, 19]]  # never into a hold


def test_summary_shows_who_chose_the_steps_and_each_policy_version(tmp_path: Path) -> None:
    episode = _handover_episode("rewind")
    episode.policy_version = ["round_1-0123456789ab"] * 5 + [""] * 12 + ["round_2-ba9876543210"] * 3
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([episode])
    summary = store_summary(tmp_path / "s")
    assert summary["actor_steps"] == {"policy": 8, "human": 7, "hold": 2, "rewind": 3}
    assert summary["policy_versions"] == {
        "round_1-0123456789ab": {"steps": 5, "episodes": 1, "successes": 1},
        "round_2-ba9876543210": {"steps": 3, "episodes": 1, "successes": 1},
    }


def _episode_by(actor: list[str], version: str, segments: list[tuple[int, int, str]], robot: str) -> EpisodeData:
    n = len(actor)
    steps = {"obs.state": np.zeros((n, 2), np.float32), "action": np.zeros((n, 2), np.float32)}
    versions = [version if a == "policy" else "" for a in actor]
    return EpisodeData(task="T", steps=steps, robot=robot, actor=actor, policy_version=versions, segments=segments)


def test_the_store_api_finds_episodes_by_robot_policy_version_and_intervention(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([
            _episode_by(["policy"] * 6, "v1", [(0, 6, "autonomous")], "a"),
            _episode_by(["policy"] * 3 + ["human"] * 3, "v2", [(0, 3, "autonomous"), (3, 6, "intervention")], "b"),
            _episode_by(["scripted"] * 6, "", [], "a"),
        ])  # fmt: skip
    store = EpisodeStore(tmp_path / "s")
    assert [r.id for r in store.find_episodes(robot="a")] == [0, 2]
    assert [r.id for r in store.find_episodes(policy_version="v2")] == [1]
    assert [r.id for r in store.find_episodes(policy_version="never")] == []
    assert [r.id for r in store.find_episodes(intervened=True)] == [1]
    assert [r.id for r in store.find_episodes(robot="a", intervened=False)] == [0, 2]
    assert [(s.start, s.kind) for s in store.segments(episode=1)] == [(0, "autonomous"), (3, "intervention")]
    assert [s.episode for s in store.segments(kind="intervention")] == [1]
    assert [e.episode for e in store.events(kind="episode_recorded", episode=2)] == [2]


def test_segments_are_written_with_their_event_in_one_transaction_and_a_relabel_replaces_its_source(
    tmp_path: Path,
) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        store.append_episodes([synthetic_episode(i) for i in range(2)])
        first = store.write_segments(
            0, "critic", [(0, 2, "progress", 0.5), (2, 4, "idle", None)], actor="critic", event="labels_written",
            payload={"segmenter": "slope"},
        )  # fmt: skip
        again = store.write_segments(
            0, "critic", [(0, 4, "recovery", 0.9)], actor="critic", event="labels_written", payload={}, replace=True
        )
        with pytest.raises(SchemaError, match="segment kind"):  # the bad second segment: nothing of this call lands
            store.write_segments(1, "human", [(0, 1, "idle", None), (1, 2, "nonsense", None)], actor="ann",
                                 event="segment_relabelled", payload={})  # fmt: skip
        with pytest.raises(KeyError, match="episode 7 is not in"):
            store.write_segments(7, "human", [(0, 1, "idle", None)], actor="ann", event="x", payload={})
        store.append_events(
            [("note", "ann", {"n": 1}, "robot0", None, 123.0), ("note", "bob", {"n": 2}, None, 1, None)]
        )
    store = EpisodeStore(tmp_path / "s")
    assert [(s.start, s.stop, s.kind, s.score) for s in store.segments(episode=0, source="critic")] == [
        (0, 4, "recovery", 0.9)
    ]
    assert store.segments(episode=1, source="human") == []
    labels = store.events(kind="labels_written", episode=0)
    assert [e.payload["segment_ids"] for e in labels] == [first, again]
    assert labels[0].payload["segmenter"] == "slope"
    assert store.events(kind="segment_relabelled") == []
    logged = store.events(kind="note")
    assert [(e.actor, e.robot, e.episode) for e in logged] == [("ann", "robot0", None), ("bob", None, 1)]
    assert logged[0].time == 123.0 and logged[0].payload == {"n": 1}
    with pytest.raises(PermissionError, match="read-only"):
        store.write_segments(0, "human", [(0, 1, "idle", None)], actor="ann", event="x", payload={})
    with pytest.raises(PermissionError, match="read-only"):
        store.append_event("note", "ann", {})
