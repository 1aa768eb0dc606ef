"""The docs' "Extending" examples (examples/extending/) keep working: each is imported by path and its main() run
on small settings.

The examples register into module-level registries when imported. The ``load_example`` fixture imports them inside
the test and afterwards puts every registry (and gymnasium's) back as it found it, so no other test ever sees an
example's task, policy, weighter or method.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import gymnasium as gym
import numpy as np
import pytest
import torch

from vla_recover.config import ConfigError, load_yaml, validate_config
from vla_recover.critic.kinds import CRITICS, fit_critic, load_critic
from vla_recover.critic.label import label_store
from vla_recover.data import EpisodeStore
from vla_recover.envs import EXPERTS, TASKS, gym_id, load_task_config, make_task, register_task
from vla_recover.envs.tasks.lift import LiftCubeExpert
from vla_recover.fleet.progress import CriticRater
from vla_recover.fleet.robots import ROBOTS
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.methods import LOOP_METHODS
from vla_recover.loop.runner import DONE
from vla_recover.policies import POLICIES, build_policy
from vla_recover.train.weighting import WEIGHTERS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "extending"

LoadExample = Callable[[str], ModuleType]


@pytest.fixture
def load_example() -> Iterator[LoadExample]:
    # restored in place: other modules hold these very dicts
    tables = [
        TASKS._entries, EXPERTS._entries, POLICIES._entries, WEIGHTERS._entries, CRITICS._entries,
        LOOP_METHODS._entries, ROBOTS._entries, gym.registry,
    ]  # fmt: skip
    saved = [dict(table) for table in tables]
    loaded: list[str] = []

    def load(name: str) -> ModuleType:
        module_name = f"_docs_example_{name}"
        spec = importlib.util.spec_from_file_location(module_name, EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # the "module:Class" targets the example registers import it from here
        loaded.append(module_name)
        spec.loader.exec_module(module)
        return module

    try:
        yield load
    finally:
        for table, before in zip(tables, saved, strict=True):
            table.clear()
            table.update(before)
        for module_name in loaded:
            sys.modules.pop(module_name, None)


def test_a_new_robot_kind_puts_the_stand_in_arm_in_a_fleet(
    load_example: LoadExample, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cyclonedds")
    monkeypatch.setenv("ROS_DOMAIN_ID", str(random.SystemRandom().randint(1, 232)))  # a DDS domain of its own
    example = load_example("new_robot")
    assert "standin" in ROBOTS.names()
    summary = example.main(
        tmp_path, dds_config=str(EXAMPLES.parents[1] / "tests/fixtures/ros2/cyclonedds-loopback.xml")
    )
    assert summary["episodes"] == 6
    with EpisodeStore(tmp_path / "store") as store:
        arm = store.episodes(robot="arm")
    assert arm and all(e.length == 30 for e in arm)  # the arm ran its episodes to the horizon like the sims


def test_new_task_is_registered_and_its_expert_succeeds(load_example: LoadExample) -> None:
    example = load_example("new_task")
    assert "LiftCubeTo" in TASKS and "LiftCubeTo" in EXPERTS and gym_id("LiftCubeTo") in gym.registry

    outcomes = example.main(seeds=(0, 1, 2))
    assert [o["success"] for o in outcomes] == [True, True, True]

    # the config's new fields are validated and named in errors
    with pytest.raises(ConfigError, match="tolerance"):
        load_task_config("LiftCubeTo", {"tolerance": 0.5})
    # the target is part of the observation and of the saved state
    env = gym.make(gym_id("LiftCubeTo"), config=load_task_config("LiftCubeTo", {"target_range": 0.08}))
    try:
        obs, _ = env.reset(seed=4)
        task = env.unwrapped
        assert isinstance(task, example.LiftCubeToEnv)
        assert env.observation_space.contains(obs) and len(task.state_labels) == obs["state"].shape[0]
        assert task.state_labels[-3:] == ("target_x", "target_y", "target_z")
        np.testing.assert_allclose(obs["state"][-3:], task.target, atol=1e-6)
        state, target = task.get_state(), task.target
        task.reset(seed=5)
        task.set_state(state)
        np.testing.assert_array_equal(task.target, target)
    finally:
        env.close()
    # a task of its own: LiftCube's expert, which lifts straight up, never reaches the target
    env = make_task("LiftCubeTo", {"horizon": 60})
    try:
        for seed in (0, 1):
            _, info = env.reset(seed=seed)
            lift_expert = LiftCubeExpert(env, seed=seed)
            done = False
            while not done:
                _, _, terminated, truncated, info = env.step(lift_expert())
                done = terminated or truncated
            assert info["phase"] == "lift" and not info["is_success"]
    finally:
        env.close()


def test_register_task_refuses_a_taken_name_and_a_malformed_target(load_example: LoadExample) -> None:
    example = load_example("new_task")
    env_target = f"{example.__name__}:LiftCubeToEnv"
    with pytest.raises(ValueError, match="already registered"):
        register_task("LiftCubeTo", example.LiftCubeToConfig, env_target, f"{example.__name__}:LiftCubeToExpert")
    with pytest.raises(ValueError, match="expert_target: got 'LiftCubeToExpert'"):
        register_task("LiftCubeTo2", example.LiftCubeToConfig, env_target, "LiftCubeToExpert")
    assert "LiftCubeTo2" not in TASKS


def test_new_policy_trains_predicts_chunks_and_is_evaluated(load_example: LoadExample) -> None:
    example = load_example("new_policy")
    assert POLICIES.get("mlp").config_cls is example.MLPConfig

    result = example.main(episodes=4, steps=150)
    losses = result["losses"]
    assert len(losses) == 3 and losses[-1] < 0.5 * losses[0]
    policy = result["policy"]  # reloaded from its checkpoint through POLICIES
    assert isinstance(policy, example.MLPPolicy)
    state_dim = policy.shapes["obs.state"][-1]
    batch = {"obs.state": np.random.default_rng(0).normal(size=(3, 2, state_dim)).astype(np.float32)}
    chunk = policy.predict_chunk(batch, seed=0)
    assert chunk.shape == (3, 8, 5) and np.isfinite(chunk).all()
    np.testing.assert_array_equal(chunk, policy.predict_chunk(batch, seed=1))  # deterministic
    evaluation = result["evaluation"]
    assert evaluation["task"] == "LiftCube" and evaluation["episodes"] == 2 and len(evaluation["outcomes"]) == 2
    assert evaluation["seeds"] == [100_000, 100_001] and evaluation["mean_length"] > 0


def test_new_policy_loss_ignores_padding_and_zero_weights(load_example: LoadExample) -> None:
    load_example("new_policy")
    policy = build_policy("mlp", {"action_horizon": 8, "action_exec": 4, "hidden_dim": 32}, {"obs.state": (6,)}, 5)
    generator = torch.Generator().manual_seed(0)
    batch = {
        "obs.state": torch.randn(2, 2, 6, generator=generator),
        "action": torch.randn(2, 8, 5, generator=generator),
        "action_is_pad": torch.zeros(2, 8, dtype=torch.bool),
    }
    batch["action_is_pad"][0, 5:] = True
    changed = {**batch, "action": batch["action"].clone()}
    changed["action"][0, 5:] += 10.0  # padded steps of sample 0
    changed["action"][1] += 10.0  # all of sample 1, whose weight is 0
    weights = torch.tensor([1.0, 0.0])
    assert torch.equal(policy.compute_loss(batch, weights), policy.compute_loss(changed, weights))
    assert not torch.equal(policy.compute_loss(batch), policy.compute_loss(changed))


@pytest.mark.slow  # a loop round: demos, a base policy, a fleet, a critic, training and evaluation (about 40 s)
def test_new_method_runs_a_loop_round_with_its_weighter(load_example: LoadExample, tmp_path: Path) -> None:
    example = load_example("new_method")
    assert LOOP_METHODS.get("outcome_bc").weighter == "outcome_bc" and "outcome_bc" in WEIGHTERS

    # no baseline or final test: the round itself is what the example shows
    summary = example.main(tmp_path / "run", baseline="none", final_test={"episodes": 0})
    assert summary["method"] == "outcome_bc" and [r["round"] for r in summary["rounds"]] == [0, 1]
    assert all(0.0 <= r["eval"]["success_rate"] <= 1.0 for r in summary["rounds"])

    # the run store's log holds the round's training result, with what the weighter reported
    with EpisodeStore(tmp_path / "run" / "store") as store:
        results = {e.payload["step"]: e.payload["result"] for e in store.events(kind=DONE)}
    weights = results["round_1.train"]["weights"]
    assert weights["weighter"] == "outcome_bc"
    # the weak base policy failed in the fleet; with failure_weight 0 its doubtful steps were the only ones left out
    assert weights["doubtful_policy_steps"] > 0
    assert weights["nonzero_steps"] == weights["eligible_steps"] - weights["doubtful_policy_steps"]
    assert summary["rounds"][1]["train"]["weights"]["zero_fraction"] > 0


def test_new_critic_trains_labels_a_store_and_rates_a_fleets_steps(load_example: LoadExample, tmp_path: Path) -> None:
    example = load_example("new_critic")
    store = example.walking_store(tmp_path / "store")
    steps: list[int] = []
    metrics = fit_critic(store, tmp_path / "ridge", {"kind": "ridge", "ridge": 0.01}, lambda s, _: steps.append(s))
    assert metrics["episodes"] == 6 and steps == [1]
    critic = load_critic(tmp_path / "ridge")
    assert isinstance(critic, example.RidgeCritic) and critic.input_keys == ("obs.state",)
    summary = label_store(store, tmp_path / "ridge")
    assert summary["episodes"] == 6
    with EpisodeStore(store) as opened:
        labels = opened.events(kind="labels_written")
        assert len(labels) == 6 and {e.payload["critic"] for e in labels} == {str(tmp_path / "ridge")}
        assert any(s.kind == "failure_inducing" for s in opened.segments(source="critic"))  # the walks that turn back
    rater = CriticRater(tmp_path / "ridge", ["obs.state"])
    rows = [{"obs.state": np.array([0.0, 1.0], np.float32)}, {"obs.state": np.array([1.0, 0.0], np.float32)}]
    start, goal = rater.rate(rows, ["", ""])
    assert start < 0.2 < 0.8 < goal
    with pytest.raises(ValueError, match="the critic reads"):
        critic.predict({"obs.state": np.zeros((2, 5))}, "")


def test_a_loop_config_names_the_new_critic_by_kind(load_example: LoadExample) -> None:
    load_example("new_critic")
    raw = load_yaml(Path(__file__).resolve().parents[2] / "configs" / "loop" / "debug.yaml")
    assert validate_config(LoopConfig, {**raw, "critic": {"kind": "ridge", "ridge": 0.5}}).critic["kind"] == "ridge"
    with pytest.raises(ConfigError, match=r"critic\.ridge"):
        validate_config(LoopConfig, {**raw, "critic": {"kind": "ridge", "ridge": -1}})
    with pytest.raises(ConfigError, match=r"critic\.kind: unknown critic 'nope'; valid choices: progress, ridge"):
        validate_config(LoopConfig, {**raw, "critic": {"kind": "nope"}})
