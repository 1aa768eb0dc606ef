"""A Griffe extension: the API reference finds the subpackages that pyproject.toml maps to their own folders.

``[tool.setuptools.package-dir]`` installs ``vla_recover.envs`` from ``envs/`` (and ``.policies``, ``.teleop``,
``.hardware`` likewise). Griffe walks only the ``vla_recover/`` folder, so this extension loads each mapped folder
when its parent package loads and attaches it under its installed name."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import griffe

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def package_dirs(pyproject: Path = PYPROJECT) -> dict[str, Path]:
    """Dotted package name -> folder, as setuptools installs them."""
    mapping = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-dir"]
    return {name: (pyproject.parent / folder).resolve() for name, folder in mapping.items()}


class PackageDirMapping(griffe.Extension):
    def __init__(self) -> None:
        self.mapping = package_dirs()

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        prefix = pkg.path + "."
        mapped = sorted((name, folder) for name, folder in self.mapping.items() if name.startswith(prefix))
        for name, folder in mapped:  # parents before children: "a.b" sorts before "a.b.c"
            parent_path, _, child = name.rpartition(".")
            module = loader.load(folder, try_relative_path=True)
            assert isinstance(module, griffe.Module)
            loader.modules_collection.del_member(module.name)  # it lives under its installed name only
            module.name = child
            pkg.modules_collection.get_member(parent_path).set_member(child, module)
