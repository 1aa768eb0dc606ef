"""The second generators' data: which steps train AFIL's failure generator (at what share) and EgoRecovery's recovery
head, how a fine-tune starts them, and the recovery gate trained beside the head."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vla_recover.data import EpisodeData, EpisodeStore
from vla_recover.data.schema import ACTORS
from vla_recover.policies.common.checkpoint import load_policy
from vla_recover.policies.common.recovery_head import RecoveryHeadConfig
from vla_recover.train.dataset import DatasetConfig, build_step_weights, failed_steps, with_failures
from vla_recover.train.steps import build_step_table
from vla_recover.train.trainer import TrainConfig, Trainer

POLICY = {"obs_horizon": 2, "action_horizon": 8, "action_exec": 4, "down_dims": [16, 32], "inference_steps": 2}
HITL = {"retention": "interventions", "shares": {"demos": 1.0, "human": 1.0}}


def _episode(actors: list[str], outcome: str, supervision: list[tuple[int, int, str]], seed: int) -> EpisodeData:
    rng = np.random.default_rng(seed)
    n = len(actors)
    return EpisodeData(
        task="LiftCube",
        steps={
            "obs.state": np.cumsum(rng.normal(size=(n, 3)), axis=0).astype(np.float32),
            "action": rng.normal(size=(n, 2)).astype(np.float32),
        },
        outcome=outcome,
        actor=actors,
        segments=supervision,
    )


@pytest.fixture
def store(tmp_path: Path) -> EpisodeStore:
    """A demonstration (rows 0-19), a rescued episode (20-59: the policy fails at rows 30-39 of the store, a human
    corrects), a plain failure (60-79), with the critic's segments on the two fleet episodes."""
    with EpisodeStore(tmp_path / "s", mode="a") as s:
        s.append_episode(_episode(["scripted"] * 20, "success", [], 0))
        rescued = ["policy"] * 20 + ["human"] * 12 + ["policy"] * 8
        s.append_episode(
            _episode(rescued, "success", [(0, 20, "autonomous"), (20, 32, "intervention"), (32, 40, "autonomous")], 1)
        )
        s.append_episode(_episode(["policy"] * 20, "failure", [(0, 20, "autonomous")], 2))
        critic = {1: [(0, 10, "progress"), (10, 20, "failure_inducing"), (20, 40, "recovery")],
                  2: [(0, 5, "progress"), (5, 15, "failure_inducing"), (15, 20, "idle")]}  # fmt: skip
        for episode, segments in critic.items():
            scored = [(start, stop, kind, None) for start, stop, kind in segments]
            s.write_segments(episode, "critic", scored, actor="test", event="labels_written", payload={})
    return EpisodeStore(tmp_path / "s")


def test_the_failure_generator_learns_the_policy_steps_the_critic_calls_failure_inducing(store: EpisodeStore) -> None:
    config = DatasetConfig(**HITL, failures="critic")
    expected = np.zeros(store.n_steps, dtype=bool)
    expected[30:40] = expected[65:75] = True
    np.testing.assert_array_equal(failed_steps(store, build_step_table(store), config), expected)
    only_first = failed_steps(store, build_step_table(store, episodes=[0, 1]), config)
    assert only_first[30:40].all() and not only_first[60:].any()  # an excluded episode teaches nothing
    weights, _ = build_step_weights(store, config)
    mixed, failure, stats = with_failures(store, weights, config)
    np.testing.assert_array_equal(failure, expected)
    assert stats == {"failures": "critic", "failure_steps": 20}
    assert mixed[failure].sum() == pytest.approx(0.25 * weights.sum())  # failure_share of the total weight
    assert mixed.sum() == pytest.approx(weights.sum())
    np.testing.assert_allclose(mixed[~failure], 0.75 * weights[~failure])  # the rest keep their ratios


def test_failures_without_segments_or_without_a_match_are_named(store: EpisodeStore, tmp_path: Path) -> None:
    config = DatasetConfig(**HITL, failures="critic", failure_kinds=("idle",))
    weights, _ = build_step_weights(store, config)
    _, failure, _ = with_failures(store, weights, config)
    assert failure.sum() == 5 and failure[75:80].all()
    with pytest.raises(ValueError, match=r"failure_kinds: got \['stalled'\]"):
        DatasetConfig(failures="critic", failure_kinds=("stalled",))
    with pytest.raises(ValueError, match="lies in a"):
        with_failures(store, weights, config, episodes=[0])
    with EpisodeStore(tmp_path / "bare", mode="a") as bare:
        bare.append_episode(_episode(["policy"] * 10, "failure", [(0, 10, "autonomous")], 3))
    with EpisodeStore(tmp_path / "bare") as bare, pytest.raises(ValueError, match=r"failures: episode 0 .* no critic"):
        with_failures(bare, np.ones(10, np.float32), DatasetConfig(failures="critic"))


def _config(store: EpisodeStore, out: Path, **fields: object) -> TrainConfig:
    raw = {"policy": "flow", "policy_config": POLICY, "data": store.path, "out": out, "steps": 4, "batch_size": 16,
           "warmup_steps": 1, "save_every": 4, "log_every": 2, **fields}  # fmt: skip
    return TrainConfig.model_validate(raw)


def test_a_failure_generator_and_its_data_come_together(store: EpisodeStore, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"weighting\.failures: got 'critic' for a policy without"):
        _config(store, tmp_path, weighting={**HITL, "failures": "critic"})
    with pytest.raises(ValueError, match=r"weighting\.failures: got 'none' for a policy with"):
        _config(store, tmp_path, policy_config={**POLICY, "failure_guidance": {}})


