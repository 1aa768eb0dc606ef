"""The fleet's recorder: writes off the control loop, in order, and a failed write stops the fleet, losing nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.data.synthetic import synthetic_episode
from vla_recover.data import EpisodeData, EpisodeStore
from vla_recover.fleet.recorder import FleetRecorder


def test_writes_happen_on_the_writer_thread_in_the_order_asked_for(tmp_path: Path) -> None:
    recorder = FleetRecorder(tmp_path / "store", store_every_s=0.5)
    built_on: list[str] = []

    def attempt(i: int) -> list[EpisodeData]:
        built_on.append(threading.current_thread().name)
        return [synthetic_episode(i)]

    recorder.event("episode_started", "fleet", {"n": 1}, "robot0", sim_time=0.1234)
    recorder.finished(lambda: attempt(0))
    recorder.flush()  # the batch is not due yet
    assert recorder.call(len) == 0
    recorder.finished(lambda: attempt(1))
    time.sleep(0.6)
    recorder.flush()  # due: its first attempt has waited store_every_s
    recorder.event("reset", "fred", {"seconds": 2.0}, "robot1", sim_time=0.2)
    assert recorder.call(len) == 2  # a call runs after every write asked for before it
    assert built_on == ["fleet-store-writer"] * 2  # the control loop never builds or writes an episode
    recorder.sync()
    events = [(e.kind, e.actor, e.payload) for e in recorder.store.events()]
    assert events[0] == ("episode_started", "fleet", {"n": 1, "sim_time": 0.123})
    assert events[-1] == ("reset", "fred", {"seconds": 2.0, "sim_time": 0.2})
    assert [kind for kind, _, _ in events].index("episode_recorded") < len(events) - 1  # in the order asked for
    recorder.finished(lambda: attempt(2))
    recorder.close()  # writes what is still queued
    with EpisodeStore(tmp_path / "store") as store:
        assert [row.info["i"] for row in store.episodes()] == [0, 1, 2]


def test_a_failed_write_is_raised_in_the_control_loop_and_loses_nothing_else(tmp_path: Path) -> None:
    recorder = FleetRecorder(tmp_path / "store", store_every_s=0.0)
    recorder.finished(lambda: [synthetic_episode(0)])
    recorder.flush()
    broken = synthetic_episode(1)
    broken.steps["obs.state"][3, 2] = np.nan
    recorder.finished(lambda: [broken])
    recorder.flush()
    with pytest.raises(RuntimeError, match=r"a write failed: key 'obs.state': contains NaN"):
        recorder.sync()
    with pytest.raises(RuntimeError, match="a write failed"):  # and at every call after, so the fleet stops
        recorder.event("tick", "fleet", {}, None, sim_time=1.0)
    recorder._unstored.append(lambda: [synthetic_episode(2)])  # an attempt that was waiting for its batch
    with pytest.raises(RuntimeError, match="a write failed"):
        recorder.close()
    with EpisodeStore(tmp_path / "store") as store:
        assert [row.info["i"] for row in store.episodes()] == [0, 2]
