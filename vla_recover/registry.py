"""One dispatch mechanism: a name maps to a config class and a lazily imported ``"module:Class"``.

Tasks, policies, critics and weighters register the same way (``TASKS``, ``POLICIES``, ``CRITICS``, ``WEIGHTERS``),
so a config file can name any of them and the error for a bad name always lists the valid choices.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = ["Entry", "Registry", "UnknownNameError", "import_object"]

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name that is not registered; the message lists the valid choices."""

    def __str__(self) -> str:  # KeyError quotes its argument; we want the plain sentence.
        return str(self.args[0])


def import_object(target: str) -> Any:
    """Import ``"package.module:Attribute"``."""
    module_name, sep, attr = target.partition(":")
    if not sep or not attr:
        raise ValueError(f"target {target!r} must look like 'package.module:Attribute'")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    config_cls: type[T]
    target: str
    summary: str = ""

    def load(self) -> Any:
        return import_object(self.target)


class Registry(Generic[T]):
    """Name → (config class, ``"module:Class"``). The class is imported only when first used."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, config_cls: type[T], target: str, summary: str = "") -> Entry[T]:
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        entry = Entry(name, config_cls, target, summary)
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a plugin unloading, a test cleaning up); an unknown name lists the valid choices."""
        self.get(name)
        del self._entries[name]

    def get(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            choices = ", ".join(sorted(self._entries)) or "(none registered)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid choices: {choices}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self._entries[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._entries)
