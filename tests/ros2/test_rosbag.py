"""rosbag2 export/import: an episode round-trips through sqlite3 and mcap bags; a robot's recording imports."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vla_recover.data import EpisodeData, EpisodeStore
from vla_recover.data.rosbag import export_episode_bag, read_bag
from vla_recover.ros2.messages import decode, from_message, to_message, typestore

pytest.importorskip("rosbags")


def episode() -> EpisodeData:
    rng = np.random.default_rng(0)
    steps = {
        "obs.state": rng.normal(size=(12, 7)).astype(np.float32),
        "obs.images.front": rng.integers(0, 255, (12, 8, 10, 3), dtype=np.uint8),
        "action": rng.uniform(-1, 1, (12, 5)).astype(np.float32),
        "progress": np.r_[np.linspace(0, 1, 11), np.nan].astype(np.float32),
        "phase": np.r_[[0] * 5, [1] * 7].astype(np.int8),
    }
    return EpisodeData(
        task="LiftCube", steps=steps, robot="arm3", instruction="lift the red cube", outcome="success",
        actor=["policy"] * 6 + ["human"] * 6, policy_version=["v7"] * 6 + [""] * 6, phases=("reach", "lift"),
        info={"seed": 4}, segments=[(0, 6, "autonomous"), (6, 12, "intervention")],
    )  # fmt: skip


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_an_episode_round_trips_through_a_bag(tmp_path: Path, storage: str) -> None:
    with EpisodeStore(tmp_path / "a", mode="a") as store:
        store.append_episodes([episode()])
        export_episode_bag(store, 0, tmp_path / "bag", storage=storage)  # type: ignore[arg-type]
        original = store.episode(0)
    with EpisodeStore(tmp_path / "b", mode="a") as store:
        store.append_episodes([read_bag(tmp_path / "bag")])
        back, row = store.episode(0), store.episodes()[0]
        segments = [(s.start, s.stop, s.kind) for s in store.segments(episode=0)]
        versions = store.names("policy_version")
    for key in ("obs.state", "obs.images.front", "action", "phase", "progress", "actor", "sim_time"):
        np.testing.assert_array_equal(back[key], original[key], err_msg=key)
    assert [versions.get(int(v), "") for v in back["policy_version"]] == ["v7"] * 6 + [""] * 6
    assert (row.task, row.robot, row.instruction, row.outcome, row.phases) == (
        "LiftCube", "arm3", "lift the red cube", "success", ("reach", "lift"))  # fmt: skip
    assert segments == [(0, 6, "autonomous"), (6, 12, "intervention")]


def test_a_bag_with_broken_metadata_or_storage_is_a_value_error_naming_it(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "a", mode="a") as store:
        store.append_episodes([episode()])
        export_episode_bag(store, 0, tmp_path / "bag", storage="sqlite3")
    database = next((tmp_path / "bag").glob("*.db3"))
    database.write_bytes(database.read_bytes()[:3000])
    with pytest.raises(ValueError, match=r"bag: .*bag cannot be read \(.*malformed"):
        read_bag(tmp_path / "bag")
    (tmp_path / "bag" / "metadata.yaml").write_text("- not the metadata\n")
    with pytest.raises(ValueError, match=r"bag: .*bag cannot be read \(Invalid bag metadata"):
        read_bag(tmp_path / "bag")


def test_a_robot_recording_imports_with_a_topic_map(tmp_path: Path) -> None:
    from rosbags.rosbag2 import Writer

    types = typestore().types
    joint_state = types["sensor_msgs/msg/JointState"]
    header = types["std_msgs/msg/Header"](stamp=types["builtin_interfaces/msg/Time"](sec=0, nanosec=0), frame_id="")
    with Writer(tmp_path / "robot", version=9) as writer:
        states = writer.add_connection("/joint_states", joint_state.__msgtype__, typestore=typestore())
        commands = writer.add_connection("/position_commands", "std_msgs/msg/Float64MultiArray", typestore=typestore())
        for i in range(30):  # joint states at 30 Hz, from t = 10 ms
            message = joint_state(header=header, name=["j1", "j2"], position=np.array([i, -i], np.float64),
                                  velocity=np.zeros(2), effort=np.zeros(2))  # fmt: skip
            writer.write(
                states, 10_000_000 + i * 33_333_333, typestore().serialize_cdr(message, joint_state.__msgtype__)
            )
        for i in range(10):  # commands at 10 Hz from t = 0: the first comes before any joint state and is dropped
            _, raw = to_message(np.array([i, i + 0.5]))
            writer.write(commands, i * 100_000_000, raw)
    recorded = read_bag(tmp_path / "robot", task="LiftCube", topics={"obs.state": "/joint_states",
                                                                      "action": "/position_commands"})  # fmt: skip
    assert recorded.length == 9
    np.testing.assert_array_equal(recorded.steps["action"][0], [1, 1.5])
    np.testing.assert_array_equal(
        recorded.steps["obs.state"][:, 0], [2, 5, 8, 11, 14, 17, 20, 23, 26]
    )  # latest at or before each
    np.testing.assert_allclose(recorded.steps["sim_time"], np.arange(9) * 0.1)
    with pytest.raises(ValueError, match="'/camera' is not in"):
        read_bag(tmp_path / "robot", task="LiftCube", topics={"obs.state": "/camera", "action": "/position_commands"})
    with pytest.raises(ValueError, match="not a vla_recover export"):
        read_bag(tmp_path / "robot")
    with pytest.raises(FileNotFoundError, match="not a rosbag2 directory"):
        read_bag(tmp_path)


def test_float_arrays_keep_their_shape_on_the_wire() -> None:
    value = np.arange(6, dtype=np.float64).reshape(2, 3)
    kind, raw = to_message(value)
    message = decode(raw, kind)
    assert [d.stride for d in message.layout.dim] == [6, 3]
    np.testing.assert_array_equal(from_message(message, kind), value)


def test_the_cli_exports_and_imports_a_bag(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from vla_recover.cli.main import app

    with EpisodeStore(tmp_path / "a", mode="a") as store:
        store.append_episodes([episode()])
    runner = CliRunner()
    bag = tmp_path / "bag"
    result = runner.invoke(
        app,
        ["export", "rosbag", "--store", str(tmp_path / "a"), "--episode", "0", "--out", str(bag), "--storage", "mcap"],
    )
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["import", "rosbag", str(bag), "--out", str(tmp_path / "b")])
    assert result.exit_code == 0 and "episode 0 (12 steps)" in result.output, result.output
    result = runner.invoke(
        app, ["export", "rosbag", "--store", str(tmp_path / "a"), "--episode", "3", "--out", str(tmp_path / "c")]
    )
    assert result.exit_code == 2 and "episode: 3 is not in" in result.output
    result = runner.invoke(app, ["import", "rosbag", str(bag), "--out", str(tmp_path / "b"), "--topic", "obs.state"])
    assert result.exit_code == 2 and "'obs.state' is not KEY=TOPIC" in result.output
