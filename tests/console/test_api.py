"""The console's API against a real sim fleet ticking on its control thread: auth and roles on every endpoint,
CSRF, the lease holder's commands over REST and the WebSocket, rewind, malformed input, rate limits, episodes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import imageio.v3 as iio
import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from tests.fleet.test_fleet import fleet_config
from vla_recover.console.runner import FleetRunner
from vla_recover.console.server import RateLimiter, build_app
from vla_recover.console.users import UserDB
from vla_recover.data import EpisodeStore
from vla_recover.fleet import build_fleet

PASSWORD = "correct horse"
ORIGIN = "http://testserver"


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("console")
    users = UserDB(root / "store" / "console_users.sqlite")
    for name, role in (("vera", "viewer"), ("fred", "floor"), ("tess", "teleop"), ("tom", "teleop")):
        users.add(name, role, PASSWORD)
    config = fleet_config(root, robots=2, episodes=1000, task_config={"horizon": 100})
    runner = FleetRunner(build_fleet(config, views=root / "views"))
    app = build_app(runner, users, root / "store", [ORIGIN])
    runner.start()
    yield {"app": app, "runner": runner, "users": users, "store": root / "store"}
    runner.stop()


def client(console: dict[str, Any], name: str | None = None) -> tuple[TestClient, dict[str, str]]:
    """A browser: logged in as ``name`` (cookie), with the CSRF header its state-changing requests carry."""
    browser = TestClient(console["app"])
    if name is None:
        return browser, {}
    response = browser.post("/api/login", json={"username": name, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return browser, {"X-CSRF-Token": response.json()["csrf"]}


def wait_for_state(
    console: dict[str, Any], robot: str, states: set[str], seconds: float = 15.0, max_step: int = 10**6
) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        card = next(r for r in console["runner"].snapshot()["robots"] if r["robot"] == robot)
        if card["state"] in states and card["step"] <= max_step:
            return
        time.sleep(0.02)
    raise AssertionError(f"{robot} never reached {states}")


def test_login_and_reading_need_a_user(console: dict[str, Any]) -> None:
    anonymous, _ = client(console)
    assert anonymous.get("/api/fleet").status_code == 401
    assert anonymous.get("/api/episodes").json() == {"error": "log in first"}
    bad = anonymous.post("/api/login", json={"username": "vera", "password": "wrong password"})
    assert bad.status_code == 401 and "wrong user name or password" in bad.json()["error"]
    assert anonymous.post("/api/login", json={"username": "vera"}).status_code == 422
    assert anonymous.post("/api/login", content=b"{not json", headers={"content-type": "application/json"}).json() == {
        "error": "body: not valid JSON"
    }
    assert anonymous.post("/api/login", json=[1, 2]).status_code == 400
    assert anonymous.get("/api/fleet", headers={"Authorization": "Bearer nope"}).status_code == 401

    viewer, _ = client(console, "vera")
    assert viewer.get("/api/me").json() == {"user": "vera", "role": "viewer"}
    snapshot = viewer.get("/api/fleet").json()
    assert [r["robot"] for r in snapshot["robots"]] == ["sim00", "sim01"]
    assert snapshot["action_dim"] == 5 and snapshot["robots"][0]["progress_source"] == "ground_truth"
    token = console["users"].issue_token("vera")
    assert TestClient(console["app"]).get("/api/fleet", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert viewer.get("/").status_code == 200 and "console.js" in viewer.get("/").text
    assert viewer.get("/static/console.js").status_code == 200
    assert viewer.post("/api/logout").json() == {"ok": True}
    assert viewer.get("/api/me").status_code == 401  # the session is gone, not just the cookie
    viewer, _ = client(console, "vera")
    sessions = console["app"].state.console.sessions
    for token, (user, csrf, _expires) in list(sessions.items()):
        sessions[token] = (user, csrf, time.monotonic() - 1.0)  # a shift later
    expired = viewer.get("/api/me")
    assert expired.status_code == 401 and expired.json()["error"] == "the session expired; log in again"


def test_roles_and_csrf_guard_every_action(console: dict[str, Any]) -> None:
    viewer, viewer_csrf = client(console, "vera")
    refused = viewer.post("/api/robots/sim00/request_takeover", json={}, headers=viewer_csrf)
    assert refused.status_code == 403 and refused.json()["error"] == "vera (viewer) may not request takeover"
    assert viewer.post("/api/robots/sim00/estop", json={}, headers=viewer_csrf).status_code == 403
    floor, floor_csrf = client(console, "fred")
    assert floor.post("/api/robots/sim00/pause", json={}).status_code == 403  # no CSRF header
    assert floor.post("/api/robots/sim00/takeover", json={}, headers=floor_csrf).status_code == 403
    assert floor.post("/api/robots/sim09/pause", json={}, headers=floor_csrf).status_code == 404
    assert floor.post("/api/robots/sim00/fly", json={}, headers=floor_csrf).status_code == 404
    assert floor.post("/api/robots/sim01/pause", json={}, headers=floor_csrf).json() == {"ok": True}
    assert console["runner"].snapshot()["robots"][1]["paused"]
    assert floor.post("/api/robots/sim01/resume", json={}, headers=floor_csrf).json() == {"ok": True}
    nothing = floor.post("/api/robots/sim01/confirm_reset", json={}, headers=floor_csrf)  # a sim resets itself
    assert nothing.status_code == 409 and "no reset to confirm" in nothing.json()["error"]
    with EpisodeStore(console["store"]) as store:
        actors = {(e.kind, e.actor) for e in store.events(robot="sim01")}
    assert {("pause", "fred"), ("resume", "fred")} <= actors  # every operator action is an event with the user


def test_takeover_drive_rewind_and_hand_back_only_as_the_lease_holder(console: dict[str, Any]) -> None:
    floor, floor_csrf = client(console, "fred")
    wait_for_state(console, "sim00", {"autonomous"}, max_step=20)  # early in an episode: time to drive it
    assert floor.post("/api/robots/sim00/request_takeover", json={"reason": "stuck"}, headers=floor_csrf).json()["ok"]
    snapshot = console["runner"].snapshot()
    assert snapshot["queue"][0]["robot"] == "sim00" and "waiting_for_human" in snapshot["robots"][0]["alerts"]

    tess, tess_csrf = client(console, "tess")
    granted = tess.post("/api/robots/sim00/takeover", json={}, headers=tess_csrf)
    assert granted.status_code == 200 and granted.json()["lease_expires_s"] > 0
    tom, tom_csrf = client(console, "tom")
    assert tom.post("/api/robots/sim00/takeover", json={}, headers=tom_csrf).status_code == 409  # one lease
    stolen = tom.post("/api/robots/sim00/command", json={"action": [0, 0, 0, 0, -1]}, headers=tom_csrf)
    assert stolen.status_code == 403 and "only the lease holder (tess)" in stolen.json()["error"]

    for _ in range(10):
        sent = tess.post("/api/robots/sim00/command", json={"action": [0.0, 0.0, -0.5, 0.0, -1.0]}, headers=tess_csrf)
        assert sent.status_code == 200, sent.text
        assert sent.json()["lease_expires_s"] > 9.5  # every command renews the 10 s lease
        time.sleep(0.06)
    bad = tess.post("/api/robots/sim00/command", json={"action": [0, "up"]}, headers=tess_csrf)
    assert bad.status_code == 422 and bad.json()["error"].startswith("action: expected a list of numbers")
    too_long = tess.post("/api/robots/sim00/command", json={"action": [0.0] * 9}, headers=tess_csrf)
    assert too_long.status_code == 422 and too_long.json()["error"].startswith("action: ")  # the fleet's own check
    out_of_range = tess.post("/api/robots/sim00/command", json={"action": [0, 0, 7, 0, 0]}, headers=tess_csrf)
    assert out_of_range.status_code == 422 and out_of_range.json()["error"].startswith("action: out of range")
    not_numbers = tess.post("/api/robots/sim00/command", json={"action": None}, headers=tess_csrf)
    assert not_numbers.status_code == 422 and not_numbers.json()["error"].startswith("action: ")
    with tess.websocket_connect("/ws", headers={"origin": ORIGIN}) as socket:
        assert socket.receive_json()["type"] == "fleet"
        socket.send_text("not json")
        assert _reply(socket) == {"type": "error", "status": 400, "error": "message: not valid JSON"}
        socket.send_json({"type": "command", "robot": "sim00", "action": [0.0, 0.0, -0.5, 0.0, -1.0]})
        assert _reply(socket) == {"type": "ack", "robot": "sim00"}
        socket.send_text('{"type": "command", "robot": "sim00", "action": [NaN, 0, 0, 0, 0]}')
        assert _reply(socket)["error"] == "action: NaN or Inf"
    preview = tess.get("/api/robots/sim00/rewind_preview?steps=3")  # where the slider lands, the robot unmoved
    assert preview.status_code == 200 and preview.headers["content-type"] == "image/jpeg", preview.text
    assert iio.imread(preview.content, extension=".jpg").shape == (240, 320, 3)
    assert tom.get("/api/robots/sim00/rewind_preview?steps=3").status_code == 403
    refused = tess.get("/api/robots/sim00/rewind_preview?steps=-1")
    assert (
        refused.status_code == 422
        and refused.json()["error"] == "steps: expected a whole number of steps >= 1, got '-1'"
    )
    rewound = tess.post("/api/robots/sim00/rewind", json={"steps": 3}, headers=tess_csrf)
    assert rewound.status_code == 200 and rewound.json()["steps_undone"] == 3
    assert tess.post("/api/robots/sim00/rewind", json={"steps": -2}, headers=tess_csrf).status_code == 422
    done = tess.post("/api/robots/sim00/release", json={"correction_done": True}, headers=tess_csrf)
    assert done.json() == {"ok": True}
    wait_for_state(console, "sim00", {"autonomous", "episode_done", "resetting", "idle"})
    with EpisodeStore(console["store"]) as store:
        events = [(e.kind, e.actor) for e in store.events(robot="sim00")]
    for kind, actor in (("takeover_requested", "fred"), ("takeover_granted", "tess"), ("takeover_refused", "tom"),
                        ("rewind", "tess"), ("takeover_released", "tess"), ("correction_done", "tess")):  # fmt: skip
        assert (kind, actor) in events, kind


def _reply(socket: Any) -> dict[str, Any]:
    """The next message that is not a state update."""
    while True:
        message = socket.receive_json()
        if message["type"] != "fleet":
            return message


def test_websocket_checks_origin_and_login(console: dict[str, Any]) -> None:
    viewer, _ = client(console, "vera")
    evil = {"origin": "http://evil.example"}
    with pytest.raises(WebSocketDisconnect), viewer.websocket_connect("/ws", headers=evil) as socket:
        socket.receive_json()
    anonymous, _ = client(console)
    with pytest.raises(WebSocketDisconnect), anonymous.websocket_connect("/ws", headers={"origin": ORIGIN}) as socket:
        socket.receive_json()
    with viewer.websocket_connect("/ws", headers={"origin": ORIGIN}) as socket:
        assert len(socket.receive_json()["robots"]) == 2
        socket.send_json({"type": "command", "robot": "sim00", "action": [0, 0, 0, 0, 0]})
        assert _reply(socket) == {"type": "error", "status": 403, "error": "vera (viewer) may not command"}


def test_commands_are_rate_limited(console: dict[str, Any]) -> None:
    limiter = RateLimiter(rate=10.0, burst=3)
    assert [limiter.allow("a") for _ in range(4)] == [True, True, True, False] and limiter.allow("b")
    time.sleep(0.11)
    assert limiter.allow("a") and not limiter.allow("a")

    floor, csrf = client(console, "fred")
    state = console["app"].state.console
    while state.limiter.allow("fred"):  # someone hammering the buttons
        pass
    refused = floor.post("/api/robots/sim01/pause", json={}, headers=csrf)
    assert refused.status_code == 429 and refused.json()["error"] == "fred: too many requests; at most 20 a second"
    time.sleep(0.2)
    assert floor.post("/api/robots/sim01/resume", json={}, headers=csrf).status_code == 200


def test_episodes_are_listed_filtered_and_shown_with_their_segments(console: dict[str, Any]) -> None:
    viewer, _ = client(console, "vera")
    end = time.monotonic() + 20
    while not viewer.get("/api/episodes").json() and time.monotonic() < end:
        time.sleep(0.2)
    episodes = viewer.get("/api/episodes").json()
    assert episodes and {"id", "robot", "task", "outcome", "length"} <= set(episodes[0])
    assert all(e["robot"] == "sim01" for e in viewer.get("/api/episodes?robot=sim01").json())
    assert viewer.get("/api/episodes?outcome=nothing").json() == []
    assert viewer.get("/api/episodes?limit=x").status_code == 422
    shown = viewer.get(f"/api/episodes/{episodes[0]['id']}").json()
    assert len(shown["progress"]) == shown["length"] and shown["segments"][0]["kind"] in ("autonomous", "intervention")
    assert viewer.get("/api/episodes/999999").status_code == 404
    assert viewer.get("/api/episodes/abc").status_code == 422


def test_ids_and_limits_out_of_range_are_refused_naming_them(console: dict[str, Any]) -> None:
    viewer, _ = client(console, "vera")
    beyond_sqlite = viewer.get("/api/episodes/99999999999999999999999")  # past SQLite's 64-bit integers
    assert beyond_sqlite.status_code == 404 and beyond_sqlite.json()["error"].startswith("episode: no episode 9999")
    assert viewer.get("/api/episodes/-1").status_code == 404
    for limit in ("0", "-1", "5001"):
        refused = viewer.get(f"/api/episodes?limit={limit}")
        assert refused.status_code == 422 and refused.json()["error"] == f"limit: {limit} is not between 1 and 5000"
    tess, csrf = client(console, "tess")
    unknown = tess.post("/api/robots/sim99/command", json={"action": [0, 0, 0, 0, 0]}, headers=csrf)
    assert unknown.status_code == 404 and unknown.json()["error"].startswith("robot: no robot 'sim99'")
    no_runs = viewer.get("/api/runs/some_run")  # this console was built without a folder of loop runs
    assert no_runs.status_code == 404 and "without a folder of loop runs" in no_runs.json()["error"]


def test_episodes_filter_by_who_acted_and_a_floor_operator_relabels_a_segment(console: dict[str, Any]) -> None:
    viewer, viewer_csrf = client(console, "vera")
    end = time.monotonic() + 30
    while not viewer.get("/api/episodes?actors=intervened").json() and time.monotonic() < end:
        time.sleep(0.2)  # the attempt with the takeover is stored when its episode ends
    intervened = viewer.get("/api/episodes?actors=intervened").json()
    autonomous = viewer.get("/api/episodes?actors=autonomous").json()
    assert intervened and all(e["robot"] == "sim00" for e in intervened)
    assert not {e["id"] for e in intervened} & {e["id"] for e in autonomous}
    assert viewer.get("/api/episodes?actors=some").status_code == 422
    assert viewer.get("/api/episodes?policy_version=nope").json() == []

    target = intervened[0]["id"]
    label = {"start": 2, "stop": 9, "kind": "failure_inducing"}
    assert viewer.post(f"/api/episodes/{target}/segments", json=label, headers=viewer_csrf).status_code == 403
    floor, csrf = client(console, "fred")
    assert floor.post(f"/api/episodes/{target}/segments", json=label).status_code == 403  # no CSRF header
    saved = floor.post(f"/api/episodes/{target}/segments", json=label, headers=csrf)
    assert saved.status_code == 200 and saved.json()["segment"]["source"] == "human"
    shown = viewer.get(f"/api/episodes/{target}").json()["segments"]
    assert {"start": 2, "stop": 9, "kind": "failure_inducing", "source": "human"} in shown
    for bad, status in (
        (dict(label, kind="great"), 422),
        (dict(label, stop=10**6), 422),
        (dict(label, start="a"), 422),
    ):
        response = floor.post(f"/api/episodes/{target}/segments", json=bad, headers=csrf)
        assert response.status_code == status, response.text
    assert floor.post("/api/episodes/99999/segments", json=label, headers=csrf).status_code == 404
    with EpisodeStore(console["store"]) as store:
        assert [(e.actor, e.episode) for e in store.events(kind="segment_relabelled")] == [("fred", target)]


def test_an_episode_shows_the_running_fleets_critic_curve_beside_ground_truth(tmp_path: Path) -> None:
    from tests.fleet.test_progress import small_critic

    users = UserDB(tmp_path / "store" / "console_users.sqlite")
    users.add("vera", "viewer", PASSWORD)
    critic = small_critic(tmp_path / "critic")
    config = fleet_config(tmp_path, robots=1, episodes=1000, critic=str(critic), task_config={"horizon": 20})
    runner = FleetRunner(build_fleet(config))
    app = build_app(runner, users, tmp_path / "store", [ORIGIN])
    runner.start()
    try:
        viewer = TestClient(app)
        assert viewer.post("/api/login", json={"username": "vera", "password": PASSWORD}).is_success
        end = time.monotonic() + 30
        while not (listed := viewer.get("/api/episodes").json()) and time.monotonic() < end:
            time.sleep(0.2)
        shown = viewer.get(f"/api/episodes/{listed[0]['id']}").json()
    finally:
        runner.stop()
    assert len(shown["critic"]) == len(shown["progress"]) == shown["length"]
    assert all(0.0 <= p <= 1.0 for p in shown["critic"])


def test_every_sim_robot_has_a_view_painted_while_someone_watches(console: dict[str, Any]) -> None:
    import imageio.v3 as iio

    viewer, _ = client(console, "vera")
    end = time.monotonic() + 20
    while (shown := viewer.get("/api/robots/sim01/view?size=large")).status_code == 204:  # painted after a step
        assert time.monotonic() < end, "no view painted"
        time.sleep(0.1)
    assert shown.status_code == 200 and shown.headers["content-type"] == "image/jpeg"
    assert iio.imread(shown.content, extension=".jpg").shape == (240, 320, 3)  # the task has no camera of its own
    assert float(shown.headers["x-frame-age"]) < 2.0
    bad = viewer.get("/api/robots/sim01/view?size=huge")
    assert bad.status_code == 422 and "size: got 'huge'" in bad.json()["error"]
    assert viewer.get("/api/robots/sim09/view").status_code == 404
    assert TestClient(console["app"]).get("/api/robots/sim01/view").status_code == 401


def test_views_stream_over_the_websocket_to_the_clients_watching_them(console: dict[str, Any]) -> None:
    import imageio.v3 as iio

    viewer, _ = client(console, "vera")
    with viewer.websocket_connect("/ws", headers={"origin": ORIGIN}) as socket:
        socket.send_json({"type": "views", "views": {"sim00": "thumb", "sim09": "thumb"}})
        assert _reply(socket) == {
            "type": "error",
            "status": 404,
            "error": "robot: no robot 'sim09' in this fleet (sim00, sim01)",
        }
        socket.send_json({"type": "views", "views": {"sim00": "huge"}})
        assert "views.sim00: got size 'huge'" in _reply(socket)["error"]
        socket.send_json({"type": "views", "views": ["sim00"]})
        assert _reply(socket)["status"] == 422
        socket.send_json({"type": "views", "views": {"sim00": "thumb", "sim01": "thumb"}})
        assert _reply(socket) == {"type": "watching", "views": {"sim00": "thumb", "sim01": "thumb"}}
        seen: dict[str, Any] = {}
        end = time.monotonic() + 20
        while len(seen) < 2:  # the state updates keep coming between the frames
            assert time.monotonic() < end, f"frames of {sorted(seen)} only"
            message = socket.receive()
            if "bytes" in message:
                header, frame = message["bytes"].split(b"\n", 1)
                seen[json.loads(header)["robot"]] = (json.loads(header), iio.imread(frame, extension=".jpg"))
    for robot in ("sim00", "sim01"):
        header, image = seen[robot]
        assert image.shape[2] == 3 and image.std() > 5 and 0 <= header["age_s"] < 2.0


def test_a_floor_operator_labels_the_outcome_of_a_stored_episode(console: dict[str, Any]) -> None:
    viewer, viewer_csrf = client(console, "vera")
    end = time.monotonic() + 30
    while not viewer.get("/api/episodes").json() and time.monotonic() < end:
        time.sleep(0.2)
    target = viewer.get("/api/episodes").json()[0]
    assert (
        viewer.post(f"/api/episodes/{target['id']}/outcome", json={"label": "success"}, headers=viewer_csrf).status_code
        == 403
    )
    floor, csrf = client(console, "fred")
    unsure = floor.post(f"/api/episodes/{target['id']}/outcome", json={"label": "unsure"}, headers=csrf).json()
    assert unsure == {"ok": True, "id": target["id"], "label": "unsure", "outcome": target["outcome"]}
    assert viewer.get(f"/api/episodes/{target['id']}").json()["critic"] is None  # this fleet runs no critic
    failed = floor.post(f"/api/episodes/{target['id']}/outcome", json={"label": "failure"}, headers=csrf).json()
    assert failed["outcome"] == "failure" and viewer.get(f"/api/episodes/{target['id']}").json()["outcome"] == "failure"
    bad = floor.post(f"/api/episodes/{target['id']}/outcome", json={"label": "great"}, headers=csrf)
    assert bad.status_code == 422 and "label: 'great' is not one of success, failure, unsure" in bad.json()["error"]
    assert floor.post("/api/episodes/99999/outcome", json={"label": "success"}, headers=csrf).status_code == 404
    with EpisodeStore(console["store"]) as store:
        labels = [(e.actor, e.episode, e.payload["label"]) for e in store.events(kind="outcome_labelled")]
    assert labels == [("fred", target["id"], "unsure"), ("fred", target["id"], "failure")]


def test_a_server_fault_is_an_error_message_not_a_traceback(console: dict[str, Any], monkeypatch: Any) -> None:
    viewer, _ = client(console, "vera")

    def broken() -> dict[str, Any]:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(console["runner"], "snapshot", broken)
    quiet = TestClient(console["app"], raise_server_exceptions=False)
    quiet.cookies = viewer.cookies
    response = quiet.get("/api/fleet")
    assert response.status_code == 500 and "secret" not in response.text and "Traceback" not in response.text


def test_camera_frames_of_a_robot_with_a_camera(tmp_path: Path) -> None:
    import imageio.v3 as iio

    users = UserDB(tmp_path / "users.sqlite")
    users.add("vera", "viewer", PASSWORD)
    config = fleet_config(tmp_path, robots=1, episodes=10, task_config={"horizon": 60, "cameras": ["front"],
                                                                        "image_size": 32})  # fmt: skip
    runner = FleetRunner(build_fleet(config))
    app = build_app(runner, users, tmp_path / "store", [ORIGIN])
    runner.start()
    try:
        viewer = TestClient(app)
        viewer.post("/api/login", json={"username": "vera", "password": PASSWORD})
        end = time.monotonic() + 30
        while not viewer.get("/api/fleet").json()["robots"][0]["cameras"] and time.monotonic() < end:
            time.sleep(0.1)
        assert viewer.get("/api/fleet").json()["robots"][0]["cameras"] == ["front"]
        frame = viewer.get("/api/robots/sim00/image?camera=front")
        assert frame.status_code == 200 and frame.headers["content-type"] == "image/png"
        assert iio.imread(frame.content).shape == (32, 32, 3)
        missing = viewer.get("/api/robots/sim00/image?camera=wrist")
        assert missing.status_code == 404 and "cameras: front" in missing.json()["error"]
        assert viewer.get("/api/robots/sim07/image").status_code == 404
    finally:
        runner.stop()


@pytest.mark.parametrize("allocation, order", [("fifo", ["sim00", "sim01"]), ("priority", ["sim01", "sim00"])])
def test_the_queue_is_ordered_as_the_allocation_policy_serves_it(
    tmp_path: Path, allocation: str, order: list[str]
) -> None:
    from tests.fleet.test_fleet import tick_until
    from vla_recover.console.runner import fleet_snapshot

    config = fleet_config(tmp_path, robots=2, teleoperator={"enabled": False, "allocation": allocation})
    fleet = build_fleet(config)
    fleet.start()
    try:
        tick_until(fleet, lambda: all(str(s.state) == "autonomous" for s in fleet.slots.values()))
        fleet.request_takeover("sim00", "fred")
        time.sleep(0.01)
        fleet.request_takeover("sim01", "fred")
        fleet.slots["sim00"].branch_progress[:] = [0.5, 0.4]  # lost 0.1
        fleet.slots["sim01"].branch_progress[:] = [0.6, 0.1]  # lost 0.5: at more risk
        snapshot = fleet_snapshot(fleet)
        assert [item["robot"] for item in snapshot["queue"]] == order and snapshot["allocation"] == allocation
    finally:
        fleet.close()
