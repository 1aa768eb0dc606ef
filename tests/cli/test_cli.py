from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest
from typer.testing import CliRunner

from vla_recover.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("command", [[], ["tasks"], ["render"], ["collect"]])
def test_every_command_has_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_tasks_lists_every_registered_id() -> None:
    result = runner.invoke(app, ["tasks"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in ("LiftCube", "PickPlaceBin", "PegInsert"):
        assert f"vla_recover/{name}-v0" in result.output


def test_collect_writes_episodes_and_a_summary(tmp_path: Path) -> None:
    result = runner.invoke(app, ["collect", "--task", "LiftCube", "--episodes", "3", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["success_rate"] == 1.0
    episode = np.load(tmp_path / "episode_000000.npz")
    assert episode["action"].shape[1] == 5
    assert episode["obs.state"].shape[0] == episode["action"].shape[0] + 1
    assert episode["progress"][-1] == 1.0


def test_collect_from_a_yaml_config(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("task: PegInsert\nepisodes: 2\nexpert: {action_noise: 0.05}\n")
    result = runner.invoke(app, ["collect", "--config", str(config)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "PegInsert" in result.output


def test_collect_rejects_a_bad_config_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("task: LiftCube\nepisodes: -4\n")
    result = runner.invoke(app, ["collect", "--config", str(config)])
    assert result.exit_code == 2
    assert "episodes" in result.output and "-4" in result.output


def test_collect_rejects_an_unknown_task_listing_valid_ids() -> None:
    result = runner.invoke(app, ["collect", "--task", "Stack"], env={"COLUMNS": "300"})
    assert result.exit_code == 2
    assert "vla_recover/LiftCube-v0" in result.output


@pytest.mark.parametrize("suffix", [".gif", ".mp4"])
def test_render_writes_a_video(tmp_path: Path, suffix: str) -> None:
    out = tmp_path / f"episode{suffix}"
    result = runner.invoke(app, ["render", "--task", "vla_recover/LiftCube-v0", "--out", str(out), "--size", "96"])
    assert result.exit_code == 0, result.output
    frames = iio.imread(out)
    assert frames.shape[0] > 10 and frames.shape[1:3] == (96, 96)
    assert frames[0].std() > 5.0


def test_render_rejects_an_unknown_extension(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "--task", "LiftCube", "--out", str(tmp_path / "x.avi")])
    assert result.exit_code != 0
    assert ".mp4" in result.output


def test_render_with_a_bad_failure_phase_lists_phases(tmp_path: Path) -> None:
    out = tmp_path / "x.gif"
    result = runner.invoke(app, ["render", "--task", "LiftCube", "--out", str(out), "--failure", "slip@carry"])
    assert result.exit_code == 2
    assert "reach, grasp, lift" in result.output
