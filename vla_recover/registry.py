"""One dispatch mechanism: a name maps to a config class and a lazily imported ``"module:Class"``.

Tasks, policies, critics, weighters, robot kinds and teleop devices register the same way (``TASKS``, ``POLICIES``,
``CRITICS``, ``WEIGHTERS``, ``ROBOTS``, ``DEVICES``),
so a config file can name any of them and the error for a bad name always lists the valid choices. An extension point
whose entries are plain records, not classes to import (the loop's methods, ``LOOP_METHODS``), is a ``Catalog``: the
same lookup, listing and error, without the lazy import.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Catalog", "Entry", "Registry", "UnknownNameError", "import_object"]

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


class Named(Protocol):
    @property
    def name(self) -> str: ...


R = TypeVar("R", bound=Named)


class Catalog(Generic[R]):
    """Name → record, for extension points whose entries are plain records (the loop's methods). Every registry
    is one: an unknown name's error lists the valid choices, iteration runs in name order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, R] = {}

    def add(self, record: R) -> R:
        if record.name in self._entries:
            raise ValueError(f"{self.kind} {record.name!r} is already registered")
        self._entries[record.name] = record
        return record

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a plugin unloading, a test cleaning up); an unknown name lists the valid choices."""
        self.get(name)
        del self._entries[name]

    def get(self, name: str) -> R:
        try:
            return self._entries[name]
        except KeyError:
            choices = ", ".join(sorted(self._entries)) or "(none registered)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; valid choices: {choices}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[R]:
        return iter(self._entries[name] for name in self.names())

    def __len__(self) -> int:
        return len(self._entries)


class Registry(Catalog[Entry[T]]):
    """Name → (config class, ``"module:Class"``). The class is imported only when first used."""

    def register(self, name: str, config_cls: type[T], target: str, summary: str = "") -> Entry[T]:
        return self.add(Entry(name, config_cls, target, summary))
