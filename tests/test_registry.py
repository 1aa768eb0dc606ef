from __future__ import annotations

import pytest

from vla_recover.config import FrozenConfig
from vla_recover.registry import Registry, UnknownNameError, import_object


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
