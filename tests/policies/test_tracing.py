"""Sampling through traced generators: the chunks the eager networks give, every batch size, the weights shared."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from torch import nn

from tests.policies.test_policies import batch, make
from vla_recover.policies import build_policy
from vla_recover.policies.common.tracing import is_traced, trace_on_first_call

OWN = ["flow", "diffusion"]  # the project's own policies (LeRobot's adapter runs in its own venv)


@pytest.mark.parametrize("backbone", ["unet", "transformer"])
@pytest.mark.parametrize("name", OWN)
def test_traced_sampling_gives_the_eager_chunks_at_every_batch_size(name: str, backbone: str) -> None:
    policy = make(name, backbone=backbone).eval()
    state = batch(b=5)["obs.state"]
    eager = {rows: policy.predict_chunk({"obs.state": state[:rows]}, seed=list(range(rows))) for rows in (1, 2, 5)}
    keys = set(policy.state_dict())
    policy.trace_networks()
    assert not is_traced(policy.get_submodule(policy.backbone_attr))  # traced at its first call, from its inputs
    for rows in (1, 2, 5):  # the trace is made at batch 1 and serves the others
        traced = policy.predict_chunk({"obs.state": state[:rows]}, seed=list(range(rows)))
        np.testing.assert_allclose(traced, eager[rows], rtol=1e-5, atol=1e-5)
    assert is_traced(policy.get_submodule(policy.backbone_attr))
    assert set(policy.state_dict()) == keys  # a checkpoint saved from a traced policy has the same keys


def test_weights_loaded_after_tracing_reach_the_trace_and_training_untraces() -> None:
    policy = make("flow").eval()
    other = make("flow").eval()
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    obs = {"obs.state": batch(b=3)["obs.state"]}
    expected = other.predict_chunk(obs, seed=[1, 2, 3])
    policy.trace_networks()
    before = policy.predict_chunk(obs, seed=[1, 2, 3])
    policy.load_state_dict(other.state_dict())  # in place: the trace holds the same parameter tensors
    assert is_traced(policy.velocity)
    np.testing.assert_allclose(policy.predict_chunk(obs, seed=[1, 2, 3]), expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(before, expected)
    policy.train()
    assert not is_traced(policy.velocity)  # training runs the module's own forward (dropout and all)
    loss = policy.compute_loss(batch(b=3))
    loss.backward()
    assert policy.velocity.head[1].weight.grad is not None


def test_the_failure_generator_is_traced_and_guidance_keeps_its_chunks() -> None:
    torch.manual_seed(0)
    policy = build_policy(
        "flow",
        {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4, "inference_steps": 3,
         "failure_guidance": {"scale": 1.0}},
        {"obs.state": (2, 5)},
        3,
    ).eval()  # fmt: skip
    obs = {"obs.state": np.random.default_rng(1).normal(size=(4, 2, 5)).astype(np.float32)}
    eager = policy.predict_chunk(obs, seed=[5, 6, 7, 8])
    policy.trace_networks()
    np.testing.assert_allclose(policy.predict_chunk(obs, seed=[5, 6, 7, 8]), eager, rtol=1e-5, atol=1e-5)
    assert policy.failure_generator is not None and is_traced(policy.failure_generator)


class _BatchBakedIn(nn.Module):
    """A network whose trace would keep its first batch size: ``int()`` of a shape is a constant to a tracer."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = int(x.shape[0])
        return x * self.scale + torch.arange(rows, dtype=x.dtype)[:, None]


def test_a_network_whose_trace_would_not_serve_other_batch_sizes_stays_eager(
    caplog: pytest.LogCaptureFixture,
) -> None:
    network = _BatchBakedIn().eval()
    trace_on_first_call(network)
    with caplog.at_level(logging.WARNING):
        first = network(torch.zeros(2, 3))
    assert not is_traced(network)
    assert "_BatchBakedIn stays eager" in caplog.text
    np.testing.assert_array_equal(first.detach().numpy(), [[0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(network(torch.zeros(3, 1)).detach().numpy(), [[0], [1], [2]])
