"""The progress critic: ranking loss, a tiny run that learns a monotone curve, labelling, the CLI, bad input."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vla_recover.cli.main import app
from vla_recover.config import validate_config
from vla_recover.critic.data import load_episodes, spearman
from vla_recover.critic.model import ProgressCritic
from vla_recover.critic.train import CriticTrainConfig, ranking_loss, train_critic
from vla_recover.data import EpisodeData, EpisodeStore
from vla_recover.rollout import expert_episodes

TINY = {"steps": 250, "batch_size": 64, "critic": {"hidden": 64, "layers": 2}, "held_out_fraction": 0.25}


@pytest.fixture(scope="module")
def expert_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("critic") / "lift"
    with EpisodeStore(path, mode="a") as store:
        store.append_episodes([r.to_episode_data() for r in expert_episodes("LiftCube", list(range(16)))])
        state = store.episode(0)["obs.state"]
        single = EpisodeData(task="LiftCube", steps={"obs.state": state[:1], "action": np.zeros((1, 5), np.float32)},
                             instruction="lift the red cube", outcome="success")  # fmt: skip
        store.append_episodes([single])  # an episode of one step must not break training or labelling
    return path


@pytest.fixture(scope="module")
def trained(expert_store: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("critic") / "critic"
    metrics = train_critic(expert_store, out, validate_config(CriticTrainConfig, TINY))
    return out, metrics


def test_ranking_loss_prefers_the_right_order() -> None:
    early, late = torch.tensor([0.2, 0.4]), torch.tensor([0.6, 0.9])
    assert ranking_loss(early, late, 0.1) < ranking_loss(late, early, 0.1)
    assert ranking_loss(early, early, 0.1).item() == pytest.approx(np.log(2.0))
    assert spearman(np.array([0.1, 0.3, 0.2]), np.arange(3)) == pytest.approx(0.5)


def test_a_tiny_run_learns_a_monotone_curve_on_expert_data(trained: tuple[Path, dict]) -> None:
    out, metrics = trained
    assert metrics["held_out"]["voc"] > 0.9, metrics  # held-out successes: progress rises with time
    assert metrics["held_out"]["pearson_vs_true_progress"] > 0.7, metrics
    for name in ("config.json", "model.safetensors", "metrics.json", "loss.png", "held_out_progress.png"):
        assert (out / name).is_file()
    critic = ProgressCritic.load(out)
    held = json.loads((out / "config.json").read_text())["held_out_ids"]
    assert held and critic.config.hidden == 64


def test_nan_input_and_wrong_shapes_are_clear_errors(trained: tuple[Path, dict]) -> None:
    critic = ProgressCritic.load(trained[0])
    state = np.zeros((4, critic.shapes["obs.state"][0]), np.float32)
    state[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"episode 7: obs\.state is NaN or Inf at step 2"):
        critic.predict({"obs.state": state}, "lift the red cube", where="episode 7")
    with pytest.raises(ValueError, match=r"obs\.state has shape \(3,\), the critic expects \(\d+,\)"):
        critic.predict({"obs.state": np.zeros((4, 3), np.float32)}, "lift the red cube")
    with pytest.raises(KeyError, match=r"no key 'obs\.state'"):
        critic.predict({}, "lift the red cube")


def test_label_writes_critic_segments_and_relabelling_replaces_them(
    expert_store: Path, trained: tuple[Path, dict]
) -> None:
    runner = CliRunner()
    for _ in range(2):
        result = runner.invoke(app, ["label", "--store", str(expert_store), "--critic", str(trained[0])])
        assert result.exit_code == 0, result.output
    summary = json.loads(result.output.strip().splitlines()[-1])
    with EpisodeStore(expert_store) as store:
        episodes = load_episodes(store, ("obs.state",))
        segments = store.segments(source="critic")
        for episode in episodes:  # every step covered exactly once
            mine = sorted((s.start, s.stop) for s in segments if s.episode == episode.id)
            assert mine[0][0] == 0 and mine[-1][1] == episode.length
            assert all(a[1] == b[0] for a, b in itertools.pairwise(mine))
        assert sum(summary["steps_by_kind"].values()) == sum(e.length for e in episodes)
        assert summary["steps_by_kind"].get("progress", 0) > 0.5 * sum(e.length for e in episodes)
        assert len([e for e in store.events(kind="labels_written")]) == 2 * len(episodes)


def test_cli_trains_plots_and_refuses_bad_input(expert_store: Path, trained: tuple[Path, dict], tmp_path: Path) -> None:
    runner = CliRunner()
    png = tmp_path / "episode.png"
    result = runner.invoke(app, ["critic", "plot", "--store", str(expert_store), "--episode", "3", "--out", str(png)])
    assert result.exit_code == 0, result.output
    assert png.stat().st_size > 10_000
    result = runner.invoke(app, ["critic", "plot", "--store", str(expert_store), "--episode", "99", "--out", str(png)])
    assert result.exit_code == 2 and "episode: 99 is not in" in result.output
    result = runner.invoke(app, ["critic", "train", "--store", str(tmp_path / "nope"), "--out", str(tmp_path / "c")])
    assert result.exit_code == 2 and "does not exist" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: -3\n")
    result = runner.invoke(app, ["critic", "train", "--store", str(expert_store), "--out", str(tmp_path / "c"),
                                 "--config", str(bad)])  # fmt: skip
    assert result.exit_code == 2 and "steps" in result.output


def test_regression_targets_and_failure_pairs() -> None:
    from vla_recover.critic.data import CriticEpisode
    from vla_recover.critic.train import _PairSampler

    def episode(steps: int, outcome: str) -> CriticEpisode:
        inputs = {"obs.state": np.zeros((steps, 3), np.float32)}
        return CriticEpisode(0, "LiftCube", "lift", outcome, inputs, np.arange(steps), steps)

    short, long, failed = episode(5, "success"), episode(9, "success"), episode(4, "truncated")
    sampler = _PairSampler([short, long, failed, episode(3, "aborted")], validate_config(CriticTrainConfig, {}))
    picks = [(short, 0), (short, 4), (long, 0), (long, 8)]
    # time-to-go is in units of the longest success (8 steps): the short one starts 4 steps from done, not at 0
    np.testing.assert_allclose(sampler.targets(picks, "time_to_go").numpy(), [0.5, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(sampler.targets(picks, "time").numpy(), [0.0, 1.0, 0.0, 1.0])
    pairs = sampler.failure_pairs(50)  # an aborted episode (e-stop, crash) is no failure of the policy
    assert {id(f) for (f, _), _ in pairs} == {id(failed)}
    assert all(0 <= t < 4 and done.success and s == done.steps - 1 for (_, t), (done, s) in pairs)
    assert _PairSampler([short], validate_config(CriticTrainConfig, {})).failure_pairs(5) == []


def test_swapped_pairs_put_the_robot_ahead_of_its_objects() -> None:
    from vla_recover.critic.data import CriticEpisode
    from vla_recover.critic.train import _PairSampler, _robot_state_dims

    # two robot entries that move every step, one object entry that moves only from step 5 on
    steps = 10
    state = np.stack([np.arange(steps), -np.arange(steps), np.maximum(np.arange(steps) - 4, 0) * 0.1], axis=1)
    episode = CriticEpisode(
        0, "LiftCube", "lift", "success", {"obs.state": state.astype(np.float32)}, np.arange(steps), steps
    )
    config = validate_config(CriticTrainConfig, {"seed": 3})
    hybrids, lates = _PairSampler([episode], config).swap_pairs(64, "obs.state", 2, 0.05)
    assert len(lates) == 64
    for hybrid, (_, late) in zip(hybrids, lates, strict=True):
        np.testing.assert_array_equal(hybrid[:2], state[late, :2])  # the robot where it is at the later step
        assert hybrid[2] <= state[late, 2] - 0.05  # the object behind where it is then
    assert {late for _, late in lates} <= set(range(5, steps))  # the object moves from step 5 on
    # where the robot's entries end: the task's own, none for a store of an unknown robot, the config's checked
    assert _robot_state_dims(config, [episode]) == 9
    unknown = CriticEpisode(0, "MyArm", "lift", "success", {"obs.state": state}, np.arange(steps), steps)
    assert _robot_state_dims(config, [unknown]) is None
    with pytest.raises(ValueError, match="robot_state_dims: got 3"):
        _robot_state_dims(validate_config(CriticTrainConfig, {"robot_state_dims": 3}), [episode])


def test_state_noise_perturbs_training_inputs_only(trained: tuple[Path, dict]) -> None:
    critic = ProgressCritic.load(trained[0])
    assert json.loads((trained[0] / "config.json").read_text())["train_config"]["state_noise"] == 0.05
    state = np.random.default_rng(0).normal(size=(8, critic.shapes["obs.state"][0])).astype(np.float32)
    batch = critic.tensors({"obs.state": state}, "lift the red cube")
    with torch.no_grad():
        clean = critic.net(batch)[0]
        assert torch.equal(clean, critic.net(batch)[0])
        assert not torch.allclose(critic.net(batch, 0.5)[0], clean)
    # predicting (labelling, the fleet's ratings) never adds noise
    np.testing.assert_array_equal(critic.predict({"obs.state": state}, "lift the red cube"), torch.sigmoid(clean))
    with pytest.raises(ValueError, match="state_noise"):
        validate_config(CriticTrainConfig, {"state_noise": 2.0})
