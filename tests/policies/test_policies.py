"""Contract tests parametrised over every registered policy.

``lerobot_diffusion`` runs where LeRobot is installed: test_lerobot_adapter.py runs this file in .venv-lerobot.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vla_recover.config import ConfigError
from vla_recover.policies import POLICIES, Policy, build_policy
from vla_recover.policies.common.checkpoint import Checkpoint, checkpoint_version, load_policy, save_policy
from vla_recover.policies.common.encoders import SentenceEmbedder

NAMES = POLICIES.names()
SHAPES = {"obs.state": (6,)}
SMALL = {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4, "inference_steps": 3}
# what a policy needs beyond SMALL to be built on SHAPES
EXTRA: dict[str, dict[str, object]] = {"lerobot_diffusion": {"environment_state_dims": 2}}


def make(name: str, **overrides: object) -> Policy:
    if name.startswith("lerobot"):
        pytest.importorskip("lerobot", reason="LeRobot is not installed here (see test_lerobot_adapter.py)")
    torch.manual_seed(0)
    policy = build_policy(name, {**SMALL, **EXTRA.get(name, {}), **overrides}, SHAPES, 3)
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs.state": rng.normal(size=(50, 6)), "action": rng.uniform(-2, 2, size=(50, 3))})
    return policy


def batch(b: int = 4, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "obs.state": torch.randn(b, 2, 6, generator=g),
        "action": torch.rand(b, 8, 3, generator=g) * 4 - 2,
        "action_is_pad": torch.zeros(b, 8, dtype=torch.bool),
    }


@pytest.mark.parametrize("backbone", ["unet", "transformer"])
@pytest.mark.parametrize("name", NAMES)
def test_predict_chunk_shapes_and_determinism(name: str, backbone: str) -> None:
    if name.startswith("lerobot") and backbone != "unet":
        pytest.skip("LeRobot's diffusion policy has one backbone")
    policy = make(name, backbone=backbone)
    obs = {"obs.state": batch()["obs.state"]}
    first = policy.predict_chunk(obs, seed=3)
    assert first.shape == (4, 8, 3)
    assert np.array_equal(first, policy.predict_chunk(obs, seed=3))
    assert not np.array_equal(first, policy.predict_chunk(obs, seed=4))


@pytest.mark.parametrize("name", NAMES)
def test_a_seed_per_row_makes_each_chunk_independent_of_its_batch(name: str) -> None:
    policy = make(name)
    state = batch(b=4)["obs.state"]
    together = policy.predict_chunk({"obs.state": state}, seed=[10, 11, 12, 13])
    reordered = policy.predict_chunk({"obs.state": state[[2, 0]]}, seed=[12, 10])
    alone = policy.predict_chunk({"obs.state": state[[1]]}, seed=[11])
    np.testing.assert_allclose(reordered, together[[2, 0]], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(alone[0], together[1], rtol=1e-5, atol=1e-5)
    # one seed for the whole batch draws one stream across its rows, so a row's chunk depends on the rows before it
    shared = policy.predict_chunk({"obs.state": state}, seed=10)
    assert not np.allclose(shared[1], policy.predict_chunk({"obs.state": state[[1]]}, seed=10)[0])
    with pytest.raises(ValueError, match="seed: got 3 seeds for a batch of 4"):
        policy.predict_chunk({"obs.state": state}, seed=[1, 2, 3])


@pytest.mark.parametrize("name", NAMES)
def test_save_load_round_trip_is_bit_exact(name: str, tmp_path: Path) -> None:
    policy = make(name)
    embedder = SentenceEmbedder({"lift the cube": np.ones(384, np.float32)})
    save_policy(policy, tmp_path / "p", embedder)
    loaded, loaded_embedder, config = load_policy(tmp_path / "p")
    obs = {"obs.state": batch()["obs.state"]}
    assert np.array_equal(policy.predict_chunk(obs, seed=1), loaded.predict_chunk(obs, seed=1))
    assert config["policy"] == name and loaded_embedder.cache.keys() == {"lift the cube"}
    assert not list(tmp_path.glob("p/*.pt")) and not list(tmp_path.glob("p/*.pkl"))


def test_a_checkpoint_is_read_once_and_loads_a_new_policy_each_time(tmp_path: Path) -> None:
    save_policy(make("diffusion"), tmp_path / "run" / "policy", name="run")
    checkpoint = Checkpoint.open(tmp_path / "run" / "policy")
    assert checkpoint.version == checkpoint_version(checkpoint.path)
    assert checkpoint.version.startswith("run-")
    first, _ = checkpoint.load()
    second, _ = checkpoint.load(device="cpu")
    assert first is not second and not first.training
    with torch.no_grad():
        next(first.parameters()).add_(1.0)  # fine-tuning one load leaves the next untouched
    assert not torch.equal(next(first.parameters()), next(second.parameters()))
    with pytest.raises(FileNotFoundError, match="the training run's policy is"):
        Checkpoint.open(tmp_path / "run")
    (tmp_path / "critic").mkdir()
    (tmp_path / "critic" / "config.json").write_text('{"kind": "progress_critic"}')
    with pytest.raises(ValueError, match="a progress_critic checkpoint"):
        Checkpoint.open(tmp_path / "critic")


@pytest.mark.parametrize("name", NAMES)
def test_all_zero_weights_raise_clearly(name: str) -> None:
    with pytest.raises(ValueError, match="weights: all zero"):
        make(name).compute_loss(batch(), torch.zeros(4))
    with pytest.raises(ValueError, match=r"weights: expected shape \(4,\)"):
        make(name).compute_loss(batch(), torch.ones(3))


def _grads(policy: torch.nn.Module, weights: torch.Tensor) -> torch.Tensor:
    policy.zero_grad()
    torch.manual_seed(7)  # same noise and diffusion times on every call
    policy.compute_loss(batch(), weights).backward()
    return torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])


@pytest.mark.parametrize("name", NAMES)
def test_weights_scale_each_samples_gradient(name: str) -> None:
    policy = make(name)
    e0, e1 = torch.tensor([1.0, 0, 0, 0]), torch.tensor([0, 1.0, 0, 0])
    g0, g1 = _grads(policy, e0), _grads(policy, e1)
    torch.testing.assert_close(_grads(policy, 3 * e0), 3 * g0, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(_grads(policy, e0 + 2 * e1), g0 + 2 * g1, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(g0, g1)


@pytest.mark.parametrize("name", NAMES)
def test_padded_actions_do_not_count(name: str) -> None:
    policy = make(name)
    data = batch()
    data["action_is_pad"][:, 4:] = True
    per_element = torch.ones(4, 8, 3)
    per_element[:, 4:] = 1000.0  # what a garbage padded target would cost
    assert float(policy._weighted(per_element, data, None)) == pytest.approx(1.0)
    assert float(policy._weighted(per_element, data, torch.tensor([2.0, 0, 0, 0]))) == pytest.approx(0.5)


class _Zero(torch.nn.Module):
    def forward(self, sample: torch.Tensor, *conditioning: object, **named: object) -> torch.Tensor:
        return torch.zeros_like(sample)


def swap_backbone(policy: Policy, net: torch.nn.Module) -> None:
    parent, _, attr = policy.backbone_attr.rpartition(".")
    setattr(policy.get_submodule(parent), attr, net)


def test_ddim_glue_matches_the_closed_form() -> None:
    """With a zero noise prediction each DDIM step rescales x by sqrt(a_prev / a_t); clip_sample clamps x0_hat."""
    policy = make("diffusion", clip_sample=False, inference_steps=4)
    policy.denoiser = _Zero()
    x_t = torch.randn((1, 8, 3), generator=torch.Generator().manual_seed(5))
    scheduler = policy.sample_scheduler
    scheduler.set_timesteps(4)
    expected = x_t.clone()
    alphas = scheduler.alphas_cumprod
    timesteps = scheduler.timesteps.tolist()
    for i, t in enumerate(timesteps):
        prev = alphas[timesteps[i + 1]] if i + 1 < len(timesteps) else scheduler.final_alpha_cumprod
        expected = expected * (prev / alphas[t]).sqrt()
    got = policy.sample_actions(torch.zeros(1, policy.cond_dim), torch.Generator().manual_seed(5), None)
    torch.testing.assert_close(got, expected)
    assert timesteps == [75, 50, 25, 0]


@pytest.mark.parametrize("name", NAMES)
def test_guidance_hook_sees_every_step_and_steers_the_sample(name: str) -> None:
    no_clip = {"diffusion": {"clip_sample": False}, "lerobot_diffusion": {"lerobot_config": {"clip_sample": False}}}
    policy = make(name, inference_steps=4, **no_clip.get(name, {}))
    swap_backbone(policy, _Zero())
    target = torch.full((1, 8, 3), 0.5)
    seen: list[int] = []

    def pull(step: int, noisy: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
        seen.append(step)
        assert noisy.shape == clean.shape == (1, 8, 3)
        return target - clean

    guided = policy.sample_actions(torch.zeros(1, policy.cond_dim), torch.Generator().manual_seed(0), pull)
    assert seen == [0, 1, 2, 3]
    torch.testing.assert_close(guided, target, atol=1e-4, rtol=0)


def test_bad_policy_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="inference_steps"):
        build_policy("flow", {"inference_steps": 0}, SHAPES, 3)
    with pytest.raises(ConfigError, match="divisible"):
        build_policy("diffusion", {"action_horizon": 10, "down_dims": [16, 32, 64]}, SHAPES, 3)
    with pytest.raises(KeyError, match="valid choices: diffusion, flow, lerobot_diffusion"):
        build_policy("act", {}, SHAPES, 3)
