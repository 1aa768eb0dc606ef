"""What the docs promise about the code: every config field described and on the configuration page, every loop
method on the methods page with its paper."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import vla_recover
from vla_recover import envs, hardware, policies, teleop
from vla_recover.config import FrozenConfig
from vla_recover.loop.methods import LOOP_METHODS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# robosuite itself (slow to import, an optional extra); its config models live in envs.robosuite.config
SKIPPED_PREFIXES = ("vla_recover.envs.robosuite.env", "vla_recover.envs.robosuite.experts")


def _config_models() -> list[type[FrozenConfig]]:
    # each package pyproject.toml maps to its own folder is walked from that folder
    for package in (vla_recover, envs, hardware, policies, teleop):
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if not module.name.startswith(SKIPPED_PREFIXES):
                importlib.import_module(module.name)
    models, todo = [], list(FrozenConfig.__subclasses__())
    while todo:
        model = todo.pop()
        todo.extend(model.__subclasses__())
        if model.__module__.startswith("vla_recover."):  # not a test's or an example's own
            models.append(model)
    return sorted(set(models), key=lambda m: (m.__module__, m.__qualname__))


CONFIG_MODELS = _config_models()


def test_the_package_walk_finds_the_config_models() -> None:
    names = {model.__name__ for model in CONFIG_MODELS}
    assert {"LoopConfig", "FleetConfig", "TrainConfig", "LiftCubeConfig", "FlowConfig", "SafetyConfig"} <= names


@pytest.mark.parametrize("model", CONFIG_MODELS, ids=lambda m: m.__name__)
def test_every_config_field_has_a_description(model: type[FrozenConfig]) -> None:
    missing = [name for name, field in model.model_fields.items() if not (field.description or "").strip()]
    assert not missing, f"{model.__module__}.{model.__qualname__}: fields without a description: {missing}"


def test_every_config_model_is_on_the_configuration_page() -> None:
    page = (DOCS / "reference" / "config.md").read_text()
    shown = set(re.findall(r"^::: (\S+)$", page, flags=re.MULTILINE))
    # a subclass that neither adds nor overrides a field (NoConfig's kin) is covered by its parent's entry
    missing = [
        f"{model.__module__}.{model.__qualname__}"
        for model in CONFIG_MODELS
        if f"{model.__module__}.{model.__qualname__}" not in shown and inspect.get_annotations(model)
    ]
    assert not missing, f"docs/reference/config.md lacks: {missing}"


def test_every_loop_method_has_its_row_with_its_paper() -> None:
    page = (DOCS / "concepts" / "methods.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", page, flags=re.MULTILINE)}
    assert set(rows) == set(LOOP_METHODS.names()), "docs/concepts/methods.md and LOOP_METHODS name different methods"
    for method in LOOP_METHODS:
        name = method.name
        assert rows[name].strip() == method.paper, f"{name}: the page says {rows[name]!r}, the entry {method.paper!r}"


def test_the_readme_links_only_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = {t.split("#")[0] for t in re.findall(r"\]\(([^)]+)\)", readme) if "://" not in t}
    assert targets, "the README links to its docs pages"
    missing = sorted(t for t in targets if t and not (ROOT / t).exists())
    assert not missing, f"README.md links to missing files: {missing}"
