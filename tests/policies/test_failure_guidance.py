"""AFIL's failure-aware guidance: the formula on a one-step sampler, the adaptive strength, and the routing of
failure rows to the failure generator alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vla_recover.policies import build_policy
from vla_recover.policies.common.base import Policy, draw_noise
from vla_recover.policies.common.failure_guidance import FailureGuidanceConfig, guidance_strength

SHAPES = {"obs.state": (2, 5)}
SMALL = {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4}
STEPS = {"flow": {"inference_steps": 3}, "diffusion": {"inference_steps": 4}}


def _pair(name: str, guidance: dict[str, object]) -> tuple[Policy, Policy]:
    """A plain policy and one with failure guidance whose own generator has the plain one's weights."""
    torch.manual_seed(0)
    plain = build_policy(name, {**SMALL, **STEPS[name]}, SHAPES, 3)
    guided = build_policy(name, {**SMALL, **STEPS[name], "failure_guidance": guidance}, SHAPES, 3)
    guided.load_state_dict(plain.state_dict(), strict=False)  # the failure generator keeps its own random weights
    return plain.eval(), guided.eval()


def _batch(rows: int = 4) -> dict[str, np.ndarray]:
    return {"obs.state": np.random.default_rng(1).normal(size=(rows, 2, 5)).astype(np.float32)}


def test_adaptive_strength_is_largest_where_the_generators_agree() -> None:
    config = FailureGuidanceConfig(scale=2.0, distance_scale=0.5)
    distances = torch.tensor([0.0, 0.25, 0.5, 1.0, 4.0])
    gap = distances[:, None, None].expand(5, 8, 3).clone()  # RMS distance of each row is its entry
    strength = guidance_strength(config, gap)[:, 0, 0]
    assert strength[0] == pytest.approx(2.0)
    assert torch.all(strength[1:] < strength[:-1])  # fades as the two estimates part
    push = strength * distances
    assert int(torch.argmax(push)) == 2  # the displacement peaks at d = distance_scale
    assert float(push.max()) == pytest.approx(2.0 * 0.5 / math.e, rel=1e-5)
    constant = guidance_strength(FailureGuidanceConfig(scale=1.5, rule="constant"), gap)
    assert torch.all(constant == 1.5)


def test_one_euler_step_lands_on_the_negatively_guided_endpoint() -> None:
    """Flow, one step, constant λ: the chunk is â_s + λ·(â_s − â_f) with â = x + v from the same noise."""
    torch.manual_seed(0)
    config = {**SMALL, "inference_steps": 1, "failure_guidance": {"scale": 0.7, "rule": "constant"}}
    policy = build_policy("flow", config, SHAPES, 3).eval()
    cond = policy.encode_obs({"obs.state": torch.as_tensor(_batch()["obs.state"])})
    with torch.no_grad():
        chunk = policy.sample_actions(cond, torch.Generator().manual_seed(5), policy.sampling_hook({}, cond, None))
        noise = draw_noise(tuple(chunk.shape), torch.Generator().manual_seed(5))
        t = torch.zeros(chunk.shape[0])
        success = noise + policy.velocity(noise, t, cond)
        failure = noise + policy.failure_velocity(noise, t, cond)
    torch.testing.assert_close(chunk, success + 0.7 * (success - failure))


@pytest.mark.parametrize("name", ["flow", "diffusion"])
def test_without_strength_or_with_an_identical_failure_generator_nothing_changes(name: str) -> None:
    plain, guided = _pair(name, {"scale": 0.0})
    seeds = [1, 2, 3, 4]
    np.testing.assert_array_equal(plain.predict_chunk(_batch(), seed=seeds), guided.predict_chunk(_batch(), seed=seeds))
    _, guided = _pair(name, {"scale": 1.0})
    assert not np.allclose(plain.predict_chunk(_batch(), seed=seeds), guided.predict_chunk(_batch(), seed=seeds))
    own = guided.backbone_attr
    copied = {f"failure_{k}": v for k, v in guided.state_dict().items() if k.startswith(f"{own}.")}
    guided.load_state_dict({**guided.state_dict(), **copied})  # the two generators agree: the gap is zero
    np.testing.assert_allclose(
        plain.predict_chunk(_batch(), seed=seeds), guided.predict_chunk(_batch(), seed=seeds), atol=1e-5
    )


@pytest.mark.parametrize("name", ["flow", "diffusion"])
def test_failure_rows_train_the_failure_generator_and_no_other(name: str) -> None:
    _, policy = _pair(name, {})
    policy.train()
    own, failure = policy.get_submodule(policy.backbone_attr), policy.failure_generator
    assert failure is not None
    batch = {"obs.state": torch.randn(6, 2, 5), "action": torch.randn(6, 8, 3)}
    for failed, trained, untouched in ((True, failure, own), (False, own, failure)):
        policy.zero_grad(set_to_none=True)
        policy.compute_loss({**batch, "failure": torch.full((6,), failed)}).backward()
        assert all(p.grad is not None for p in trained.parameters())
        assert all(p.grad is None for p in untouched.parameters())
    policy.zero_grad(set_to_none=True)
    policy.compute_loss({**batch, "failure": torch.tensor([True, False] * 3)}).backward()
    assert all(p.grad is not None for p in (*own.parameters(), *failure.parameters()))


def test_failure_rows_for_a_policy_without_a_failure_generator_are_refused() -> None:
    plain, _ = _pair("flow", {})
    batch = {"obs.state": torch.randn(2, 2, 5), "action": torch.randn(2, 8, 3), "failure": torch.tensor([True, False])}
    with pytest.raises(ValueError, match="no failure generator"):
        plain.compute_loss(batch)
