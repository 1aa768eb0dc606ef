"""The LeRobot adapter: clear errors where LeRobot is missing, and (marker ``lerobot``) the whole policy contract
plus LeRobot-specific checks run inside .venv-lerobot against a small randomly initialised LeRobot DiffusionPolicy.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.lerobot_venv import LEROBOT_PYTHON, needs_lerobot_venv
from vla_recover.config import ConfigError
from vla_recover.policies import build_policy

ROOT = Path(__file__).resolve().parents[2]
SHAPES = {"obs.state": (6,)}
SMALL = {"down_dims": [16, 32], "action_horizon": 8, "action_exec": 4, "environment_state_dims": 2}


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match="environment_state_dims"):
        build_policy("lerobot_diffusion", {}, SHAPES, 3)
    with pytest.raises(ConfigError, match="use_language"):
        build_policy("lerobot_diffusion", {**SMALL, "use_language": True}, SHAPES, 3)


def test_missing_lerobot_says_how_to_get_it() -> None:
    try:
        import lerobot  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"install_lerobot_venv\.sh"):
            build_policy("lerobot_diffusion", SMALL, SHAPES, 3)
    else:
        pytest.skip("LeRobot is installed here")


@pytest.mark.lerobot
@needs_lerobot_venv
def test_contract_adapter_leader_arm_and_robot_pass_inside_the_lerobot_venv() -> None:
    files = [
        "tests/policies/test_policies.py",
        "tests/policies/test_lerobot_adapter.py",
        "tests/teleop/test_leader_arm.py",
        "tests/hardware/test_lerobot_robot.py",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLA_RECOVER_INSIDE_LEROBOT": "1"}
    selection = ["-k", "lerobot_diffusion or inside_lerobot", "-m", "not lerobot"]
    run = subprocess.run(
        [str(LEROBOT_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection, *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    passed = re.search(r"(\d+) passed", run.stdout)
    # 6 contract + 4 below + the leader arm + the follower robot
    assert passed and int(passed.group(1)) >= 12, run.stdout[-2000:]


# -- the rest runs only inside .venv-lerobot, driven by the test above ----------------------------------------------
inside = pytest.mark.skipif(
    os.environ.get("VLA_RECOVER_INSIDE_LEROBOT") != "1", reason="runs inside .venv-lerobot (see the test above)"
)


def _fitted(policy: torch.nn.Module) -> torch.nn.Module:
    rng = np.random.default_rng(0)
    policy.fit_normalizer({"obs.state": rng.normal(size=(50, 6)), "action": rng.uniform(-2, 2, size=(50, 3))})
    return policy


def _batch(b: int = 4) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "obs.state": torch.randn(b, 2, 6, generator=g),
        "action": torch.rand(b, 8, 3, generator=g) * 4 - 2,
        "action_is_pad": torch.zeros(b, 8, dtype=torch.bool),
    }


@inside
def test_inside_lerobot_loss_is_lerobots_own_loss() -> None:
    """Unweighted, our loss equals LeRobot's compute_loss on the same noise and diffusion steps."""
    torch.manual_seed(0)
    policy = _fitted(build_policy("lerobot_diffusion", SMALL, SHAPES, 3))
    data = _batch()
    torch.manual_seed(1)
    ours = policy.compute_loss(data)
    theirs_batch = {
        **policy._lerobot_batch(data),
        "action": policy.normalizer.normalize("action", data["action"]),
        "action_is_pad": data["action_is_pad"],
    }
    torch.manual_seed(1)
    theirs = policy.lerobot.diffusion.compute_loss(theirs_batch)
    torch.testing.assert_close(ours, theirs)


@inside
def test_inside_lerobot_policy_learns_a_fixed_batch() -> None:
    torch.manual_seed(0)
    policy = _fitted(build_policy("lerobot_diffusion", SMALL, SHAPES, 3))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    data = _batch(16)

    def held_out_loss() -> float:  # the same noise and diffusion steps each time
        torch.manual_seed(123)
        with torch.no_grad():
            return float(policy.compute_loss(data))

    before = held_out_loss()
    for _ in range(80):
        loss = policy.compute_loss(data)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert held_out_loss() < 0.6 * before


@inside
def test_inside_lerobot_checkpoint_from_a_local_directory(tmp_path: Path) -> None:
    """A LeRobot user's own checkpoint (save_pretrained) loads by path, offline, with its weights."""
    torch.manual_seed(0)
    source = build_policy("lerobot_diffusion", SMALL, SHAPES, 3)
    source.lerobot.save_pretrained(tmp_path / "theirs")
    loaded = build_policy("lerobot_diffusion", {**SMALL, "pretrained_path": str(tmp_path / "theirs")}, SHAPES, 3)
    theirs, ours = source.lerobot.state_dict(), loaded.lerobot.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[k], ours[k]) for k in theirs)
    with pytest.raises(ValueError, match="outputs 3-d actions, the data has 5"):
        build_policy("lerobot_diffusion", {**SMALL, "pretrained_path": str(tmp_path / "theirs")}, SHAPES, 5)
    with pytest.raises(FileNotFoundError, match="pretrained_path"):
        build_policy("lerobot_diffusion", {**SMALL, "pretrained_path": str(tmp_path / "nowhere")}, SHAPES, 3)


@inside
def test_inside_lerobot_policy_with_a_camera() -> None:
    shapes = {"obs.state": (6,), "obs.images.front": (32, 32, 3)}
    config = {**SMALL, "environment_state_dims": 0, "image_keys": ["obs.images.front"], "image_crop": 28}
    torch.manual_seed(0)
    policy = _fitted(build_policy("lerobot_diffusion", config, shapes, 3))
    data = {**_batch(2), "obs.images.front": torch.randint(0, 255, (2, 2, 32, 32, 3), dtype=torch.uint8)}
    policy.compute_loss(data).backward()
    chunk = policy.predict_chunk({k: v for k, v in data.items() if k.startswith("obs.")}, seed=0)
    assert chunk.shape == (2, 8, 3) and np.isfinite(chunk).all()
