"""The GEMM-lowered convolution computes what torch's convolution computes, values and gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from vla_recover.policies.common.unet1d import GemmConv1d


@pytest.mark.parametrize(
    ("c_in", "c_out", "kernel", "bias"),
    [(256, 64, 5, True), (160, 32, 5, False), (512, 128, 1, True), (8, 16, 5, True)],  # last: stock path
)
def test_gemm_conv_matches_torch_conv(c_in: int, c_out: int, kernel: int, bias: bool) -> None:
    torch.manual_seed(0)
    conv = GemmConv1d(c_in, c_out, kernel, padding=kernel // 2, bias=bias)
    x = torch.randn(3, c_in, 8, requires_grad=True)
    ours = conv(x)
    reference = F.conv1d(x, conv.weight, conv.bias, padding=kernel // 2)
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)

    upstream = torch.randn_like(ours)
    grads = torch.autograd.grad(ours, [x, conv.weight], upstream)
    reference_grads = torch.autograd.grad(reference, [x, conv.weight], upstream)
    for got, expected in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)


def test_gemm_conv_keeps_the_stock_state_dict() -> None:
    assert GemmConv1d(256, 64, 5).state_dict().keys() == torch.nn.Conv1d(256, 64, 5).state_dict().keys()


@pytest.mark.slow
def test_compiled_backbone_predicts_what_the_eager_one_does() -> None:
    from tests.policies.test_policies import batch, make

    policy = make("flow")
    obs = {"obs.state": batch()["obs.state"]}
    eager = policy.predict_chunk(obs, seed=0)
    policy.compile_backbone()
    np.testing.assert_allclose(policy.predict_chunk(obs, seed=0), eager, rtol=1e-4, atol=1e-4)
    assert "velocity.head.1.weight" in policy.state_dict()  # compiling in place keeps the checkpoint keys
