"""EgoRecovery's recovery head: the gate picks, per row, which generator samples the chunk."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vla_recover.policies import build_policy
from vla_recover.policies.common.base import Policy

SHAPES = {"obs.state": (2, 5)}
SMALL = {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4}
STEPS = {"flow": {"inference_steps": 3}, "diffusion": {"inference_steps": 4}}


def _policies(name: str) -> tuple[Policy, Policy, Policy]:
    """(a policy with a recovery head, one plain policy with its nominal weights, one with its head's weights)."""
    torch.manual_seed(0)
    gated = build_policy(name, {**SMALL, **STEPS[name], "recovery": {"gate_hidden": [8]}}, SHAPES, 3).eval()
    nominal = build_policy(name, {**SMALL, **STEPS[name]}, SHAPES, 3).eval()
    head = build_policy(name, {**SMALL, **STEPS[name]}, SHAPES, 3).eval()
    state = gated.state_dict()
    nominal.load_state_dict({k: v for k, v in state.items() if k in nominal.state_dict()})
    prefix = f"recovery_{gated.backbone_attr}."
    head.load_state_dict({**nominal.state_dict(), **{k[9:]: v for k, v in state.items() if k.startswith(prefix)}})
    return gated, nominal, head


@pytest.mark.parametrize("name", ["flow", "diffusion"])
def test_flagged_rows_sample_from_the_head_and_the_rest_from_the_nominal_generator(name: str) -> None:
    gated, nominal, head = _policies(name)
    gate = gated.recovery_gate
    assert gate is not None
    batch = {"obs.state": np.random.default_rng(1).normal(size=(4, 2, 5)).astype(np.float32)}
    seeds = [1, 2, 3, 4]
    plain, recovering = nominal.predict_chunk(batch, seed=seeds), head.predict_chunk(batch, seed=seeds)
    with torch.no_grad():
        gate.net[-1].bias.fill_(0.0)
        gate.net[-1].weight.zero_()
        gate.net[-1].weight[0, 0] = 50.0  # the gate's one hidden unit decides: flag rows whose unit fires
        gate.net[0].weight.zero_()
        gate.net[0].bias.zero_()
        gate.net[0].weight[0, 0] = 1.0  # ... and it reads the latest state's first coordinate
    flagged = gate.rows(torch.as_tensor(batch["obs.state"]), use_delta=True).numpy()
    assert 0 < flagged.sum() < 4, "the constructed gate should split this batch"
    chunks = gated.predict_chunk(batch, seed=seeds)
    np.testing.assert_allclose(chunks[flagged], recovering[flagged], atol=1e-4)
    np.testing.assert_allclose(chunks[~flagged], plain[~flagged], atol=1e-5)
    gate.threshold.fill_(1.5)  # a gate that never fires: the nominal policy, bit for bit
    np.testing.assert_array_equal(gated.predict_chunk(batch, seed=seeds), plain)


def test_one_policy_carries_at_most_one_second_generator() -> None:
    with pytest.raises(ValueError, match="at most one second generator"):
        build_policy("flow", {**SMALL, "failure_guidance": {}, "recovery": {}}, SHAPES, 3)
    with pytest.raises(ValueError, match="needs state_key"):
        build_policy(
            "flow", {**SMALL, "state_key": None, "image_keys": ["obs.images.front"], "recovery": {}},
            {"obs.images.front": (84, 84, 3)}, 3,
        )  # fmt: skip
