"""The policy server: the chunks local inference gives, shared forwards, refusals that keep it serving, and a fleet
driven through it executing what evaluation executes."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import uvicorn

from tests.fleet.test_fidelity import HORIZON, SEEDS, evaluated_actions, wild_policy  # noqa: F401
from vla_recover.config import validate_config
from vla_recover.data import EpisodeStore
from vla_recover.fleet import FleetConfig, build_fleet
from vla_recover.fleet.inference import PolicyChunks, RemoteChunks
from vla_recover.serving.client import PolicyClient, ServerError
from vla_recover.serving.launch import free_port
from vla_recover.serving.protocol import TOKEN_ENV, encode_request
from vla_recover.serving.server import PolicyServer, ServeConfig, build_app

TOKEN = "test-token"


@contextmanager
def _serving(policy: Path, port: int) -> Iterator[str]:
    """``policy`` served on loopback ``port`` from a thread (1 MiB body limit) until the block ends; its URL."""
    server = PolicyServer(policy, ServeConfig(TOKEN, "cpu", max_wait_ms=20.0, max_body_bytes=2**20))
    uvicorn_server = uvicorn.Server(uvicorn.Config(build_app(server), "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=uvicorn_server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uvicorn_server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uvicorn_server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def served(wild_policy: Path) -> Iterator[str]:  # noqa: F811
    """The wild LiftCube policy served on loopback, its URL."""
    with _serving(wild_policy, free_port()) as url:
        yield url


def _windows(rows: int, seed: int) -> list[deque[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(seed)
    return [deque({"state": rng.uniform(-0.5, 0.5, 19)} for _ in range(2)) for _ in range(rows)]


def test_the_server_answers_with_the_chunks_local_inference_gives(served: str, wild_policy: Path) -> None:  # noqa: F811
    windows, seeds = _windows(3, 0), [11, 12, 13]
    source = PolicyChunks(wild_policy, device="cpu")
    local = source.predict(windows, [""] * 3, seeds)
    remote = RemoteChunks(served, token=TOKEN)
    shape = ("obs_horizon", "action_exec", "action_horizon", "obs_keys", "version")
    assert [getattr(remote, name) for name in shape] == [getattr(source, name) for name in shape]
    assert np.array_equal(remote.predict(windows, [""] * 3, seeds), local)


def test_requests_arriving_together_share_a_forward_and_keep_their_own_chunks(served: str) -> None:
    alone = {}
    client = PolicyClient(served, TOKEN)
    for robot in range(6):
        window = _windows(1, robot)[0]
        inputs = {"obs.state": np.stack([obs["state"] for obs in window])[None].astype(np.float32)}
        alone[robot] = (inputs, client.chunks(inputs, [robot])[0])

    def ask(robot: int) -> tuple[np.ndarray, int]:
        actions, meta = PolicyClient(served, TOKEN).chunks(alone[robot][0], [robot])
        return actions, int(meta["batch"])

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, range(6)))
    assert max(batch for _, batch in answers) > 1  # the 20 ms window gathered several robots into one forward
    for robot, (actions, _) in enumerate(answers):  # each row from its own seed, whoever shared its batch
        np.testing.assert_allclose(actions, alone[robot][1], atol=1e-5)


def test_bad_requests_are_refused_by_name_and_the_server_keeps_serving(served: str) -> None:
    state = np.zeros((1, 2, 19), np.float32)
    with pytest.raises(ServerError, match="401 authorization: missing or wrong token"):
        PolicyClient(served, "wrong").chunks({"obs.state": state}, [0])
    client = PolicyClient(served, TOKEN)
    with pytest.raises(ServerError, match=r"obs.state: got float32 of shape \[1, 2, 7\]; expected float32 of shape"):
        client.chunks({"obs.state": np.zeros((1, 2, 7), np.float32)}, [0])
    with pytest.raises(ServerError, match=r"obs\.state: holds NaN or Inf"):
        client.chunks({"obs.state": np.full((1, 2, 19), np.nan, np.float32)}, [0])
    with pytest.raises(ServerError, match=r"obs\.images\.front: not an input of this policy"):
        client.chunks({"obs.state": state, "obs.images.front": np.zeros((1, 2, 4, 4, 3), np.uint8)}, [0])
    with pytest.raises(ServerError, match=r"obs\.state: got float32 of shape \[1, 2, 19\]; expected .* \[2, 2, 19\]"):
        client.chunks({"obs.state": state}, [0, 1])  # two seeds for one row
    with pytest.raises(ServerError, match=r"seed: got int64 of shape \[0\]; expected int64 of shape \[B\], 1 <= B"):
        client.chunks({"obs.state": state[:0]}, [])
    raw = PolicyClient(served, TOKEN)
    with pytest.raises(ServerError, match="400 body: not a safetensors request"):
        raw._call("POST", "/v1/chunks", b"not a tensor file at all", {})
    big = encode_request({"obs.state": np.zeros((8000, 2, 19), np.float32)}, [0] * 8000)  # 1.2 MB
    with pytest.raises(ServerError, match=r"413 body: .* over the server's limit of 1048576"):
        raw._call("POST", "/v1/chunks", big, {})
    actions, meta = client.chunks({"obs.state": state}, [0])  # still serving
    assert actions.shape[0] == 1 and meta["batch"] == "1"
    assert client.info()["stats"]["refused"] >= 6


def test_a_fleet_driven_through_the_server_executes_what_evaluation_executes(
    served: str,
    wild_policy: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    expected, _ = evaluated_actions(wild_policy, monkeypatch)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    config = validate_config(
        FleetConfig,
        {"task": "LiftCube", "task_config": {"horizon": HORIZON}, "robots": 2, "episodes": 3, "seed": SEEDS[0],
         "inference": {"remote": served}, "store": str(tmp_path / "store"), "run_ahead_steps": 3,
         "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False}},
    )  # fmt: skip
    build_fleet(config).run()
    with EpisodeStore(tmp_path / "store") as store:
        stored = {row.info["seed"]: store.episode(row.id)["action"] for row in store.episodes()}
        assert {row.info["policy_version"] for row in store.episodes()} == {PolicyChunks(wild_policy).version}
    assert sorted(stored) == SEEDS
    for seed in SEEDS:
        np.testing.assert_allclose(stored[seed], expected[seed], atol=1e-4, err_msg=f"seed {seed}")


def test_a_robot_node_takes_its_policy_from_the_server(served: str) -> None:
    from typer.testing import CliRunner

    from vla_recover.cli.main import app

    config = Path(__file__).resolve().parents[2] / "configs" / "ros2" / "so101.yaml"
    command = ["ros2", "serve", "--remote", served, "--config", str(config)]
    result = CliRunner().invoke(app, command, env={TOKEN_ENV: TOKEN})
    assert result.exit_code == 2  # the served LiftCube policy does not fit the arm, as a local one would not
    assert "joint_names: 6 joints, but the policy reads a state of 19 and writes actions of 5" in result.output
    both = CliRunner().invoke(app, [*command, "--policy", "runs/x"], env={TOKEN_ENV: TOKEN})
    assert both.exit_code == 2 and "policy / remote: give exactly one" in both.output


def test_a_server_gone_for_less_than_the_timeout_is_waited_for_and_one_gone_longer_is_named(
    wild_policy: Path,  # noqa: F811
) -> None:
    port, windows = free_port(), _windows(2, 0)
    with _serving(wild_policy, port) as url:
        remote = RemoteChunks(url, token=TOKEN, timeout_s=1.5)
        before = remote.predict(windows, [""] * 2, [1, 2])
    restarted = threading.Timer(0.5, lambda: stack.enter_context(_serving(wild_policy, port)))
    with ExitStack() as stack:
        restarted.start()  # a server restarting (a new checkpoint promoted) while the fleet asks
        assert np.array_equal(remote.predict(windows, [""] * 2, [1, 2]), before)
        restarted.join()
    with pytest.raises(ServerError, match=rf"http://127.0.0.1:{port}/v1/chunks: .* \(unreachable for 1.5 s\)"):
        remote.predict(windows, [""] * 2, [1, 2])


def test_a_fleet_whose_server_is_gone_stops_with_its_name_and_keeps_its_episodes(
    wild_policy: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    with ExitStack() as server:
        url = server.enter_context(_serving(wild_policy, free_port()))
        config = validate_config(
            FleetConfig,
            {"task": "LiftCube", "task_config": {"horizon": HORIZON}, "robots": 2, "episodes": 50,
             "inference": {"remote": url, "timeout_s": 0.5}, "store": str(tmp_path / "store"),
             "floor_operator": {"enabled": False}, "teleoperator": {"enabled": False}},
        )  # fmt: skip

        def stop_serving_after_two_episodes(fleet: Any) -> None:
            if sum(fleet.ledger.episodes.values()) >= 2:
                server.close()  # idempotent: the server is gone from here on

        with pytest.raises(ServerError, match=r"/v1/chunks: .* \(unreachable for 0.5 s\)"):
            build_fleet(config).run(progress=stop_serving_after_two_episodes)
    with EpisodeStore(tmp_path / "store") as store:
        episodes = store.episodes()
        assert len(episodes) >= 2
        for row in episodes:  # whole episodes, each with its own seed
            assert len(store.episode(row.id)["action"]) == row.length
