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


@pytest.mark.parametrize("path", sorted((CONFIGS / "train").glob("*.yaml")), ids=lambda p: p.name)
def test_train_presets_validate(path: Path) -> None:
    from vla_recover.policies import POLICIES
    from vla_recover.train.trainer import TrainConfig

    config = validate_config(TrainConfig, load_yaml(path), source=str(path))
    validate_config(POLICIES.get(config.policy).config_cls, config.policy_config, source=str(path))
    if config.eval_task:
        load_task_config(config.eval_task)


@pytest.mark.parametrize("path", sorted((CONFIGS / "fleet").glob("*.yaml")), ids=lambda p: p.name)
def test_fleet_presets_validate(path: Path) -> None:
    from vla_recover.fleet import FleetConfig

    config = validate_config(FleetConfig, load_yaml(path), source=str(path))
    load_task_config(config.task, config.task_config or None)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"task": "LiftCub"}, "task: unknown task 'LiftCub'; valid task ids: "), ({"task_config": {"bogus": 1}}, "bogus")],
)
def test_a_fleet_config_with_a_bad_task_fails_at_validation(change: dict[str, object], message: str) -> None:
    from vla_recover.fleet import FleetConfig

    with pytest.raises(ValueError, match=message):
        validate_config(FleetConfig, {"task": "LiftCube", "constant_action": [0.0] * 5, **change})


@pytest.mark.parametrize("path", sorted((CONFIGS / "ros2").glob("*.yaml")), ids=lambda p: p.name)
def test_ros2_presets_validate(path: Path) -> None:
    from vla_recover.ros2.node import load_node_config

    load_node_config(path)


@pytest.mark.parametrize("path", sorted((CONFIGS / "loop").glob("*.yaml")), ids=lambda p: p.name)
def test_loop_presets_validate(path: Path) -> None:
    from vla_recover.loop.config import LoopConfig

    config = validate_config(LoopConfig, load_yaml(path), source=str(path))
    load_task_config(config.task, config.task_config or None)


def _all_configs() -> list[type]:
    import importlib
    import pkgutil

    import vla_recover
    from vla_recover.config import FrozenConfig

    for module in pkgutil.walk_packages(vla_recover.__path__, "vla_recover."):
        try:
            importlib.import_module(module.name)
        except ImportError:  # an optional dependency this machine lacks (rclpy, LeRobot)
            continue
    found, stack = [], [FrozenConfig]
    while stack:
        for sub in stack.pop().__subclasses__():
            found.append(sub)
            stack.append(sub)
    return found


def test_every_seed_in_every_config_is_checked_non_negative() -> None:
    """numpy refuses negative seeds deep inside a run; the config must refuse them first, naming the field."""
    seeds = [
        (cls, name)
        for cls in _all_configs()
        for name, info in cls.model_fields.items()  # type: ignore[attr-defined]
        if "seed" in name and info.annotation in (int, int | None)
    ]
    assert len(seeds) >= 8, seeds
    unchecked = [
        f"{cls.__module__}.{cls.__name__}.{name}"
        for cls, name in seeds
        if not any(getattr(m, "ge", -1) >= 0 for m in cls.model_fields[name].metadata)  # type: ignore[attr-defined]
    ]
    assert not unchecked


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"critic": {"steps": -5}}, "field 'critic.steps': got -5"),
        ({"fleet": {"robots": "many"}}, "field 'fleet.robots': got 'many'"),
        ({"base_train": {"policy_config": {"down_dims": 3}}}, "field 'base_train.policy_config.down_dims': got 3"),
        ({"retrain": {"steps": 0}}, "field 'retrain.steps': got 0"),
        ({"weighter_configs": {"habc": {"viability": {"steps": -1}}}}, "field 'weighter_configs.habc.viability.steps'"),
        ({"weighter_configs": {"nope": {}}}, "weighter_configs: no weighter 'nope'; valid choices: awr, bc"),
    ],
)
def test_a_loop_config_names_the_full_path_of_a_bad_nested_field(raw: dict[str, object], expected: str) -> None:
    from vla_recover.config import ConfigError
    from vla_recover.loop.config import LoopConfig

    with pytest.raises(ConfigError) as excinfo:
        validate_config(LoopConfig, raw, source="loop.yaml")
    assert excinfo.value.problems[0].startswith(expected), excinfo.value.problems


def test_a_train_config_checks_its_policy_config_when_it_is_built() -> None:
    from vla_recover.config import ConfigError
    from vla_recover.train.trainer import TrainConfig

    with pytest.raises(ConfigError) as excinfo:
        validate_config(TrainConfig, {"policy": "flow", "policy_config": {"down_dims": "big", "nope": 1}})
    assert excinfo.value.problems == [
        "field 'policy_config.down_dims': got 'big'; Input should be a valid tuple",
        "field 'policy_config.nope': unknown field (value 1)",
    ]
    with pytest.raises(ConfigError, match="field 'policy': got 'nosuch'; valid choices: diffusion, flow"):
        validate_config(TrainConfig, {"policy": "nosuch"})
