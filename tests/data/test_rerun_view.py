"""`vla-recover view`: an episode as a Rerun recording, read back to check what it holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.data.synthetic import synthetic_episode
from vla_recover.cli.main import app
from vla_recover.data import EpisodeStore

rerun_dataframe = pytest.importorskip("rerun.dataframe")


def test_an_episode_recording_holds_its_cameras_series_progress_segments_and_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    episode = synthetic_episode(4, images=True)
    with EpisodeStore(tmp_path / "store", mode="a") as store:
        store.append_episode(synthetic_episode(1, images=True))
        target = store.append_episode(episode)
        length = store.episode_row(target).length
        store.write_segments(target, "critic", [(0, 3, "progress", 0.9), (3, length, "failure_inducing", 0.4)],
                             actor="critic", event="segmented", payload={})  # fmt: skip
        store.append_event("takeover_granted", "alice", {"step": 2}, episode=target)
    rrd = tmp_path / "episode.rrd"
    runner = CliRunner()
    result = runner.invoke(
        app, ["view", "--store", str(tmp_path / "store"), "--episode", str(target), "--save", str(rrd)]
    )
    assert result.exit_code == 0, result.output

    table = rerun_dataframe.load_recording(rrd).view(index="step", contents="/**").select().read_all()
    columns = set(table.column_names)
    for entity in ("/cameras/front:Image:buffer", "/state:Scalars:scalars", "/action:Scalars:scalars",
                   "/progress:Scalars:scalars", "/actor:TextLog:text", "/segments/critic:TextLog:text",
                   "/events:TextLog:text"):  # fmt: skip
        assert entity in columns, sorted(columns)
    steps = table.column("step").to_pylist()
    assert sorted(set(steps)) == list(range(length))  # a row for every step, on the step timeline
    frames = table.column("/cameras/front:Image:buffer").to_pylist()
    assert sum(frame is not None for frame in frames) == length  # as many frames as the episode has steps
    third = table.column("/state:Scalars:scalars").to_pylist()[steps.index(2)]
    np.testing.assert_allclose(third, episode.steps["obs.state"][2], rtol=1e-6)
    texts = [t for t in table.column("/segments/critic:TextLog:text").to_pylist() if t]
    assert any("failure_inducing: steps 3-" in str(t) for t in texts)

    missing = runner.invoke(app, ["view", "--store", str(tmp_path / "store"), "--episode", "99", "--save", str(rrd)])
    assert missing.exit_code == 2 and "episode: episode 99 is not in" in missing.output
    wrong = runner.invoke(app, ["view", "--store", str(tmp_path / "store"), "--episode", "0", "--save", "x.txt"])
    assert wrong.exit_code == 2 and "must end in .rrd" in wrong.output
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    headless = runner.invoke(app, ["view", "--store", str(tmp_path / "store"), "--episode", "0"])
    assert headless.exit_code == 2 and "pass --save FILE.rrd" in headless.output
