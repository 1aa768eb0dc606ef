"""The Ray backend: the same fleet with sim workers as Ray actors; a killed actor is a fault like a killed process."""

from __future__ import annotations

from pathlib import Path

import imageio.v3 as iio
import pytest

from tests.fleet.test_fleet import fleet_config, run_killing_one_worker, tick_until
from vla_recover.data import EpisodeStore
from vla_recover.fleet import FleetManager

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():  # type: ignore[no-untyped-def]
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.slow  # a local Ray cluster takes most of a minute to start and stop on two cores
def test_ray_actors_run_the_fleet_and_a_killed_actor_is_a_fault(tmp_path: Path, local_ray: None) -> None:
    fleet = FleetManager(fleet_config(tmp_path, backend="ray", episodes=3, task_config={"horizon": 20}))
    run_killing_one_worker(fleet, "sim01", 7)
    with EpisodeStore(tmp_path / "store") as store:
        outcomes = sorted((r.robot, r.outcome, r.length) for r in store.episodes())
        assert ("sim01", "aborted", 7) in outcomes
        assert [o for o in outcomes if o[1] == "truncated"] and all(o[2] == 20 for o in outcomes if o[1] != "aborted")


@pytest.mark.slow
def test_a_ray_actor_paints_its_robots_view_while_someone_watches(tmp_path: Path, local_ray: None) -> None:
    fleet = FleetManager(
        fleet_config(tmp_path, backend="ray", episodes=20, task_config={"horizon": 300}), views=tmp_path / "views"
    )
    assert fleet.views is not None
    fleet.start()
    try:
        for _ in range(5):
            fleet.tick()
        assert fleet.views.frame("sim00") is None  # nobody watches: nothing is rendered
        fleet.views.want("sim00", "large")
        tick_until(fleet, lambda: fleet.views.frame("sim00") is not None)
        image = iio.imread(fleet.views.frame("sim00")[0], extension=".jpg")  # type: ignore[index]
        assert image.shape == (240, 320, 3) and image.std() > 5
        assert fleet.views.frame("sim01") is None
    finally:
        fleet.close()
