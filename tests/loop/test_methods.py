"""The method registry: every entry builds its training data rule, and the runner follows the entry, not a name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vla_recover.config import ConfigError, load_yaml, validate_config
from vla_recover.data import EpisodeStore
from vla_recover.loop.config import LoopConfig
from vla_recover.loop.methods import LOOP_METHODS, loop_method
from vla_recover.loop.runner import LoopRun
from vla_recover.registry import UnknownNameError
from vla_recover.train.weighting import WEIGHTERS

DEBUG = Path(__file__).resolve().parents[2] / "configs" / "loop" / "debug.yaml"


@pytest.mark.parametrize("name", LOOP_METHODS.names())
def test_every_method_states_its_rule_and_builds_its_dataset(name: str) -> None:
    method = loop_method(name)
    assert method.paper and method.data and method.weighter in WEIGHTERS
    if method.same_data_without is not None:  # the reference a second generator is judged against
        reference = LOOP_METHODS.get(method.same_data_without)
        assert (method.failures != "none" or method.recovery_head) and reference.shares == method.shares
        assert (reference.retention, reference.weighter) == (method.retention, method.weighter)
    config = validate_config(LoopConfig, {**load_yaml(DEBUG), "method": name})
    dataset = config.dataset_config()
    assert (dataset.weighter, dataset.retention, dataset.shares) == (method.weighter, method.retention, method.shares)
    assert dataset.failures == method.failures
    # a method that trains a failure generator gets one in its rounds' policy (with the loop's guidance), no other
    policy = config.round_policy_config(retrain=True)
    guidance = config.failure_guidance.model_dump(mode="json") if method.failures != "none" else None
    recovery = config.recovery_head.model_dump(mode="json") if method.recovery_head else None
    assert (policy.get("failure_guidance"), policy.get("recovery")) == (guidance, recovery)
    assert "failure_guidance" not in config.train_config(Path("s"), Path("o"), retrain=False).policy_config


def test_an_unknown_method_lists_the_choices() -> None:
    with pytest.raises(UnknownNameError, match="unknown method 'dagger'; valid choices: afil, awr, critic_cut, "):
        loop_method("dagger")
    with pytest.raises(ConfigError, match="method: got 'dagger'; valid choices: afil, awr"):
        validate_config(LoopConfig, {**load_yaml(DEBUG), "method": "dagger"})


@pytest.mark.parametrize(
    ("name", "retrain_from", "starts_from_current"),
    [("hitl_bc", "current", True), ("hitl_bc", "scratch", False), ("hg_dagger", "current", False)],
)
def test_a_round_fine_tunes_or_retrains_as_its_method_says(
    tmp_path: Path, name: str, retrain_from: str, starts_from_current: bool
) -> None:
    raw = {**load_yaml(DEBUG), "method": name, "retrain_from": retrain_from, "out": str(tmp_path / "run")}
    run = LoopRun(validate_config(LoopConfig, raw))
    rounds = [{"episode_ids": [20, 21]}, {"episode_ids": [30]}]
    ids, init, share = run._training_set([0, 1], rounds, "runs/round_1/policy")
    assert ids == [0, 1, 20, 21, 30] and share is None
    assert init == ("runs/round_1/policy" if starts_from_current else None)


def test_more_demos_spends_the_round_human_time_on_demonstrations(tmp_path: Path) -> None:
    budget = {"human_s_per_round": 10.0, "reset_s": 4.0, "batch": 2}
    raw = {**load_yaml(DEBUG), "method": "more_demos", "more_demos": budget, "out": str(tmp_path / "run")}
    run = LoopRun(validate_config(LoopConfig, raw))
    bought = run._more_demos(1)
    with EpisodeStore(run.store_path) as store:
        rows = {row.id: row for row in store.episodes()}
    kept = [rows[i] for i in bought["episode_ids"]]
    costs = [row.length / 20 + 4.0 for row in kept]  # LiftCube runs at 20 Hz; each demonstration adds a reset
    assert bought["human_s"] == pytest.approx(sum(costs), abs=0.1) and bought["episodes"] == len(kept) >= 2
    assert sum(costs[:-1]) < 10.0 <= sum(costs)  # recorded until the time was spent, and no further
    seeds = [row.info["seed"] for row in kept]
    assert seeds == list(range(1000, 1000 + len(kept)))  # the seeds round 1's fleet would have started at


@pytest.mark.parametrize(("name", "injected"), [("more_demos", False), ("more_demos_perturbed", True)])
def test_demonstrations_meet_the_task_failures_only_when_the_method_says(
    tmp_path: Path, name: str, injected: bool
) -> None:
    failures = [{"kind": "push", "phase": "reach", "probability": 1.0}]
    raw = {**load_yaml(DEBUG), "method": name, "out": str(tmp_path / "run"),
           "task_config": {"horizon": 60, "failures": failures},
           "more_demos": {"human_s_per_round": 1.0, "batch": 2}}  # fmt: skip
    config = validate_config(LoopConfig, raw)
    assert config.demo_task_config(config.demos.conditions) == {"horizon": 60}  # the base demos: nominal
    run = LoopRun(config)
    bought = run._more_demos(1)
    with EpisodeStore(run.store_path) as store:
        fired = [bool(row.info["failures"]) for row in store.episodes() if row.id in bought["episode_ids"]]
    assert fired and all(f == injected for f in fired)


def test_dagger_oracle_records_the_expert_chunk_from_the_states_the_policy_visits(tmp_path: Path) -> None:
    from vla_recover.data.schema import ACTORS
    from vla_recover.envs import make_expert, make_task

    failures = [{"kind": "push", "phase": "reach", "probability": 1.0}]
    task_config = {"horizon": 40, "failures": failures}
    raw = {**load_yaml(DEBUG), "method": "dagger_oracle", "out": str(tmp_path / "run"), "task_config": task_config}
    run = LoopRun(validate_config(LoopConfig, raw))
    demos = run.step("demos", run._collect_demos)
    policy = run.step("base_train", lambda: run._train(run._train_config("base", demos["episode_ids"], None)))["policy"]
    labelled = run._oracle(1, policy)
    # the policy ran round 1's fleet seeds as evaluation runs it: branching and restoring changed none of its outcomes
    evaluation = run._evaluate(policy, seeds=list(range(1000, 1004)))
    assert labelled["policy_outcomes"] == evaluation["outcomes"] and labelled["policy_episodes"] == 4
    with EpisodeStore(run.store_path) as store:
        rows = [row for row in store.episodes() if row.id in set(labelled["episode_ids"])]
        first = next(row for row in rows if row.info["seed"] == 1001 and row.info["oracle_branch_step"] == 0)
        branch = store.episode(first.id)
        actors = {ACTORS[a] for row in rows for a in store.episode(row.id)["actor"]}
    # a branch every action_exec (4) steps of each episode, each at most one chunk (action_horizon 8) long
    assert labelled["branches"] == len(rows) >= 4 * 2 and all(row.length <= 8 for row in rows)
    assert sorted({row.info["oracle_branch_step"] for row in rows})[:2] == [0, 4]
    assert actors == {"scripted"} and all(row.info["loop_round"] == 1 for row in rows)
    assert labelled["steps"] == sum(row.length for row in rows) and labelled["mean_label_gap"] > 0
    # the first branch of seed 1001 is the perfect expert's own chunk from the episode's first state
    env = make_task("LiftCube", task_config)
    try:
        env.reset(seed=1001)
        expert = make_expert("LiftCube", env, None, seed=1001)
        expected = []
        for _ in range(first.length):
            expected.append(expert())
            env.step(expected[-1])
    finally:
        env.close()
    np.testing.assert_allclose(branch["action"], np.stack(expected), atol=1e-6)
    # the next round trains on the demos and every branch, fine-tuning the current policy
    ids, init, _ = run._training_set(demos["episode_ids"], [labelled], policy)
    assert ids == demos["episode_ids"] + labelled["episode_ids"] and init == policy


@pytest.mark.parametrize(("name", "init", "share"), [("reguide", "runs/current", 0.2), ("reguide_fs", None, None)])
def test_reguide_absorbs_only_guided_successes_by_fine_tuning_or_from_scratch(
    tmp_path: Path, name: str, init: str | None, share: float | None
) -> None:
    from vla_recover.data import EpisodeData

    run = LoopRun(validate_config(LoopConfig, {**load_yaml(DEBUG), "method": name, "out": str(tmp_path / "run")}))
    steps = {"obs.state": np.zeros((3, 4), np.float32), "action": np.zeros((3, 5), np.float32)}
    with EpisodeStore(run.store_path, mode="a") as store:
        won, lost = (store.append_episode(EpisodeData("LiftCube", steps, outcome=o, actor="guided"))
                     for o in ("success", "failure"))  # fmt: skip
    ids, start, demo_share = run._training_set([0, 1], [{"episode_ids": [won, lost]}], "runs/current")
    assert ids == [0, 1, won] and (start, demo_share) == (init, share)
