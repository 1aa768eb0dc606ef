"""Typed, frozen configs validated in one place, with errors that name the field, the value and what was expected."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["ConfigError", "FrozenConfig", "load_yaml", "validate_config"]

C = TypeVar("C", bound=BaseModel)


class FrozenConfig(BaseModel):
    """Base for every config: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ConfigError(ValueError):
    """A config that failed validation; ``str()`` lists every bad field with its value."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid config {source}:\n{lines}")


def _describe(error: dict[str, Any]) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "(root)"
    if error["type"] == "extra_forbidden":
        return f"field {field!r}: unknown field (value {error['input']!r})"
    if error["type"] == "missing":
        return f"field {field!r}: required but missing"
    return f"field {field!r}: got {error['input']!r}; {error['msg']}"


def validate_config(cls: type[C], data: Any, source: str = "<dict>") -> C:
    """Build ``cls`` from ``data``; raise :class:`ConfigError` naming every bad field."""
    if data is None:
        data = {}
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise ConfigError(source, [f"expected a mapping of fields, got {type(data).__name__} {data!r}"])
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, [_describe(dict(e)) for e in exc.errors()]) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    """The fields of a YAML config file: a mapping (an empty file has none)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(str(path), ["file does not exist"])
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(str(path), [f"not valid YAML: {exc}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(str(path), [f"expected a mapping of fields at the top, got a {type(data).__name__}"])
    return data
