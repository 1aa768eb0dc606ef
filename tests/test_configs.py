"""Every YAML preset in configs/ validates against its config class."""

from __future__ import annotations

from pathlib import Path

import pytest

from vla_recover.config import load_yaml, validate_config
from vla_recover.envs import load_task_config
from vla_recover.rollout import CollectConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.parametrize(
    "path", sorted((CONFIGS / "tasks").glob("*/*.yaml")), ids=lambda p: p.parent.name + "/" + p.name
)
def test_task_presets_validate(path: Path) -> None:
    load_task_config(path.parent.name, path)


@pytest.mark.parametrize("path", sorted((CONFIGS / "collect").glob("*.yaml")), ids=lambda p: p.name)
def test_collect_presets_validate(path: Path) -> None:
    config = validate_config(CollectConfig, load_yaml(path), source=str(path))
    load_task_config(config.task, config.task_config or None)


def test_collect_default_preset_is_the_embedded_default() -> None:
    preset = validate_config(CollectConfig, load_yaml(CONFIGS / "collect" / "default.yaml"))
    assert preset == CollectConfig()
