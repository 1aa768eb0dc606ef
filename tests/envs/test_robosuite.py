"""The robosuite adapters: config errors, experts, phases, failures, cameras (the contract: test_task_contract.py).

robosuite takes seconds to build a scene, so every env here is module-scoped and the episodes are few.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mujoco
import numpy as np
import pytest

pytest.importorskip("robosuite")
pytestmark = pytest.mark.robosuite

from tests.envs.helpers import Trace, run_expert  # noqa: E402
from vla_recover.config import ConfigError  # noqa: E402
from vla_recover.envs import make_expert, make_task  # noqa: E402

TASKS = ("RobosuiteLift", "RobosuitePickPlaceCan", "RobosuiteNutAssemblySquare")
PHASES = {
    "RobosuiteLift": ("reach", "grasp", "lift"),
    "RobosuitePickPlaceCan": ("reach", "grasp", "lift", "carry", "place"),
    "RobosuiteNutAssemblySquare": ("reach", "grasp", "lift", "align", "insert"),
}
EXPERT_SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def envs() -> Iterator[dict[str, Any]]:
    made = {task: make_task(task) for task in TASKS}
    yield made
    for env in made.values():
        env.close()


@pytest.fixture(scope="module")
def traces(envs: dict[str, Any]) -> dict[tuple[str, int], Trace]:
    """One clean expert episode per task and seed, shared by the tests that look at them."""
    return {(task, seed): run_expert(task, seed, env=envs[task]) for task in TASKS for seed in EXPERT_SEEDS}


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"horizon": 0}, "horizon"),
        ({"control_freq": 1}, "control_freq"),
        ({"robot": "UR5e"}, "robot"),
        ({"cameras": ["top"]}, "cameras"),
        ({"image_size": 8}, "image_size"),
        ({"failures": [{"kind": "wobble"}]}, "failures.0.kind"),
        ({"failures": [{"kind": "slip", "phase": "carry"}]}, "failures.0.phase"),  # Lift has no carry phase
        ({"cameras": ["front", "front"]}, "cameras"),
        ({"object_xy_range": 0.1}, "object_xy_range"),  # an MJCF-only field
    ],
)
def test_bad_config_raises_naming_the_field(config: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make_task("RobosuiteLift", config)


def test_bad_actions_are_rejected_by_name(envs: dict[str, Any]) -> None:
    env = envs["RobosuiteLift"]
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action"):
        env.step(np.zeros(5))
    with pytest.raises(ValueError, match="action"):
        env.step(np.array([0.0, np.nan, 0, 0, 0, 0, 0]))


@pytest.mark.parametrize("seed", EXPERT_SEEDS)
@pytest.mark.parametrize("task", TASKS)
def test_expert_succeeds(traces: dict[tuple[str, int], Trace], task: str, seed: int) -> None:
    trace = traces[(task, seed)]
    assert trace.success, f"{task} seed {seed}: ended in phase {trace.info['phase']} after {trace.length} steps"
    assert trace.info["progress"] == 1.0


@pytest.mark.parametrize("task", TASKS)
def test_phases_advance_on_clean_expert_runs(traces: dict[tuple[str, int], Trace], task: str) -> None:
    for seed in EXPERT_SEEDS:
        phases, progress = np.array(traces[(task, seed)].phases), np.array(traces[(task, seed)].progress)
        assert np.all(np.diff(phases) >= 0), f"seed {seed}: phase index went back: {phases.tolist()}"
        assert np.all(np.diff(progress) >= -0.02), f"seed {seed}: progress dipped by {-np.diff(progress).min()}"
        assert phases[-1] == len(PHASES[task]) - 1


def test_every_failure_kind_fires_and_is_recorded() -> None:
    kinds = ("pose_shift", "slip", "push", "early_release", "actuator_noise")
    failures = [{"kind": kind, "at_step": 2 * i + 1, "duration": 1} for i, kind in enumerate(kinds)]
    env = make_task("RobosuiteLift", {"failures": failures, "horizon": 12})
    unwrapped = env.unwrapped
    env.reset(seed=0)
    expert = make_expert("RobosuiteLift", env, seed=0)
    cube_before = unwrapped.object_pos()
    fired: dict[str, int] = {}
    while True:
        _, _, terminated, truncated, info = env.step(expert())
        if info["failure"]:
            fired[info["failure"]] = info["step"] - 1
        if info["failure"] == "pose_shift":
            assert np.linalg.norm((unwrapped.object_pos() - cube_before)[:2]) > 0.03  # moved by ~6 cm
        if info["failure"] == "slip":
            assert unwrapped.gripper_command < 0.0  # the grip was loosened
        if terminated or truncated:
            break
    env.close()
    assert truncated and info["step"] == 12  # the configured horizon
    assert fired == {kind: 2 * i + 1 for i, kind in enumerate(kinds)}
    assert [event["kind"] for event in info["failures"]] == list(kinds)
    assert all(event["phase"] in PHASES["RobosuiteLift"] for event in info["failures"])


@pytest.mark.render
def test_camera_images_are_upright() -> None:
    env = make_task("RobosuiteLift", {"cameras": ["front", "wrist"], "image_size": 32})
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    sim = env.unwrapped.sim
    renderer = mujoco.Renderer(sim.model._model, 32, 32)  # MuJoCo's own renderer returns upright images
    renderer.update_scene(sim.data._data, camera="agentview")
    reference = renderer.render().astype(int)
    image = obs["images.front"].astype(int)
    assert np.abs(image - reference).mean() < np.abs(image[::-1] - reference).mean() / 2
    renderer.close()
    env.close()