def test_fine_tuning_a_plain_policy_starts_its_failure_generator_as_a_copy(store: EpisodeStore, tmp_path: Path) -> None:
    Trainer(_config(store, tmp_path / "base")).run()
    afil = _config(
        store, tmp_path / "afil", init_from=tmp_path / "base" / "policy",
        policy_config={**POLICY, "failure_guidance": {"scale": 0.5}}, weighting={**HITL, "failures": "critic"},
    )  # fmt: skip
    trainer = Trainer(afil)
    own, failure = trainer.policy.velocity.state_dict(), trainer.policy.failure_generator
    assert failure is not None
    for key, value in failure.state_dict().items():
        torch.testing.assert_close(value, own[key])
    batch, _ = trainer._batch()
    rows = batch["failure"]
    assert 0 < int(rows.sum()) < len(rows)
    trainer.run()
    policy, _, saved = load_policy(tmp_path / "afil" / "policy")
    assert saved["config"]["failure_guidance"]["scale"] == 0.5 and policy.failure_generator is not None
    chunk = policy.predict_chunk({"obs.state": np.zeros((1, 2, 3), np.float32)}, seed=0)
    assert chunk.shape == (1, 8, 2) and np.isfinite(chunk).all()
    # and back: a plain fine-tune of the AFIL checkpoint keeps its own generator and drops the failure one
    plain = Trainer(_config(store, tmp_path / "plain", init_from=tmp_path / "afil" / "policy"))
    assert plain.policy.failure_generator is None
    for key, value in plain.policy.velocity.state_dict().items():
        torch.testing.assert_close(value, policy.velocity.state_dict()[key])


def test_a_recovery_head_learns_the_corrections_and_its_gate_the_recorded_failures(tmp_path: Path) -> None:
    with EpisodeStore(tmp_path / "fleet", mode="a") as s:
        s.append_episode(_episode(["scripted"] * 20, "success", [], 0))
        for seed in range(1, 9):  # the policy fails at rows 8-14 (recoverably), a human corrects from row 15
            episode = _episode(
                ["policy"] * 15 + ["human"] * 10 + ["policy"] * 5,
                "success",
                [(0, 15, "autonomous"), (15, 25, "intervention"), (25, 30, "autonomous")],
                seed,
            )
            failure = {"kind": "slip", "onset_row": 8, "end_row": 15, "recoverable_at_onset": True}
            s.append_episode(EpisodeData(**{**episode.__dict__, "info": {"failures": [failure]}}))
    store = EpisodeStore(tmp_path / "fleet")
    Trainer(_config(store, tmp_path / "base")).run()
    recovery = {"gate_hidden": [16], "gate_steps": 200}
    trainer = Trainer(_config(
        store, tmp_path / "gated", init_from=tmp_path / "base" / "policy", weighting=HITL,
        policy_config={**POLICY, "recovery": recovery},
    ))  # fmt: skip
    head = trainer.policy.recovery_generator
    assert head is not None
    for key, value in head.state_dict().items():
        torch.testing.assert_close(value, trainer.policy.velocity.state_dict()[key])
    assert trainer.weight_stats["recovery_gate"]["fit_needs_correction"] > 0
    human = store.read("actor") == ACTORS.index("human")
    torch.manual_seed(0)
    batch, weights = trainer._batch()
    # every correction window trains the nominal generator and, as a flagged copy, the head
    flagged = batch["recovery"]
    assert len(flagged) == len(weights) == 16 + int(flagged.sum()) and not flagged[:16].any() and flagged[16:].all()
    originals = batch["obs.state"][:16]
    assert any(torch.equal(copy, row) for copy in batch["obs.state"][16:] for row in originals)
    trainer.run()
    policy, _, _ = load_policy(tmp_path / "gated" / "policy")
    assert policy.recovery_gate is not None
    np.testing.assert_allclose(
        float(policy.recovery_gate.threshold), trainer.weight_stats["recovery_gate"]["threshold"]
    )
    assert np.array_equal(trainer.recovery, human)
    chunk = policy.predict_chunk({"obs.state": np.zeros((2, 2, 3), np.float32)}, seed=[0, 1])
    assert chunk.shape == (2, 8, 2) and np.isfinite(chunk).all()
    only_head = Trainer(_config(
        store, tmp_path / "only_head", init_from=tmp_path / "base" / "policy", weighting=HITL,
        policy_config={**POLICY, "recovery": {**recovery, "nominal_learns_corrections": False}},
    ))  # fmt: skip
    batch, _ = only_head._batch()
    assert len(batch["recovery"]) == 16 and batch["recovery"].any()  # corrections train the head alone
    by_gate = Trainer(_config(
        store, tmp_path / "by_gate", init_from=tmp_path / "base" / "policy", weighting=HITL,
        policy_config={**POLICY, "recovery": {**recovery, "head_rows": "gate"}},
    ))  # fmt: skip
    batch, weights = by_gate._batch()
    gate = by_gate.policy.recovery_gate
    assert gate is not None and len(weights) == 16  # no copies: each row trains the generator its state is routed to
    assert torch.equal(batch["recovery"], gate.rows(batch["obs.state"], True))
    with pytest.raises(ValueError, match="head_rows"):
        RecoveryHeadConfig(head_rows="gate", nominal_learns_corrections=False)
    with pytest.raises(ValueError, match="no human correction in the training data"):
        Trainer(_config(store, tmp_path / "x", policy_config={**POLICY, "recovery": recovery},
                        select={"episodes": (0,)}))  # fmt: skip
