from __future__ import annotations

from dataclasses import dataclass

import pytest

from vla_recover.config import FrozenConfig
from vla_recover.registry import Catalog, Registry, UnknownNameError, import_object


class _Config(FrozenConfig):
    size: int = 1


def test_lookup_imports_lazily_and_lists_choices_on_a_miss() -> None:
    registry: Registry[_Config] = Registry("widget")
    registry.register("ordered", _Config, "collections:OrderedDict")
    assert registry.get("ordered").load().__name__ == "OrderedDict"
    with pytest.raises(UnknownNameError, match="unknown widget 'sorted'; valid choices: ordered"):
        registry.get("sorted")


def test_duplicate_names_are_refused() -> None:
    registry: Registry[_Config] = Registry("widget")
    registry.register("a", _Config, "collections:OrderedDict")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a", _Config, "collections:deque")


def test_import_object_needs_module_and_attribute() -> None:
    with pytest.raises(ValueError, match=r"package\.module:Attribute"):
        import_object("collections.OrderedDict")


@dataclass(frozen=True)
class _Recipe:
    name: str
    steps: int


def test_a_catalog_of_records_looks_up_lists_and_refuses_like_a_registry() -> None:
    recipes: Catalog[_Recipe] = Catalog("recipe")
    recipes.add(_Recipe("slow", 10))
    recipes.add(_Recipe("fast", 1))
    assert recipes.names() == ["fast", "slow"] and [r.steps for r in recipes] == [1, 10] and "fast" in recipes
    with pytest.raises(ValueError, match="recipe 'fast' is already registered"):
        recipes.add(_Recipe("fast", 2))
    recipes.unregister("fast")
    with pytest.raises(UnknownNameError, match="unknown recipe 'fast'; valid choices: slow"):
        recipes.get("fast")
    assert len(recipes) == 1
