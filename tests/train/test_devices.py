"""Devices: names checked in configs, refused at a job's start when absent, and every tensor a policy makes placed
where its weights are (checked on PyTorch's meta device, which refuses a CPU tensor as CUDA does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from tests.train.test_train import lift_store, small_config  # noqa: F401  (the module's store fixture)
from vla_recover.critic.train import CriticTrainConfig, train_critic
from vla_recover.devices import autocast, available_devices, resolve_device
from vla_recover.fleet.inference import PolicyChunks
from vla_recover.policies import build_policy
from vla_recover.train.prefetch import Prefetcher
from vla_recover.train.trainer import TrainConfig, Trainer


def test_a_device_name_is_checked_by_spelling_and_refused_at_start_when_absent(
    lift_store: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    with pytest.raises(ValidationError, match=r"(?s)device.*'gpu'.*auto"):
        TrainConfig.model_validate({"device": "gpu"})
    config = small_config(lift_store, tmp_path / "run", device="cuda:7")  # valid spelling: no probing in configs
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert available_devices()[0] == "cpu"
    if torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(ValueError, match=r"device: 'cuda:7' is not available on this machine; available: cpu"):
        Trainer(config)
    assert not (tmp_path / "run").exists()  # refused before anything was written
    with pytest.raises(ValueError, match="'cuda:7' is not available"):
        train_critic(lift_store, tmp_path / "critic", CriticTrainConfig(device="cuda:7", steps=1))
    with pytest.raises(ValueError, match="'cuda:7' is not available"):
        PolicyChunks(tmp_path / "missing", device="cuda:7")


@pytest.mark.parametrize(
    ("name", "extra"),
    [
        ("flow", {}),
        ("flow", {"backbone": "transformer", "transformer_dim": 32, "transformer_layers": 1}),
        ("diffusion", {"inference_steps": 3}),
        ("flow", {"time_sampling": "beta"}),
    ],
)
def test_a_policy_makes_its_tensors_on_its_own_device(name: str, extra: dict[str, object]) -> None:
    config = {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4, **extra}
    policy = build_policy(name, config, {"obs.state": (6,)}, 3).to("meta")
    assert policy.device.type == "meta"
    batch = {
        "obs.state": torch.zeros(4, 2, 6, device="meta"),
        "action": torch.zeros(4, 8, 3, device="meta"),
        "action_is_pad": torch.zeros(4, 8, dtype=torch.bool, device="meta"),
    }
    loss = policy.compute_loss(batch)  # a tensor made on the CPU inside would be refused here
    assert loss.device.type == "meta" and loss.shape == ()
    cond = policy.encode_obs(batch)
    seeds = [torch.Generator().manual_seed(row) for row in range(4)]
    chunks = policy.sample_actions(cond, seeds, None)
    assert chunks.device.type == "meta" and tuple(chunks.shape) == (4, 8, 3)


def test_noise_is_drawn_the_same_whatever_the_device() -> None:
    from vla_recover.policies.common.base import draw_noise

    on_cpu = draw_noise((2, 8, 3), [torch.Generator().manual_seed(s) for s in (3, 4)], torch.device("cpu"))
    moved = draw_noise((2, 8, 3), [torch.Generator().manual_seed(s) for s in (3, 4)], torch.device("meta"))
    assert moved.device.type == "meta" and moved.shape == on_cpu.shape
    again = draw_noise((2, 8, 3), [torch.Generator().manual_seed(s) for s in (3, 4)])
    assert torch.equal(on_cpu, again)


def test_bf16_autocast_applies_on_cuda_only() -> None:
    with autocast(torch.device("cpu"), bf16=True):
        out = torch.nn.Linear(4, 4)(torch.ones(1, 4))
    assert out.dtype == torch.float32  # the CPU trains in full precision whatever the switch says


def test_drawing_batches_ahead_trains_and_resumes_as_drawing_in_line(
    lift_store: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    in_line = Trainer(small_config(lift_store, tmp_path / "in_line", prefetch=0))
    expected = [in_line.train_step() for _ in range(12)]
    ahead = Trainer(small_config(lift_store, tmp_path / "ahead", prefetch=3))
    head = [ahead.train_step() for _ in range(6)]
    ahead.save_checkpoint()  # three batches are drawn ahead of step 6 by now
    ahead._batches.close()
    resumed = Trainer(small_config(lift_store, tmp_path / "ahead", prefetch=3))
    assert resumed.resume() and resumed.step == 6
    assert head + [resumed.train_step() for _ in range(6)] == expected


def test_a_closed_prefetcher_rewinds_its_sampler_to_the_first_batch_not_handed_out() -> None:
    rng = np.random.default_rng(0)

    def restore(state: dict[str, Any]) -> None:
        rng.bit_generator.state = state

    in_line = np.random.default_rng(0)
    expected = [in_line.random() for _ in range(2)]
    after_two = in_line.bit_generator.state
    expected += [in_line.random() for _ in range(3)]
    ahead = Prefetcher(rng.random, lambda: rng.bit_generator.state, restore, depth=3)
    handed = [ahead.next(), ahead.next()]
    ahead.close()  # up to three more were drawn ahead and are dropped
    assert ahead.state() == after_two  # what a checkpoint taken now saves
    assert handed + [ahead.next() for _ in range(3)] == expected
    ahead.close()
