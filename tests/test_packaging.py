"""Every package in the source tree is in pyproject's package list, so a wheel install has all of it."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    directory_of = {name: Path(path) for name, path in config["package-dir"].items()}
    listed = set(config["packages"])
    found = set()
    for top, directory in directory_of.items():
        for init in (ROOT / directory).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / directory).parts
            name = ".".join((top, *parts))
            if not any(other != top and name.startswith(other) for other in directory_of if other.startswith(top)):
                found.add(name)
    assert found - listed == set(), "add these to [tool.setuptools] packages"
