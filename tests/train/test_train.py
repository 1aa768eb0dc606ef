from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vla_recover.cli.main import app
from vla_recover.data import EpisodeStore
from vla_recover.evaluate import evaluate_checkpoint, wilson_interval
from vla_recover.rollout import expert_episodes
from vla_recover.train.trainer import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(scope="module")
def lift_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "lift"
    with EpisodeStore(path, mode="a") as store:
        store.append_episodes([r.to_episode_data() for r in expert_episodes("LiftCube", list(range(6)))])
    return path


def small_config(data: Path, out: Path, **overrides: object) -> TrainConfig:
    base = {
        "policy": "flow",
        "policy_config": {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4},
        "data": data,
        "out": out,
        "steps": 12,
        "batch_size": 16,
        "warmup_steps": 2,
        "log_every": 3,
        "save_every": 6,
    }
    return TrainConfig.model_validate({**base, **overrides})


@pytest.mark.parametrize("policy", ["diffusion", "flow"])
def test_resume_reproduces_the_uninterrupted_loss_curve(lift_store: Path, tmp_path: Path, policy: str) -> None:
    straight = Trainer(small_config(lift_store, tmp_path / "a", policy=policy))
    expected = [straight.train_step() for _ in range(12)]
    first = Trainer(small_config(lift_store, tmp_path / "b", policy=policy))
    head = [first.train_step() for _ in range(6)]
    first.save_checkpoint()
    second = Trainer(small_config(lift_store, tmp_path / "b", policy=policy))
    assert second.resume() and second.step == 6
    tail = [second.train_step() for _ in range(6)]
    assert head + tail == expected


def test_debug_preset_trains_saves_resumes_and_evaluates(lift_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    common = ["train", "--config", str(ROOT / "configs/train/debug.yaml"), "--data", str(lift_store), "--out", str(out)]
    result = runner.invoke(app, [*common, "--steps", "10"])
    assert result.exit_code == 0, result.output
    assert (out / "latest").read_text() == "step_00000010"
    result = runner.invoke(app, common)  # resumes at step 10 and finishes at 20
    assert result.exit_code == 0, result.output
    final = json.loads(result.output.strip().splitlines()[-1])
    assert final["step"] == 20 and 0.0 <= final["eval_success_rate"] <= 1.0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [5, 10, 15, 20]
    assert (out / "loss.png").stat().st_size > 1000
    result = runner.invoke(app, ["eval", "--policy", str(out / "policy"), "--task", "LiftCube", "--episodes", "3"])
    assert result.exit_code == 0, result.output
    evaluation = json.loads(result.output.strip().splitlines()[-1])
    assert evaluation["episodes"] == 3 and len(evaluation["ci95"]) == 2
    reports: list[tuple[int, int]] = []
    split = evaluate_checkpoint(
        out / "policy", "LiftCube", 3, 100_000, workers=2, batch=1, on_progress=lambda *r: reports.append(r)
    )
    assert [done for done, _ in reports] == [1, 2, 3]  # one report per batch, from both worker processes
    assert reports[-1][1] == split["successes"]
    result = runner.invoke(app, ["eval", "--policy", str(out), "--task", "LiftCube", "--episodes", "1"])
    assert result.exit_code == 2 and f"the training run's policy is {out / 'policy'}" in result.output.replace("\n", "")


def test_bad_training_input_is_named(lift_store: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid choices"):
        Trainer(small_config(lift_store, tmp_path, select={"outcomes": ["win"]}))
    with pytest.raises(FileNotFoundError, match="no such store"):
        Trainer(small_config(tmp_path / "nothing", tmp_path))
    with pytest.raises(KeyError, match=r"policy input 'obs\.images\.front'"):
        Trainer(small_config(lift_store, tmp_path, policy_config={"image_keys": ["obs.images.front"]}))
    result = runner.invoke(app, ["eval", "--policy", str(tmp_path), "--task", "LiftCube", "--episodes", "1"])
    assert result.exit_code == 2 and "not a policy checkpoint" in result.output


def test_wilson_interval() -> None:
    low, high = wilson_interval(90, 100)
    assert low == pytest.approx(0.8256, abs=1e-3) and high == pytest.approx(0.9448, abs=1e-3)
    assert wilson_interval(0, 10)[0] == 0.0


def test_every_checkpoint_carries_its_own_version_and_its_parent(lift_store: Path, tmp_path: Path) -> None:
    """Two runs saving to folders both called ``policy`` get different ids; a fine-tune names its parent; a
    schema-1 checkpoint (saved before versions existed) loads with one made from its folder and weights."""
    from vla_recover.policies.common.checkpoint import checkpoint_version, load_policy

    Trainer(small_config(lift_store, tmp_path / "base")).run()
    base = checkpoint_version(tmp_path / "base" / "policy")
    Trainer(small_config(lift_store, tmp_path / "round_1", init_from=tmp_path / "base" / "policy", seed=1)).run()
    _, _, saved = load_policy(tmp_path / "round_1" / "policy")
    version = saved["version"]
    assert base.startswith("base-") and version["id"].startswith("round_1-") and version["parent"] == base
    assert version["content_hash"].startswith("sha256:") and version["id"][-12:] == version["content_hash"][7:19]
    config_path = tmp_path / "base" / "policy" / "config.json"
    old = json.loads(config_path.read_text())
    old["schema_version"] = 1
    del old["version"]
    config_path.write_text(json.dumps(old))
    assert checkpoint_version(tmp_path / "base" / "policy") == base  # the same weights: the same id
    old["schema_version"], old["version"] = 2, {"name": "no id"}
    config_path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match="field 'version' must hold an 'id'"):
        load_policy(tmp_path / "base" / "policy")
