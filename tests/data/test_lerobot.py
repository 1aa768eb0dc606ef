"""LeRobot v3.0 interop: import the three fixtures LeRobot 0.4.4 wrote, export -> import round trip, corrupt input,
the CLI, and (marker ``lerobot``, needs .venv-lerobot) LeRobot's own LeRobotDataset reading our export."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("av")
from PIL import Image  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from tests.data.synthetic import synthetic_episode  # noqa: E402
from tests.lerobot_venv import LEROBOT_PYTHON, needs_lerobot_venv  # noqa: E402
from vla_recover.cli.interop import export_app, import_app  # noqa: E402
from vla_recover.data import ACTORS, EpisodeData, EpisodeStore, check_store  # noqa: E402
from vla_recover.data.lerobot import LeRobotFormatError, export_lerobot, import_lerobot  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lerobot"
DATA = "data/chunk-000/file-000.parquet"


def fixture_copy(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copytree(FIXTURES / name, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def parquet_rows(dataset: Path) -> dict[str, Any]:
    return pq.read_table(dataset / DATA).to_pydict()


def actor_names(store: EpisodeStore, episode_id: int) -> list[str]:
    return [ACTORS[int(a)] for a in store.episode(episode_id)["actor"]]


# -- the fixtures LeRobot wrote ----------------------------------------------------------------------------------------
def test_import_state_only(tmp_path: Path) -> None:
    report = import_lerobot(FIXTURES / "single_arm_state", tmp_path / "store")
    assert (report.episodes, report.steps, report.ids) == (3, 63, [0, 1, 2])
    assert report.keys == {"observation.state": "obs.state", "action": "action"}
    rows = parquet_rows(FIXTURES / "single_arm_state")
    with EpisodeStore(tmp_path / "store") as store:
        episodes = store.episodes()
        assert [e.length for e in episodes] == [20, 35, 8]
        assert [e.instruction for e in episodes] == [
            "pick up the cube",
            "push the cube to the left",
            "pick up the cube",
        ]
        assert {(e.task, e.outcome) for e in episodes} == {("single_arm_state", "success")}
        assert store.specs()["obs.state"].shape == (6,)
        np.testing.assert_array_equal(store.read("obs.state"), np.array(rows["observation.state"], np.float32))
        np.testing.assert_array_equal(store.read("action"), np.array(rows["action"], np.float32))
        np.testing.assert_allclose(store.read("sim_time"), rows["timestamp"], atol=1e-6)
        assert set(actor_names(store, 1)) == {"scripted"}
        assert not store.read("intervention").any()


def test_import_cameras_with_intervention_and_reward(tmp_path: Path) -> None:
    dataset = FIXTURES / "bimanual_cameras_intervention"
    report = import_lerobot(dataset, tmp_path / "store", default_actor="policy", robot="aloha0", task="Bimanual")
    assert report.keys["observation.images.high"] == "obs.images.high"
    assert report.keys["next.reward"] == "reward"
    rows = parquet_rows(dataset)
    with EpisodeStore(tmp_path / "store") as store:
        specs = store.specs()
        assert specs["obs.images.high"].shape == (32, 40, 3)
        assert specs["obs.images.left_wrist"].shape == (24, 24, 3)
        assert specs["reward"].shape == ()
        high = store.read("obs.images.high")
        for i in (0, 17, 36):
            expected = np.asarray(Image.open(io.BytesIO(rows["observation.images.high"][i]["bytes"])))
            np.testing.assert_array_equal(high[i], expected)
        np.testing.assert_array_equal(store.read("intervention"), rows["intervention"])
        np.testing.assert_array_equal(store.read("reward"), np.array(rows["next.reward"], np.float32))
        for episode in store.episodes():
            assert (episode.robot, episode.task) == ("aloha0", "Bimanual")
            assert episode.outcome == "success"  # reward 1.0 at frame 14 of both
            actors = actor_names(store, episode.id)
            assert actors[5:9] == ["human"] * 4
            assert set(actors[:5] + actors[9:]) == {"policy"}


def test_reward_threshold_decides_outcome(tmp_path: Path) -> None:
    import_lerobot(FIXTURES / "bimanual_cameras_intervention", tmp_path / "store", success_reward=2.0)
    with EpisodeStore(tmp_path / "store") as store:
        assert {e.outcome for e in store.episodes()} == {"failure"}


def test_import_av1_video(tmp_path: Path) -> None:
    report = import_lerobot(FIXTURES / "single_arm_video", tmp_path / "store")
    assert report.steps == 30
    with EpisodeStore(tmp_path / "store") as store:
        assert [e.length for e in store.episodes()] == [12, 18]
        for episode in store.episodes():
            frames = store.episode(episode.id)["obs.images.front"]
            assert frames.shape == (episode.length, 48, 64, 3)
            expected = (np.arange(episode.length) * 10) % 255
            # lossy AV1 + yuv420 -> rgb: within 2 levels of the flat grey LeRobot wrote
            assert np.abs(frames.reshape(episode.length, -1).astype(int) - expected[:, None]).max() <= 2


# -- export and round trip -----------------------------------------------------------------------------------------
def rich_episode(i: int) -> EpisodeData:
    episode = synthetic_episode(i, images=True)
    n = episode.length
    episode.steps["phase"] = (np.arange(n) * 3 // n).astype(np.int8)
    episode.steps["reward"] = (np.arange(n) == n - 1).astype(np.float32)
    episode.steps["obs.images.wrist"] = np.random.default_rng(i).integers(0, 255, (n, 8, 12, 3), dtype=np.uint8)
    episode.phases = ("reach", "grasp", "place")
    episode.policy_version = ["v1" if t < n // 2 else "v2" for t in range(n)]
    episode.actor = ["policy" if t % 4 else "human" for t in range(n)]
    episode.actor[1:3] = ["hold", "rewind"]  # rows no one chose
    return episode


def assert_same_stores(a: EpisodeStore, b: EpisodeStore) -> None:
    assert a.specs() == b.specs()
    assert len(a) == len(b)
    names_a, names_b = a.names("policy_version"), b.names("policy_version")
    for row_a, row_b in zip(a.episodes(), b.episodes(), strict=True):
        fields = ("length", "robot", "task", "instruction", "outcome", "phases", "info")
        assert [getattr(row_a, f) for f in fields] == [getattr(row_b, f) for f in fields]
        steps_a, steps_b = a.episode(row_a.id), b.episode(row_b.id)
        for key in steps_a:
            if key == "robot":  # codes may differ; the names are compared through the rows
                continue
            if key == "policy_version":
                assert [names_a.get(int(c)) for c in steps_a[key]] == [names_b.get(int(c)) for c in steps_b[key]]
                continue
            np.testing.assert_array_equal(steps_a[key], steps_b[key], err_msg=key)


def test_export_reimport_round_trip(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "store", mode="a") as store:
        store.append_episodes([rich_episode(i) for i in range(5)])
    report = export_lerobot(tmp_path / "store", tmp_path / "lr", fps=15, robot_type="panda")
    assert (report.episodes, report.data_files) == (5, 1)
    assert report.features["obs.images.front"] == "observation.images.front"
    assert report.features["reward"] == "next.reward"
    info = json.loads((tmp_path / "lr/meta/info.json").read_text())
    assert (info["codebase_version"], info["fps"], info["robot_type"]) == ("v3.0", 15, "panda")
    assert info["total_frames"] == report.frames
    assert info["features"]["observation.images.wrist"] == {
        "dtype": "image",
        "shape": [8, 12, 3],
        "names": ["height", "width", "channels"],
    }
    for name in ("intervention", "actor", "progress", "phase", "policy_version", "timestamp", "task_index"):
        assert name in info["features"]
    stats = json.loads((tmp_path / "lr/meta/stats.json").read_text())
    assert np.array(stats["observation.images.front"]["mean"]).shape == (3, 1, 1)
    assert stats["observation.state"]["count"] == [report.frames]
    data = pq.read_table(tmp_path / "lr" / DATA)
    assert data.column("index").to_pylist() == list(range(report.frames))
    # a LeRobot user can drop the rows no one chose without knowing our actor codes
    chosen = data.column("action_chosen").to_pylist()
    assert info["features"]["action_chosen"]["dtype"] == "bool"
    assert chosen[:4] == [True, False, False, True] and chosen.count(False) == 2 * 5
    assert not (tmp_path / ".lr.partial").exists() and len(list(tmp_path.iterdir())) == 2

    again = import_lerobot(tmp_path / "lr", tmp_path / "store2")
    assert again.episodes == 5
    with EpisodeStore(tmp_path / "store") as a, EpisodeStore(tmp_path / "store2") as b:
        assert_same_stores(a, b)
        assert actor_names(b, 0) == actor_names(a, 0)


def test_export_splits_data_files_and_refuses_to_overwrite(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "store", mode="a") as store:
        store.append_episodes([synthetic_episode(i, images=True) for i in range(8)])
    export_lerobot(tmp_path / "store", tmp_path / "lr", data_file_mb=0)  # every episode opens a new file
    files = sorted((tmp_path / "lr/data/chunk-000").glob("*.parquet"))
    assert len(files) == 8
    episodes = pq.read_table(tmp_path / "lr/meta/episodes/chunk-000/file-000.parquet").to_pydict()
    assert episodes["data/file_index"] == list(range(8))
    with pytest.raises(ValueError, match="not empty"):
        export_lerobot(tmp_path / "store", tmp_path / "lr")
    import_lerobot(tmp_path / "lr", tmp_path / "store2")
    import_lerobot(tmp_path / "lr", tmp_path / "store2")  # appends: ids go on
    with EpisodeStore(tmp_path / "store") as a, EpisodeStore(tmp_path / "store2") as b:
        assert len(b) == 16
        assert b.read("obs.state").shape[0] == 2 * a.n_steps


# -- corrupt input ----------------------------------------------------------------------------------------------------
def edit_info(dataset: Path, change: Any) -> None:
    path = dataset / "meta/info.json"
    info = json.loads(path.read_text())
    change(info)
    path.write_text(json.dumps(info))


CASES = {  # case -> the fixture it breaks
    "no_info": "bimanual_cameras_intervention",
    "old_version": "bimanual_cameras_intervention",
    "missing_column": "bimanual_cameras_intervention",
    "state_shape": "bimanual_cameras_intervention",
    "image_shape": "bimanual_cameras_intervention",
    "bad_image": "bimanual_cameras_intervention",
    "short_episode": "bimanual_cameras_intervention",
    "missing_video": "single_arm_video",
}


def corrupt(tmp_path: Path, case: str) -> tuple[Path, list[str]]:
    """A broken copy of a fixture and the words its error must contain."""
    dataset = fixture_copy(tmp_path, CASES[case])
    data = dataset / DATA
    if case == "no_info":
        (dataset / "meta/info.json").unlink()
        return dataset, ["meta/info.json", "missing"]
    if case == "old_version":
        edit_info(dataset, lambda info: info.update(codebase_version="v2.1"))
        return dataset, ["meta/info.json", "v2.1"]
    if case == "missing_column":
        pq.write_table(pq.read_table(data).drop_columns(["action"]), data)
        return dataset, [DATA, "'action'", "missing"]
    if case == "state_shape":
        edit_info(dataset, lambda info: info["features"]["observation.state"].update(shape=[15]))
        return dataset, [DATA, "'observation.state'", "15"]
    if case == "image_shape":
        edit_info(dataset, lambda info: info["features"]["observation.images.high"].update(shape=[32, 41, 3]))
        return dataset, [DATA, "'observation.images.high'", "41"]
    if case == "bad_image":
        table = pq.read_table(data)
        cells = table.column("observation.images.left_wrist").to_pylist()
        cells[30] = {"bytes": b"not a png", "path": "x.png"}
        column = pa.array(cells, type=table.schema.field("observation.images.left_wrist").type)
        index = table.schema.get_field_index("observation.images.left_wrist")
        pq.write_table(table.set_column(index, "observation.images.left_wrist", column), data)
        return dataset, [DATA, "'observation.images.left_wrist'", "row 30"]
    if case == "short_episode":
        table = pq.read_table(data)
        pq.write_table(table.slice(0, table.num_rows - 1), data)
        return dataset, ["rows", "meta/episodes"]
    if case == "missing_video":
        next((dataset / "videos").rglob("*.mp4")).unlink()
        return dataset, ["file-000.mp4", "observation.images.front"]
    raise AssertionError(case)


@pytest.mark.parametrize("case", CASES)
def test_corrupt_input_names_file_and_key_and_keeps_store(tmp_path: Path, case: str) -> None:
    store_path = tmp_path / "store"
    import_lerobot(FIXTURES / CASES[case], store_path)  # the store already holds this kind of episode
    with EpisodeStore(store_path) as store:
        before = {key: store.read(key) for key in ("obs.state", "action", "actor")}
        count = len(store)
    dataset, words = corrupt(tmp_path, case)
    with pytest.raises(LeRobotFormatError) as error:
        import_lerobot(dataset, store_path)
    for word in words:
        assert word in str(error.value), (word, str(error.value))
    assert check_store(store_path).ok
    with EpisodeStore(store_path) as store:
        assert len(store) == count
        for key, value in before.items():
            np.testing.assert_array_equal(store.read(key), value)


def test_error_part_way_leaves_whole_episodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vla_recover.data import lerobot

    with EpisodeStore(tmp_path / "store", mode="a") as store:
        store.append_episodes([synthetic_episode(i, images=True) for i in range(6)])
    export_lerobot(tmp_path / "store", tmp_path / "lr", data_file_mb=0)  # one file per episode
    broken = tmp_path / "lr/data/chunk-000/file-004.parquet"
    table = pq.read_table(broken)
    cells = [{"bytes": b"garbage", "path": "frame.png"}] * table.num_rows
    index = table.schema.get_field_index("observation.images.front")
    column = pa.array(cells, type=table.schema.field(index).type)
    pq.write_table(table.set_column(index, "observation.images.front", column), broken)
    monkeypatch.setattr(lerobot, "_BATCH_BYTES", 1)  # append after every episode
    with pytest.raises(LeRobotFormatError, match=r"4 complete episodes, ids 0\.\.3"):
        import_lerobot(tmp_path / "lr", tmp_path / "store2")
    assert check_store(tmp_path / "store2").ok
    with EpisodeStore(tmp_path / "store") as a, EpisodeStore(tmp_path / "store2") as b:
        assert len(b) == 4
        assert b.n_steps == a.episodes()[3].stop
        np.testing.assert_array_equal(b.read("obs.images.front"), a.read("obs.images.front", 0, b.n_steps))


def test_import_rejects_keys_that_do_not_match_the_store(tmp_path: Path) -> None:
    import_lerobot(FIXTURES / "single_arm_state", tmp_path / "store")
    with pytest.raises(LeRobotFormatError, match=r"the store lacks \['obs\.images\.high', 'obs\.images\.left_wrist'"):
        import_lerobot(FIXTURES / "bimanual_cameras_intervention", tmp_path / "store")
    with EpisodeStore(tmp_path / "store") as store:
        assert len(store) == 3


# -- CLI ------------------------------------------------------------------------------------------------------------
runner = CliRunner()


@pytest.mark.parametrize(("app", "args"), [(export_app, ["lerobot", "--help"]), (import_app, ["lerobot", "--help"])])
def test_cli_help(app: Any, args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "LeRobot" in result.output


def test_cli_import_then_export(tmp_path: Path) -> None:
    dataset = FIXTURES / "bimanual_cameras_intervention"
    result = runner.invoke(import_app, ["lerobot", str(dataset), "--out", str(tmp_path / "store")])
    assert result.exit_code == 0, result.output
    assert "37" in result.output
    out = tmp_path / "lr"
    result = runner.invoke(
        export_app, ["lerobot", "--store", str(tmp_path / "store"), "--out", str(out), "--fps", "10"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads((out / "meta/info.json").read_text())["total_frames"] == 37


def test_cli_errors_exit_2(tmp_path: Path) -> None:
    result = runner.invoke(import_app, ["lerobot", str(tmp_path / "nowhere"), "--out", str(tmp_path / "store")])
    assert result.exit_code == 2
    assert "error" in result.output and "nowhere" in result.output
    result = runner.invoke(export_app, ["lerobot", "--store", str(tmp_path / "nostore"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    result = runner.invoke(import_app, ["lerobot", str(FIXTURES / "single_arm_state"), "--out", "x", "--actor", "cat"])
    assert result.exit_code == 2 and "actor" in result.output


# -- LeRobot's own reader -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lerobot_views(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Our export of a store and LeRobot's own fixture, both read by LeRobotDataset in one subprocess."""
    tmp = tmp_path_factory.mktemp("lerobot")
    with EpisodeStore(tmp / "store", mode="a") as store:
        store.append_episodes([rich_episode(i) for i in range(4)])
        rows = store.episodes()
    export_lerobot(tmp / "store", tmp / "lr", fps=20)
    probe = [0, rows[1].start + 1, rows[-1].stop - 1]
    ours, theirs = tmp / "lr", FIXTURES / "bimanual_cameras_intervention"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf"), "TQDM_DISABLE": "1"}
    args = [f"{ours}={','.join(map(str, probe))}", f"{theirs}=0,20"]
    result = subprocess.run(
        [str(LEROBOT_PYTHON), str(FIXTURES / "load_with_lerobot.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    views: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return {"store": tmp / "store", "probe": probe, "ours": views[str(ours)], "theirs": views[str(theirs)], "tmp": tmp}


@pytest.mark.lerobot
@needs_lerobot_venv
def test_lerobot_loads_our_export(lerobot_views: dict[str, Any]) -> None:
    view = lerobot_views["ours"]
    with EpisodeStore(lerobot_views["store"]) as store:
        rows = store.episodes()
        assert (view["episodes"], view["frames"], view["fps"]) == (4, store.n_steps, 20)
        assert view["camera_keys"] == ["observation.images.front", "observation.images.wrist"]
        assert view["features"]["observation.state"] == "float32"
        assert {"intervention", "actor", "progress", "phase", "policy_version"} <= set(view["features"])
        assert "observation.images.front" in view["stats_keys"]
        for index in lerobot_views["probe"]:
            item = view["items"][str(index)]
            row = next(r for r in rows if r.start <= index < r.stop)
            assert item["task"] == row.instruction
            np.testing.assert_allclose(item["observation.state"][-1], store.read("obs.state", index, index + 1)[0])
            image = store.read("obs.images.front", index, index + 1)[0]
            np.testing.assert_array_equal(np.array(item["observation.images.front"]), image)
            actions = store.read("action", index, min(index + 4, row.stop))
            np.testing.assert_allclose(np.array(item["action"])[: len(actions)], actions, rtol=1e-6)
            assert item["action_is_pad"] == [index + k >= row.stop for k in range(4)]
            assert bool(item["intervention"]) == bool(store.read("intervention", index, index + 1)[0])


@pytest.mark.lerobot
@needs_lerobot_venv
def test_lerobot_and_we_read_its_fixture_alike(lerobot_views: dict[str, Any]) -> None:
    view = lerobot_views["theirs"]
    store_path = lerobot_views["tmp"] / "fixture_store"
    import_lerobot(FIXTURES / "bimanual_cameras_intervention", store_path)
    with EpisodeStore(store_path) as store:
        assert view["frames"] == store.n_steps and view["episodes"] == len(store)
        for index in (0, 20):
            item = view["items"][str(index)]
            wrist = store.read("obs.images.left_wrist", index, index + 1)[0]
            np.testing.assert_array_equal(np.array(item["observation.images.left_wrist"]), wrist)
            np.testing.assert_allclose(item["observation.state"][-1], store.read("obs.state", index, index + 1)[0])
