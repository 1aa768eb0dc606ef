"""A console that browses what is stored, without a fleet: its users, the loop's runs, stored episodes step by
step with their frames."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from tests.console.test_api import ORIGIN, PASSWORD, _reply
from vla_recover.console.server import build_app
from vla_recover.console.users import UserDB, UserError
from vla_recover.data import EpisodeStore


def test_users_are_checked_and_stored_hashed(tmp_path: Path) -> None:
    users = UserDB(tmp_path / "users.sqlite")
    users.add("ana", "admin", "long enough")
    with pytest.raises(UserError, match="role: 'boss' is not one of viewer, floor, teleop, admin"):
        users.add("bob", "boss", "long enough")
    with pytest.raises(UserError, match="exists"):
        users.add("ana", "viewer", "long enough")
    with pytest.raises(UserError, match="at least 8"):
        users.add("cy", "viewer", "short")
    with pytest.raises(UserError, match="name: 'a b'"):
        users.add("a b", "viewer", "long enough")
    assert users.check_password("ana", "long enough") == users.user("ana")
    assert users.check_password("ana", "wrong one") is None and users.check_password("nobody", "x") is None
    token = users.issue_token("ana")
    assert users.check_token(token) == users.user("ana")
    users.revoke_token(token)
    assert users.check_token(token) is None
    raw = (tmp_path / "users.sqlite").read_bytes()
    assert b"long enough" not in raw and token.encode() not in raw


def test_loop_runs_with_their_rounds_and_plots(tmp_path: Path) -> None:

    import imageio.v3 as iio
    import numpy as np

    run = tmp_path / "loop" / "lift"
    (run / "plots").mkdir(parents=True)
    iio.imwrite(run / "plots" / "success_rate.png", np.zeros((8, 8, 3), np.uint8))
    fleet = {"operator_s": {"floor": 30.0, "teleop": 90.0}, "interventions": 4, "successes_per_operator_hour": 120.0}
    summary = {"name": "lift", "task": "LiftCube", "method": "habc", "rounds": [
        {"round": 0, "eval": {"success_rate": 0.48}, "promoted": None, "current": "base"},
        {"round": 1, "eval": {"success_rate": 0.82}, "promoted": True, "current": "round_1", "fleet": fleet},
    ]}  # fmt: skip
    (run / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "loop" / "unfinished").mkdir()  # no summary yet: not listed
    users = UserDB(tmp_path / "users.sqlite")
    users.add("vera", "viewer", PASSWORD)
    viewer = TestClient(build_app(None, users, None, [ORIGIN], tmp_path / "loop"))
    assert viewer.get("/api/runs").status_code == 401
    viewer.post("/api/login", json={"username": "vera", "password": PASSWORD})
    [card] = viewer.get("/api/runs").json()
    assert card["name"] == "lift" and [r["success_rate"] for r in card["rounds"]] == [0.48, 0.82]
    assert card["rounds"][1]["operator_s"] == 120.0 and card["rounds"][1]["promoted"] is True
    assert viewer.get("/api/runs/lift").json()["plots"] == ["success_rate.png"]
    plot = viewer.get("/api/runs/lift/plots/success_rate.png")
    assert plot.status_code == 200 and plot.headers["content-type"] == "image/png"
    assert viewer.get("/api/runs/lift/plots/..%2Fsummary.json").status_code == 404
    assert viewer.get("/api/runs/unfinished").status_code == 404
    assert viewer.get("/api/fleet").status_code == 503  # no fleet in this console
    with viewer.websocket_connect("/ws", headers={"origin": ORIGIN}) as socket:
        update = socket.receive_json()
        assert socket.receive_json()["type"] == "fleet"  # the stream stays open, though no views can be watched
        socket.send_json({"type": "views", "views": {}})
        assert _reply(socket) == {"type": "watching", "views": {}}
        socket.send_json({"type": "views", "views": {"sim00": "thumb"}})
        assert _reply(socket)["error"] == "views: this console runs no fleet with painted views"
    assert update["running"] is False and update["robots"] == [] and update["queue"] == []
    assert viewer.get("/api/episodes").json()["error"].startswith("no store")


def test_scrubbing_a_stored_episode_step_by_step_with_its_frames(tmp_path: Path) -> None:
    import imageio.v3 as iio
    import numpy as np

    from vla_recover.data import EpisodeData

    frames = np.stack([np.full((16, 16, 3), 10 * i, np.uint8) for i in range(6)])
    steps = {"obs.state": np.arange(12, dtype=np.float32).reshape(6, 2), "obs.images.front": frames,
             "action": np.zeros((6, 5), np.float32), "progress": np.linspace(0, 1, 6).astype(np.float32)}  # fmt: skip
    with EpisodeStore(tmp_path / "store", mode="a") as store:
        store.append_episodes([
            EpisodeData(task="LiftCube", steps=steps, actor=["policy"] * 3 + ["human"] * 3,
                        policy_version=["round_1-0123456789ab"] * 3 + [""] * 3),
            EpisodeData(task="LiftCube", steps=steps, actor="policy", policy_version="round_2-ba9876543210"),
        ])  # fmt: skip
    users = UserDB(tmp_path / "users.sqlite")
    users.add("vera", "viewer", PASSWORD)
    viewer = TestClient(build_app(None, users, tmp_path / "store", [ORIGIN]))
    viewer.post("/api/login", json={"username": "vera", "password": PASSWORD})
    step = viewer.get("/api/episodes/0/steps/4").json()
    assert step["actor"] == "human" and step["state"] == [8.0, 9.0] and step["cameras"] == ["front"]
    assert step["progress"] == pytest.approx(0.8)
    frame = viewer.get("/api/episodes/0/steps/4/image?camera=front")
    assert frame.status_code == 200 and (iio.imread(frame.content) == 40).all()
    assert viewer.get("/api/episodes/0/steps/6").status_code == 404
    assert viewer.get("/api/episodes/0/steps/x").status_code == 422
    assert viewer.get("/api/episodes/0/steps/1/image?camera=wrist").status_code == 404
    assert viewer.get("/api/episodes/0").json()["actor"] == ["policy"] * 3 + ["human"] * 3
    # the filter by policy version reads which version chose the steps, not the episode's free-form info
    assert [e["id"] for e in viewer.get("/api/episodes?policy_version=round_1-0123456789ab").json()] == [0]
    assert [e["id"] for e in viewer.get("/api/episodes?policy_version=round_2-ba9876543210").json()] == [1]
