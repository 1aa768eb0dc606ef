"""The recorder: the one process that writes a fleet's episodes, whatever workers send them and in whatever order."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import time
from pathlib import Path

import numpy as np
import pytest

from tests.data.synthetic import synthetic_episode
from vla_recover.data import EpisodeData, EpisodeStore, Recorder, project_robots


def _worker(client, worker: int, count: int) -> None:  # type: ignore[no-untyped-def]
    for j in range(count):
        episode = synthetic_episode(100 * worker + j)
        key = f"ep{j}"
        client.begin_episode(
            key, episode.task, episode.robot, episode.instruction, actor=episode.actor, i=episode.info["i"]
        )
        half = episode.length // 2
        client.add_steps(key, {k: v[:half] for k, v in episode.steps.items()})
        client.add_steps(key, {k: v[half:] for k, v in episode.steps.items()})
        client.end_episode(key, episode.outcome)
    client.begin_episode("never-finished", "Synthetic", "robot9")
    client.event("slot_state", "fleet", {"state": "idle"}, robot=f"robot{worker}")


def test_recorder_commits_what_several_worker_processes_send(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        recorder = Recorder(store, context=ctx, batch_episodes=4)
        workers = [ctx.Process(target=_worker, args=(recorder.client(f"w{w}"), w, 5)) for w in range(3)]
        for p in workers:
            p.start()
        deadline = time.monotonic() + 60
        while any(p.is_alive() for p in workers) and time.monotonic() < deadline:
            recorder.pump(timeout=0.05)
        recorder.drain()
        assert len(store) == 15 and recorder.stats.events == 3
        found = {row.info["i"]: row.id for row in store.episodes()}
        for worker in range(3):
            for j in range(5):
                i = 100 * worker + j
                expected = synthetic_episode(i)
                stored = store.episode(found[i])
                assert np.array_equal(stored["action"], expected.steps["action"])
        views = project_robots(store)
        assert views["robot1"].state == "idle" and "robot9" not in {r.robot for r in store.episodes()}


def _seeded(seed: int) -> EpisodeData:
    episode = synthetic_episode(seed)
    return dataclasses.replace(episode, info={**episode.info, "seed": seed})


def test_recorder_with_a_seed_order_commits_in_that_order_whatever_order_episodes_come_in(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        recorder = Recorder(store, context=mp.get_context("spawn"), batch_episodes=2, seed_order=[10, 11, 12, 13])
        client = recorder.client("w")
        for seed in (11, 13, 10):
            client.record_episode(_seeded(seed))
        recorder.drain()
        assert [row.info["seed"] for row in store.episodes()] == [10, 11]  # 13 waits for 12
        client.record_episode(_seeded(12))
        recorder.drain()
        assert [row.info["seed"] for row in store.episodes()] == [10, 11, 12, 13]
        client.record_episode(_seeded(12))
        with pytest.raises(ValueError, match=r"info\.seed: got 12"):
            recorder.drain()
        assert len(store) == 4


def test_a_recorder_releases_what_it_holds_when_an_earlier_seed_never_comes(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "s", mode="a") as store:
        recorder = Recorder(store, context=mp.get_context("spawn"), seed_order=[0, 1, 2, 3])
        client = recorder.client("w")
        for seed in (3, 1):
            client.record_episode(_seeded(seed))
        recorder.drain()
        assert len(store) == 0  # both wait for seed 0, whose worker died
        assert len(recorder.release_held()) == 2
        assert [row.info["seed"] for row in store.episodes()] == [1, 3]
