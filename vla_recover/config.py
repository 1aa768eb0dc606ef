"""Typed, frozen configs validated in one place, with errors that name the field, the value and what was expected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = [
    "ConfigError",
    "FrozenConfig",
    "NestedConfigError",
    "load_yaml",
    "read_saved_meta",
    "validate_config",
    "validate_nested",
    "write_saved_meta",
]

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


class NestedConfigError(ValueError):
    """What is wrong with a config held inside another, raised from the outer one's checks: ``problems`` pairs a
    field path (within the nested config; None for a whole-config check) with what is wrong there."""

    def __init__(self, problems: list[tuple[str | None, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(_line(path, text) for path, text in problems))


def _line(path: str | None, text: str) -> str:
    return f"field {path!r}: {text}" if path else text


def _problems(errors: list[Any], within: str = "") -> list[tuple[str | None, str]]:
    """(field path, what is wrong) for each of pydantic's errors, paths prefixed with ``within``."""
    problems: list[tuple[str | None, str]] = []
    for error in errors:
        path = ".".join(str(part) for part in (within, *error["loc"]) if part != "")
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, NestedConfigError):  # a nested config's own problems, under this path
            problems += [
                (".".join(p for p in (path, inner or "") if p) or None, text) for inner, text in cause.problems
            ]
        elif not error["loc"] and error["type"] == "value_error":  # a whole-config check: its message names fields
            problems.append((within or None, str(error["msg"]).removeprefix("Value error, ")))
        elif error["type"] == "extra_forbidden":
            problems.append((path, f"unknown field (value {error['input']!r})"))
        elif error["type"] == "missing":
            problems.append((path, "required but missing"))
        else:
            problems.append((path or "(root)", f"got {error['input']!r}; {error['msg']}"))
    return problems


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
        raise ConfigError(source, [_line(path, text) for path, text in _problems(exc.errors())]) from None


def validate_nested(cls: type[C], data: Any, field: str) -> C:
    """A config held as a plain mapping inside another (a policy's, a weighter's), checked with the outer one:
    a `NestedConfigError` whose problems name ``field.<sub-field>``, which the outer validation reports as its own."""
    if not isinstance(data, dict):
        raise NestedConfigError([(field, f"expected a mapping of fields, got {type(data).__name__} {data!r}")])
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise NestedConfigError(_problems(exc.errors(), field)) from None


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


def read_saved_meta(directory: Path, name: str, schema: int, what: str) -> dict[str, Any]:
    """The JSON a saved artifact keeps beside its weights, checked to be one this version reads."""
    path = directory / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a {what} directory (no {name})")
    meta: dict[str, Any] = json.loads(path.read_text())
    if meta.get("schema_version") != schema:
        raise ValueError(f"{path}: schema {meta.get('schema_version')}, this vla_recover reads {schema}")
    return meta


def write_saved_meta(directory: Path, name: str, schema: int, meta: dict[str, Any]) -> Path:
    """Write the JSON a saved artifact keeps beside its weights (what ``read_saved_meta`` reads back), schema first."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(json.dumps({"schema_version": schema, **meta}, indent=2))
    return path
