"""ReGuide: latent dynamics, phase targets, the drift-band gate, persistence and the guided chunk source."""

from __future__ import annotations

from collections import deque
from pathlib import Path

import numpy as np
import pytest
import torch

from vla_recover.data.schema import EpisodeData
from vla_recover.data.store import EpisodeStore
from vla_recover.fleet.guided import GuidedChunks
from vla_recover.fleet.inference import PolicyChunks
from vla_recover.policies import Policy, build_policy
from vla_recover.policies.common.checkpoint import Checkpoint, save_policy
from vla_recover.train.reguide import (
    DynamicsConfig,
    PhaseConfig,
    PhaseTargets,
    ReGuide,
    ReGuideConfig,
    build_reguide,
    kmeans,
    train_dynamics,
)

WAYPOINTS = np.array([[0.8, 0.0, 0.0], [0.8, 0.8, 0.0], [0.0, 0.8, 0.6]])
SMALL = {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4, "inference_steps": 4}
CONFIG = ReGuideConfig(
    scale=1.0,
    guided_steps=2,
    phases=PhaseConfig(clusters_per_phase=4, prototypes_per_phase=40),
    dynamics=DynamicsConfig(hidden=(64, 64), steps=1500, batch_size=256, lr=3e-3),
)


def episode(rng: np.random.Generator, noise: float, outcome: str) -> EpisodeData:
    """A linear system: state = (position, last action), position += 0.1·action; three reach-phases."""
    x, last, phase = rng.normal(0.0, 0.05, 3), np.zeros(3), 0
    states, actions, phases = [], [], []
    for _ in range(60):
        if phase < 2 and np.linalg.norm(WAYPOINTS[phase] - x) < 0.1:
            phase += 1
        a = np.clip((WAYPOINTS[phase] - x) * 3.0, -1.0, 1.0) + rng.normal(0.0, noise, 3)
        states.append(np.concatenate([x, last]))
        actions.append(a)
        phases.append(phase)
        x, last = x + 0.1 * a, a
    steps: dict[str, np.ndarray] = {
        "obs.state": np.asarray(states, np.float32),
        "action": np.asarray(actions, np.float32),
        "phase": np.asarray(phases, np.int8),
    }
    return EpisodeData(task="reach", steps=steps, outcome=outcome)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> EpisodeStore:
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("reguide") / "store"
    with EpisodeStore(path, mode="a") as s:
        s.append_episodes([episode(rng, 0.1, "success") for _ in range(24)])
        s.append_episodes([episode(rng, 0.6, "failure") for _ in range(6)])
    return EpisodeStore(path)


def make_policy(name: str, store: EpisodeStore) -> Policy:
    torch.manual_seed(0)
    policy = build_policy(name, SMALL, {"obs.state": (6,)}, 3)
    policy.fit_normalizer({"obs.state": store.read("obs.state"), "action": store.read("action")})
    return policy.eval()


@pytest.fixture(scope="module")
def built(store: EpisodeStore) -> tuple[Policy, ReGuide]:
    policy = make_policy("diffusion", store)
    return policy, build_reguide(store, policy, CONFIG)


def test_dynamics_learns_a_linear_system(built: tuple[Policy, ReGuide], store: EpisodeStore) -> None:
    policy, guide = built
    metrics = guide.metrics
    z = policy.normalizer.normalize("obs.state", torch.as_tensor(store.read("obs.state")))
    assert metrics["windows"] == 30 * (60 - 4)  # windows crossing an episode end are skipped
    assert metrics["val_mse"] < 0.05 * float(z.var(0).mean())
    assert metrics["val_mse"] < 0.2 * metrics["val_identity_mse"]
    _, again = train_dynamics(store, policy, CONFIG.dynamics)
    assert again["val_mse"] == metrics["val_mse"]  # seeded


def test_kmeans_and_phase_targets_on_synthetic_clusters() -> None:
    rng = np.random.default_rng(1)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    points = np.concatenate([c + rng.normal(0, 0.2, (300, 2)) for c in centres]).astype(np.float32)
    labels = np.repeat([0, 2, 5], 300)  # phase ids need not be contiguous
    found, assignment = kmeans(points, 3, 50, seed=0)
    assert np.allclose(np.sort(found[:, 0]), np.sort(centres[:, 0]), atol=0.1)
    assert len(np.unique(assignment)) == 3

    config = PhaseConfig(clusters_per_phase=5, prototypes_per_phase=50, tau=0.05)
    targets = PhaseTargets.fit(points, labels, config)
    assert targets.phase_ids.tolist() == [0, 2, 5]
    assert targets.prototypes.shape == (3, 50, 2) and bool(targets.mask.all())
    assert bool((targets.thresholds[:, 0] < targets.thresholds[:, 1]).all())
    phase, _ = targets.current_phase(torch.as_tensor(points))
    assert (phase.numpy() == labels).mean() > 0.97
    far = torch.tensor([[1.5, 1.5]])
    assert float(targets.distance(far, 0)) > float(targets.thresholds[0, 1])
    at_prototype = targets.prototypes[0, :1].clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(targets.distance(at_prototype, 0).sum(), at_prototype)
    assert bool(torch.isfinite(grad).all())
    with pytest.raises(ValueError, match="phase"):
        targets.distance(far, 1)


