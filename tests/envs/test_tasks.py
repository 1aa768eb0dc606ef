"""The MJCF tasks: experts, phases, instructions, failures, bad input (the contract itself: test_task_contract.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.envs.helpers import run_expert
from vla_recover.config import ConfigError
from vla_recover.envs import TASKS, make_task
from vla_recover.envs.config import MujocoTaskConfig
from vla_recover.envs.mjcf import FINGER_OPEN
from vla_recover.registry import UnknownNameError

MJCF_TASKS = [e.name for e in TASKS if issubclass(e.config_cls, MujocoTaskConfig)]


@pytest.fixture(scope="module", params=MJCF_TASKS)
def expert_traces(request: pytest.FixtureRequest) -> tuple[str, list]:
    task = request.param
    env = make_task(task)
    return task, [run_expert(task, seed, env=env) for seed in range(100)]


def test_expert_succeeds_on_95_of_100_seeds(expert_traces: tuple[str, list]) -> None:
    task, traces = expert_traces
    rate = np.mean([t.success for t in traces])
    assert rate >= 0.95, f"{task}: expert success {rate:.2f}"


def test_phases_advance_in_order_and_progress_is_monotone(expert_traces: tuple[str, list]) -> None:
    task, traces = expert_traces
    for seed, trace in enumerate(traces):
        if not trace.success:
            continue
        assert np.all(np.diff(trace.phases) >= 0), f"{task} seed {seed}: phases {trace.phases}"
        # tolerance: contact jitter moves objects by fractions of a millimetre
        assert np.min(np.diff(trace.progress)) >= -0.01, f"{task} seed {seed}: progress {trace.progress}"
        assert trace.progress[-1] == 1.0
        assert trace.phases[-1] == len(TASKS.get(task).load().PHASES) - 1
        assert trace.progress[0] < 0.1


@pytest.mark.parametrize("task", MJCF_TASKS)
def test_instructions_are_paraphrased_by_seed(task: str) -> None:
    env = make_task(task)
    instructions = {env.reset(seed=s)[1]["instruction"] for s in range(20)}
    assert len(instructions) >= 3


def test_pick_place_instruction_names_the_target() -> None:
    env = make_task("PickPlaceBin")
    for seed in range(10):
        _, info = env.reset(seed=seed)
        color = env.unwrapped._task["object"].removesuffix("_cube")
        assert color in info["instruction"]


# Where each failure is injected so that it meets the object in a state it can disturb.
FAILURE_PHASE = {"slip": "lift", "early_release": "lift", "actuator_noise": "lift", "push": "reach",
                 "pose_shift": "reach"}  # fmt: skip
FAILURE_DELAY = {"push": [5, 7], "pose_shift": [5, 7]}


@pytest.mark.parametrize("kind", sorted(FAILURE_PHASE))
@pytest.mark.parametrize("task", MJCF_TASKS)
def test_every_failure_kind_creates_a_failure_or_recovery_situation(task: str, kind: str) -> None:
    """Against the clean episode of the same seed: the episode fails, takes longer, or loses progress."""
    spec = {"kind": kind, "phase": FAILURE_PHASE[kind], "delay": FAILURE_DELAY.get(kind, [0, 1])}
    disturbed = 0
    seeds = range(8)
    for seed in seeds:
        clean = run_expert(task, seed)
        hit = run_expert(task, seed, {"failures": [spec], "horizon": 300})
        assert len(hit.failure_steps) == 1
        step = hit.failure_steps[0]
        recorded = hit.info["failures"]
        assert [f["kind"] for f in recorded] == [kind] and recorded[0]["step"] == step
        drop = max(hit.progress[: step + 1]) - min(hit.progress[step + 1 : step + 21])
        disturbed += (not hit.success) or hit.length >= clean.length + 3 or drop >= 0.05
    assert disturbed >= 0.75 * len(seeds), f"{task}/{kind}: only {disturbed}/{len(seeds)} episodes disturbed"


@pytest.mark.parametrize("task", MJCF_TASKS)
def test_the_gripper_opens_again_after_closing_on_nothing(task: str) -> None:
    env = make_task(task)
    env.reset(seed=0)
    close, open_ = np.array([0, 0, 0, 0, 1.0]), np.array([0, 0, 0, 0, -1.0])
    for _ in range(10):
        env.step(close)
    assert abs(env.unwrapped.finger_opening) < 0.003  # shut, the fingers side by side, not through each other
    for _ in range(10):
        env.step(open_)
    assert env.unwrapped.finger_opening == pytest.approx(FINGER_OPEN, abs=0.002)


@pytest.mark.parametrize("task", MJCF_TASKS)
def test_an_expert_that_misses_grasps_tries_again_and_succeeds(task: str) -> None:
    """Half the grasp attempts close beside the object; the expert reopens, re-aims and gets there."""
    misses = {"grasp_miss_prob": 0.5}
    traces = [run_expert(task, seed, {"horizon": 400}, expert_config=misses) for seed in range(6)]
    assert sum(t.success for t in traces) >= 5, [t.length for t in traces]


def test_bad_task_id_lists_valid_choices() -> None:
    with pytest.raises(UnknownNameError, match=r"valid task ids: .*vla_recover/LiftCube-v0"):
        make_task("vla_recover/Lfit-v0")


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"horizon": 0}, "horizon"),
        ({"cameras": ["top"]}, "cameras.0"),
        ({"failures": [{"kind": "explode"}]}, "failures.0.kind"),
        ({"failures": [{"kind": "slip", "delay": [3, 1]}]}, "failures.0.delay"),
        ({"lift_hieght": 0.1}, "lift_hieght"),
    ],
)
def test_bad_config_values_name_the_field(config: dict, field: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        make_task("LiftCube", config)
    assert f"field {field!r}" in str(excinfo.value)


def test_bad_failure_kind_lists_the_valid_kinds() -> None:
    with pytest.raises(ConfigError, match="early_release"):
        make_task("LiftCube", {"failures": [{"kind": "explode"}]})


def test_bad_failure_phase_lists_the_task_phases() -> None:
    with pytest.raises(ValueError, match="valid phases for this task: reach, grasp, lift"):
        make_task("LiftCube", {"failures": [{"kind": "slip", "phase": "carry"}]})


def test_bad_actions_are_rejected_with_the_reason() -> None:
    env = make_task("LiftCube")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="shape"):
        env.step(np.zeros(3))
    with pytest.raises(ValueError, match="NaN"):
        env.step(np.array([0, 0, np.nan, 0, 0]))


@pytest.mark.parametrize("task", MJCF_TASKS)
def test_camera_images_are_rendered_when_enabled(task: str) -> None:
    env = make_task(task, {"cameras": ["front", "wrist"], "image_size": 64})
    obs, _ = env.reset(seed=0)
    for cam in ("front", "wrist"):
        image = obs[f"images.{cam}"]
        assert image.shape == (64, 64, 3) and image.dtype == np.uint8
        assert image.std() > 5.0  # a scene, not a blank frame
    assert env.observation_space.contains(obs)
