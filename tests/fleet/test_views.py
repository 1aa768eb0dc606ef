"""Views of sim robots for people: painted by the robot's worker only while someone watches, at the view's size."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import imageio.v3 as iio
import numpy as np
import pytest

from tests.fleet.test_fleet import fleet_config, tick_until
from vla_recover.fleet import FleetManager, SlotState
from vla_recover.fleet.views import ViewBoard, ViewFeed, ViewPainter, jpeg
from vla_recover.teleop.devices import ScriptedDevice


def test_a_sim_robot_is_painted_only_while_someone_watches(tmp_path: Path) -> None:
    fleet = FleetManager(fleet_config(tmp_path, robots=2, episodes=100, task_config={"horizon": 300}),
                         views=tmp_path / "views")  # fmt: skip
    assert fleet.views is not None
    fleet.start()
    try:
        tick_until(fleet, lambda: fleet.slots["sim01"].state is SlotState.AUTONOMOUS)
        for _ in range(5):
            fleet.tick()
        assert fleet.views.frame("sim01") is None  # nobody watches: nothing is rendered
        fleet.views.want("sim01", "large")
        tick_until(fleet, lambda: fleet.views.frame("sim01") is not None)
        jpeg, age = fleet.views.frame("sim01")  # type: ignore[misc]
        image = iio.imread(jpeg, extension=".jpg")
        assert image.shape == (240, 320, 3) and image.std() > 5 and age < 2.0  # a scene, not a blank
        assert fleet.views.frame("sim00") is None
        fleet.views.want("sim01", "thumb")  # the larger view still wanted wins
        painted = (tmp_path / "views" / "sim01.jpg").stat().st_mtime
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            fleet.tick()
        assert (tmp_path / "views" / "sim01.jpg").stat().st_mtime > painted  # still painted while watched
        assert iio.imread(fleet.views.frame("sim01")[0], extension=".jpg").shape == (240, 320, 3)  # type: ignore[index]
    finally:
        fleet.close()
    with pytest.raises(ValueError, match="size: got 'huge'; valid sizes: large, thumb"):
        ViewBoard(tmp_path / "views").want("sim00", "huge")


def test_a_feed_sends_each_new_frame_once_at_the_views_rate(tmp_path: Path) -> None:
    board, painted = ViewBoard(tmp_path), 1_000_000.0
    feed = ViewFeed(board)
    feed.watch({"sim00": "large"})
    assert feed.due() == [] and json.loads((tmp_path / "sim00.want").read_text())["width"] == 320  # asked for at once

    def paint(shade: int) -> None:  # as a worker does, stamped one painting period later each time
        nonlocal painted
        painted += 0.1
        (tmp_path / "sim00.jpg").write_bytes(jpeg(np.full((240, 320, 3), shade, np.uint8)))
        os.utime(tmp_path / "sim00.jpg", (painted, painted))

    paint(50)
    [message] = feed.due()
    header, frame = message.split(b"\n", 1)
    assert json.loads(header)["robot"] == "sim00" and json.loads(header)["painted"] == pytest.approx(painted)
    assert iio.imread(frame, extension=".jpg").mean() == pytest.approx(50, abs=2)
    assert feed.due() == []  # nothing new painted: nothing sent
    paint(100)
    paint(150)  # two painted before the viewer was due for one: only the newest goes out
    time.sleep(0.1)
    [message] = feed.due()
    assert iio.imread(message.split(b"\n", 1)[1], extension=".jpg").mean() == pytest.approx(150, abs=2)
    feed.watch({"sim00": "thumb"})  # a thumbnail is due once a second
    paint(200)
    assert feed.due() == []
    with pytest.raises(ValueError, match=r"views\.sim00: got size 'huge'"):
        feed.watch({"sim00": "huge"})


def test_a_rewind_preview_shows_where_the_rewind_lands_without_moving_the_robot(tmp_path: Path) -> None:
    fleet = FleetManager(fleet_config(tmp_path, robots=1, episodes=1, task_config={"horizon": 200}))
    fleet.start()
    try:
        slot = fleet.slots["sim00"]
        tick_until(fleet, lambda: slot.state is SlotState.AUTONOMOUS)
        lease = fleet.grant_takeover("sim00", "alice", ScriptedDevice(lambda obs: np.array([0, 0, 0.6, 0, -1.0])))
        for _ in range(12):  # the gripper rises: the scene changes from step to step
            fleet.tick()
        here = len(slot.branch_rows)
        back = fleet.rewind_preview("sim00", lease.token, 8)
        assert len(slot.branch_rows) == here  # the robot did not move
        current = slot.worker.call("preview", here, 320, 240)
        assert back != current and iio.imread(back, extension=".jpg").shape == (240, 320, 3)
        assert fleet.rewind("sim00", lease.token, 8) == 8
        assert slot.worker.call("preview", here - 8, 320, 240) == back  # the very state the preview showed
    finally:
        fleet.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Scene:
    """Stands in for a task: counts its renders, each a plain frame."""

    def __init__(self) -> None:
        self.unwrapped, self.renders = self, 0

    def render_view(self, camera: str, width: int, height: int, **look: bool) -> np.ndarray:
        self.renders += 1
        return np.full((height, width, 3), 90, np.uint8)


def test_the_painter_keeps_the_views_rate_in_wall_time_whatever_the_fleets_pace(tmp_path: Path) -> None:
    """A fleet stepping at 0.95 of real time (52.6 ms a step, control period 50 ms) still gets ten frames a second
    of the large view, one of a thumbnail; a reset shows at once; after a pause the schedule starts again."""
    ViewBoard(tmp_path).want("sim00", "large")
    clock, scene = _Clock(), _Scene()
    painter = ViewPainter(tmp_path, "sim00", control_dt=0.05, clock=clock)
    painted = []
    for _ in range(190):  # 10 wall seconds
        clock.now += 0.05 / 0.95
        if painter.after_steps(scene, 1):
            painted.append(clock.now)
    assert len(painted) == 100  # ten a second, where frames every second step would make 95
    gaps = np.diff(painted)
    assert gaps.min() > 0.05 and gaps.max() < 0.11  # at step boundaries, no burst, no long hole

    clock.now += 0.02
    assert painter.after_steps(scene, ViewPainter.JUMP)  # a reset, 20 ms after the last frame
    clock.now += 30.0  # paused; the want is renewed, as a watching page does
    ViewBoard(tmp_path).want("sim00", "large")
    renders = scene.renders
    for _ in range(10):
        clock.now += 0.05
        painter.after_steps(scene, 1)
    assert scene.renders - renders == 5  # no catching up on the pause: every other step, as the rate asks

    (tmp_path / "sim00.want").unlink()
    ViewBoard(tmp_path).want("sim00", "thumb")
    renders = scene.renders
    for _ in range(200):
        clock.now += 0.05
        painter.after_steps(scene, 1)
    assert scene.renders - renders == 10  # a thumbnail: one frame a second