def band_batch(guide: ReGuide, store: EpisodeStore) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Observation windows whose latest states are in-band, below-band and above-band, in that mix."""
    rng = np.random.default_rng(2)
    states = store.read("obs.state")[rng.choice(store.n_steps, 400)]
    candidates = np.concatenate([states + rng.normal(0, s, states.shape) for s in (0.0, 0.03, 0.08, 0.5)])
    z = guide.latent(torch.as_tensor(candidates, dtype=torch.float32))
    phase, distance, active = guide.drift(z)
    below = distance <= guide.targets.lower(phase)
    pick = {"in": np.flatnonzero(active)[:4], "below": np.flatnonzero(below)[:2],
            "above": np.flatnonzero(~active & ~below)[:2]}  # fmt: skip
    assert all(len(v) == want for v, want in zip(pick.values(), (4, 2, 2), strict=True)), pick
    order = np.array([pick["below"][0], pick["in"][0], pick["above"][0], pick["in"][1],
                      pick["below"][1], pick["in"][2], pick["above"][1], pick["in"][3]])  # fmt: skip
    latest = candidates[order].astype(np.float32)
    expected = np.array([False, True, False, True, False, True, False, True])
    return {"obs.state": np.repeat(latest[:, None], 2, axis=1)}, expected


@pytest.mark.parametrize("name", ["diffusion", "flow"])
def test_guidance_changes_actions_only_inside_the_drift_band(
    name: str, built: tuple[Policy, ReGuide], store: EpisodeStore
) -> None:
    guide = built[1]
    policy = make_policy(name, store)
    batch, expected = band_batch(guide, store)
    plain = policy.predict_chunk(batch, seed=7)
    guided, active = guide.predict_chunk(policy, batch, seed=7)
    assert active.tolist() == expected.tolist()
    assert np.array_equal(guided[~active], plain[~active])  # bit-identical outside the band
    assert all(not np.array_equal(guided[i], plain[i]) for i in np.flatnonzero(active))

    z = guide.latent(torch.as_tensor(batch["obs.state"][:, -1]))
    phase, _, _ = guide.drift(z)
    with torch.no_grad():
        losses = [guide.loss(z, guide.normalizer.normalize("action", torch.as_tensor(a)), phase)[active]
                  for a in (plain, guided)]  # fmt: skip
    assert float(losses[1].mean()) < float(losses[0].mean())


def test_hook_is_zero_off_band_and_before_the_guided_steps(built: tuple[Policy, ReGuide], store: EpisodeStore) -> None:
    guide = built[1]
    batch, expected = band_batch(guide, store)
    z = guide.latent(torch.as_tensor(batch["obs.state"][:, -1]))
    phase, _, active = guide.drift(z)
    assert guide.hook(z, phase, torch.zeros_like(active), n_steps=4) is None
    hook = guide.hook(z, phase, active, n_steps=4)
    assert hook is not None
    clean = torch.randn(len(expected), 8, 3)
    assert hook(1, clean, clean) is None  # steps 2 and 3 are the last guided_steps=2
    term = hook(3, clean, clean)
    assert term is not None and term.shape == clean.shape
    assert bool((term[~active] == 0).all()) and bool((term[active, :4].abs().sum((1, 2)) > 0).all())


def test_save_load_round_trip(built: tuple[Policy, ReGuide], store: EpisodeStore, tmp_path: Path) -> None:
    policy, guide = built
    loaded = ReGuide.load(guide.save(tmp_path / "guide"))
    assert loaded.config == guide.config and loaded.metrics == guide.metrics
    batch, _ = band_batch(guide, store)
    first, first_active = guide.predict_chunk(policy, batch, seed=3)
    second, second_active = loaded.predict_chunk(policy, batch, seed=3)
    assert np.array_equal(first, second) and np.array_equal(first_active, second_active)


def test_bad_inputs_raise_naming_the_field(built: tuple[Policy, ReGuide], store: EpisodeStore) -> None:
    policy = built[0]
    image_only = build_policy("diffusion", {**SMALL, "state_key": None, "image_keys": ["obs.images.front"],
                                            "image_crop": 16}, {"obs.images.front": (20, 20, 3)}, 3)  # fmt: skip
    with pytest.raises(ValueError, match="state_key"):
        build_reguide(store, image_only, CONFIG)
    failures = [row.id for row in store.episodes(outcome="failure")]
    with pytest.raises(ValueError, match="outcome"):
        build_reguide(store, policy, CONFIG, episode_ids=failures)
    with pytest.raises(ValueError, match="lower_percentile"):
        ReGuideConfig(phases={"lower_percentile": 90, "upper_percentile": 30})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="phases"):
        build_reguide(store, policy, CONFIG, phases=np.zeros(5, dtype=np.int8))


def test_guided_chunks_source(built: tuple[Policy, ReGuide], store: EpisodeStore, tmp_path: Path) -> None:
    policy, guide = built
    policy_dir = save_policy(policy, tmp_path / "policy")
    guide_dir = guide.save(tmp_path / "guide")
    batch, expected = band_batch(guide, store)
    windows = [deque({"state": s} for s in window) for window in batch["obs.state"]]
    source = GuidedChunks(policy_dir, guide_dir)
    assert source.actor == "guided" and source.obs_keys == ("state",) and source.action_exec == 4
    chunks = source.predict(windows, [""] * len(windows))
    plain = PolicyChunks(policy_dir).predict(windows, [""] * len(windows))  # same first-call seed
    assert chunks.shape == (8, 8, 3)
    assert source.chunks == 8 and source.guided_chunks == int(expected.sum())
    assert np.array_equal(chunks[~expected], plain[~expected])
    assert not np.array_equal(chunks[expected], plain[expected])
    # the loop builds the guidance on a policy it loaded and hands that same policy to the fleet's source
    checkpoint = Checkpoint.open(policy_dir)
    loaded = checkpoint.load()
    shared = GuidedChunks(checkpoint, guide_dir, loaded=loaded)
    assert shared.policy is loaded[0] and shared.version == checkpoint.version == source.version
