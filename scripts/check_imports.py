"""Check the import contract in pyproject.toml's ``[tool.vla_recover] import_layers``: arrows run one way.

    python scripts/check_imports.py [project_root]

The layers are listed top to bottom. A module in one layer may import modules of the layers below it, never of a
layer above; packages sharing a line (``a | b``) are independent and import neither each other. Every import counts,
function-local and ``TYPE_CHECKING`` ones included. Module names come from ``[tool.setuptools.package-dir]``, so
``envs/`` is checked as ``vla_recover.envs`` like the installed package. Each layer must hold at least one module
and the contract must see at least one import between layers, so a contract that reads nothing fails too.

``[tool.vla_recover.private]`` names what only some packages may touch: a module (``"vla_recover.data.index"``)
that only the listed packages may import, or an attribute (``"._index"``) only they may read. These rules also run
over ``tests/`` and ``benchmarks/`` (as the packages ``tests`` and ``benchmarks``), so no test reaches past a public
API either.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Violation", "check", "main"]


@dataclass(frozen=True)
class Violation:
    path: Path
    line: int
    importer: str
    imported: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.importer} imports {self.imported} ({self.why})"


def _module_files(root: Path, package_dirs: dict[str, str]) -> dict[str, Path]:
    """Module name → file, for every package in ``package_dirs`` (the longest mapping wins for nested ones)."""
    files: dict[str, Path] = {}
    for package, directory in sorted(package_dirs.items(), key=lambda item: len(item[0])):
        base = root / directory
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join([package, *parts])] = path
    return files


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import statement in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from pkg import sub` may name a submodule: count it as pkg.sub, which is within pkg either way
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def _attributes(path: Path) -> list[tuple[int, str]]:
    return [(n.lineno, n.attr) for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)]


def _private_uses(root: Path, files: dict[str, Path], private: dict[str, list[str]]) -> list[Violation]:
    """Imports of a private module and reads of a private attribute from outside the packages allowed them."""
    scanned = dict(files)
    for extra in ("tests", "benchmarks"):
        scanned.update(_module_files(root, {extra: extra}) if (root / extra).is_dir() else {})
    violations: list[Violation] = []
    for module, path in scanned.items():
        for name, allowed in private.items():
            if any(module == a or module.startswith(a + ".") for a in allowed):
                continue
            if name.startswith("."):
                uses = [(line, attr) for line, attr in _attributes(path) if attr == name[1:]]
            else:
                uses = [(line, i) for line, i in _imports(path, module) if i == name or i.startswith(name + ".")]
            why = f"{name} is private to {', '.join(allowed)}"
            violations.extend(Violation(path.relative_to(root), line, module, used, why) for line, used in uses)
    return violations


def _layer_of(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    for depth, packages in enumerate(layers):
        for package in packages:
            if module == package or module.startswith(package + "."):
                return depth, package
    return None


def check(root: Path) -> tuple[list[Violation], int]:
    """The contract's violations in the project at ``root``, and how many imports between layers it checked."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    try:
        lines = project["tool"]["vla_recover"]["import_layers"]
    except KeyError:
        raise SystemExit(f"{root / 'pyproject.toml'}: no [tool.vla_recover] import_layers to check") from None
    layers = [[name.strip() for name in line.split("|")] for line in lines]
    files = _module_files(root, project["tool"]["setuptools"]["package-dir"])
    empty = [p for packages in layers for p in packages if not any(_layer_of(m, [[p]]) for m in files)]
    if empty:
        raise SystemExit(f"import_layers: {empty[0]!r} holds no module under {root}; the contract would read nothing")
    violations = _private_uses(root, files, project["tool"]["vla_recover"].get("private", {}))
    checked = 0
    for module, path in files.items():
        own = _layer_of(module, layers)
        if own is None:
            continue
        for line, imported in _imports(path, module):
            theirs = _layer_of(imported, layers)
            if theirs is None or theirs[1] == own[1]:
                continue
            checked += 1
            if theirs[0] < own[0]:
                why = f"{theirs[1]} is a layer above {own[1]}"
            elif theirs[0] == own[0]:
                why = f"{own[1]} and {theirs[1]} are independent"
            else:
                continue
            violations.append(Violation(path.relative_to(root), line, module, imported, why))
    return violations, checked


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else Path(__file__).resolve().parent.parent)
    violations, checked = check(root)
    for violation in violations:
        print(violation)
    if not checked:
        print(f"import_layers: no import between layers found under {root}; the contract read nothing")
        return 1
    print(f"import contract: {checked} imports between layers, {len(violations)} against the layers")
    return 1 if violations else 0


if __name__ == "__main__":
    raise SystemExit(main())
