"""Evaluation's results do not depend on how its episodes are batched (and so on its worker count)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vla_recover.envs import make_task
from vla_recover.evaluate import evaluate_policy
from vla_recover.policies import Policy, build_policy
from vla_recover.policies.common.encoders import SentenceEmbedder


def untrained_lift_policy(name: str = "diffusion", action_range: float = 1.0) -> Policy:
    """A small LiftCube policy that has seen no data; its actions spread over about +-``action_range``."""
    probe = make_task("LiftCube", {})
    state_dim, action_dim = probe.observation_space["state"].shape[0], probe.action_space.shape[0]
    probe.close()
    torch.manual_seed(0)
    small = {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4, "inference_steps": 3}
    policy = build_policy(name, small, {"obs.state": (state_dim,)}, action_dim)
    rng = np.random.default_rng(0)
    actions = rng.uniform(-action_range, action_range, size=(50, action_dim))
    policy.fit_normalizer({"obs.state": rng.normal(size=(50, state_dim)), "action": actions})
    return policy


def chunks_by_row_seed(policy: Policy, seeds: list[int], batch: int) -> dict[int, np.ndarray]:
    """Every chunk the evaluation planned, keyed by the seed its row was sampled with."""
    planned: dict[int, np.ndarray] = {}
    predict = policy.predict_chunk

    def recording(obs: dict[str, Any], seed: Any = None, hook: Any = None) -> np.ndarray:
        chunks = predict(obs, seed=seed, hook=hook)
        planned.update(zip(seed, chunks, strict=True))
        return chunks

    policy.predict_chunk = recording  # type: ignore[method-assign]
    try:
        evaluate_policy(policy, SentenceEmbedder({}), "LiftCube", seeds, batch=batch, task_config={"horizon": 24})
    finally:
        del policy.predict_chunk
    return planned


def test_an_episode_plans_the_same_chunks_whatever_batch_it_runs_in() -> None:
    policy = untrained_lift_policy()
    seeds = [100_000, 100_001, 100_002]
    together = chunks_by_row_seed(policy, seeds, batch=3)
    one_by_one = chunks_by_row_seed(policy, seeds, batch=1)
    assert len(together) == 3 * 24 // 4  # a chunk every 4 steps per episode
    assert together.keys() == one_by_one.keys()
    for row_seed, chunk in together.items():
        np.testing.assert_allclose(one_by_one[row_seed], chunk, rtol=1e-4, atol=1e-4)


def test_evaluation_records_which_injected_failures_fired_and_splits_success_by_them() -> None:
    """A push at step 1 fires in every episode, a slip in a phase an untrained policy never reaches in none."""
    from vla_recover.evaluate import success_by_failure

    failures = [{"kind": "push", "at_step": 1}, {"kind": "slip", "phase": "lift"}]
    result = evaluate_policy(
        untrained_lift_policy(),
        SentenceEmbedder({}),
        "LiftCube",
        [7, 8],
        task_config={"horizon": 12, "failures": failures},
    )
    assert result["failures_fired"] == ["push", "push"]
    assert success_by_failure(result) == {"push": {"successes": 0, "episodes": 2}}
    fired = {"outcomes": [1, 0, 1, 1], "failures_fired": ["", "push+slip", "push", ""]}
    assert list(success_by_failure(fired) or {}) == ["push", "push+slip", "none"]
    assert success_by_failure({"outcomes": [1], "failures_fired": [""]}) is None  # nothing fired: no split to show
