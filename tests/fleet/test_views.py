"""Views of sim robots for people: painted by the robot's worker only while someone watches, at the view's size."""

from __future__ import annotations

import time
from pathlib import Path

import imageio.v3 as iio
import pytest

from tests.fleet.test_fleet import fleet_config, tick_until
from vla_recover.fleet import FleetManager, SlotState
from vla_recover.fleet.views import ViewBoard


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
