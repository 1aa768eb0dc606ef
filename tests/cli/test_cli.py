from __future__ import annotations

import json
from pathlib import Path

import imageio.v3 as iio
import pytest
from typer.testing import CliRunner

from vla_recover.cli.main import app
from vla_recover.data import ACTORS, EpisodeStore

runner = CliRunner()


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["tasks"],
        ["render"],
        ["collect"],
        ["store"],
        ["store", "info"],
        ["store", "check"],
        ["export", "lerobot"],
        ["import", "lerobot"],
    ],
)
def test_every_command_has_help(command: list[str]) -> None:
    result = runner.invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_tasks_lists_every_registered_id() -> None:
    result = runner.invoke(app, ["tasks"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in ("LiftCube", "PickPlaceBin", "PegInsert"):
        assert f"vla_recover/{name}-v0" in result.output


def test_collect_records_scripted_episodes_into_a_store(tmp_path: Path) -> None:
    store = tmp_path / "demos"
    args = ["collect", "--task", "LiftCube", "--episodes", "4", "--out", str(store), "--workers", "2", "--seed", "5"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    assert summary["episodes"] == 4 and summary["success_rate"] == 1.0
    with EpisodeStore(store) as reader:
        rows = reader.episodes()
        assert [r.info["seed"] for r in rows] == [5, 6, 7, 8]  # in seed order, whichever worker finished first
        episode = reader.episode(rows[0].id)
        assert episode["action"].shape[1] == 5 and episode["obs.state"].shape[0] == episode["action"].shape[0]
        assert set(episode["actor"]) == {ACTORS.index("scripted")}
        assert rows[0].phases == ("reach", "grasp", "lift") and episode["phase"][-1] == 2
    result = runner.invoke(app, ["store", "check", str(store)])
    assert result.exit_code == 0 and "ok" in result.output
    result = runner.invoke(app, ["store", "info", str(store), "--json"])
    assert json.loads(result.output)["actor_steps"] == {"scripted": summary["steps"]}


def test_collect_from_a_yaml_config(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"task: PegInsert\nepisodes: 2\nworkers: 1\nout: {tmp_path / 's'}\nexpert: {{action_noise: 0.05}}\n"
    )
    result = runner.invoke(app, ["collect", "--config", str(config)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "PegInsert" in result.output


def test_store_check_fails_on_a_broken_store(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "index.sqlite").write_text("not a database")
    result = runner.invoke(app, ["store", "check", str(tmp_path / "s")])
    assert result.exit_code == 1 and "not a readable SQLite index" in result.output
    result = runner.invoke(app, ["store", "info", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such store" in result.output


def test_collect_rejects_a_bad_config_naming_the_field(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("task: LiftCube\nepisodes: -4\n")
    result = runner.invoke(app, ["collect", "--config", str(config)])
    assert result.exit_code == 2
    assert "episodes" in result.output and "-4" in result.output


@pytest.mark.parametrize("command", ["collect", "train", "fleet", "loop"])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- task: LiftCube\n", "expected a mapping of fields at the top, got a list"),
        ("task: [Lift\n", "not valid YAML"),
    ],
)
def test_config_files_that_are_not_a_mapping_of_fields_are_rejected_naming_the_file(
    tmp_path: Path, command: str, text: str, expected: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = runner.invoke(app, [command, "--config", str(config)], env={"COLUMNS": "300"})
    assert result.exit_code == 2, result.output
    assert f"invalid config {config}" in result.output and expected in result.output


def test_an_output_path_under_a_file_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("mine")
    result = runner.invoke(app, ["render", "--task", "LiftCube", "--out", str(tmp_path / "a_file" / "x.mp4")])
    assert result.exit_code == 2 and "File exists" in result.output and "Traceback" not in result.output
    assert (tmp_path / "a_file").read_text() == "mine"


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ('{"kind": "progress_critic", "schema_version": 1}', "not a policy checkpoint (a progress_critic checkpoint)"),
        ("{broken", "config.json: not valid JSON"),
        ("[1, 2]", "config.json: expected a JSON object, got list"),
    ],
)
def test_eval_names_what_is_wrong_with_a_directory_that_is_not_a_policy(
    tmp_path: Path, config: str, expected: str
) -> None:
    (tmp_path / "config.json").write_text(config)
    result = runner.invoke(
        app, ["eval", "--task", "LiftCube", "--policy", str(tmp_path), "--episodes", "1"], env={"COLUMNS": "300"}
    )
    assert result.exit_code == 2 and expected in result.output, result.output


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


def test_eval_names_a_bad_field_of_its_task_config(tmp_path: Path) -> None:
    (tmp_path / "task.yaml").write_text("failures:\n  - {kind: shove, phase: reach}\n")
    (tmp_path / "config.json").write_text("{}")
    args = ["eval", "--task", "LiftCube", "--policy", str(tmp_path), "--task-config", str(tmp_path / "task.yaml")]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 2 and "field 'failures.0.kind': got 'shove'" in result.output, result.output
