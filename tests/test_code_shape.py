"""The code's shape: short modules and functions, and a duplicate-code check (run in CI) that sees a repeated block."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def _package_files() -> list[Path]:
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return sorted(path for directory in set(package_dirs.values()) for path in (ROOT / directory).rglob("*.py"))


def test_no_function_in_the_package_is_longer_than_80_lines() -> None:
    files = _package_files()
    assert len(files) > 100
    long = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in files
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


def test_no_module_is_longer_than_500_lines() -> None:
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=False)
    files = [ROOT / name for name in tracked.stdout.split()] if tracked.returncode == 0 else _package_files()
    assert len(files) > 100
    long = {
        str(path.relative_to(ROOT)): count
        for path in files
        if path.exists() and (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, "split these into modules that do one job each"


REPEATED = """
def {name}(values, steps):
    total = 0.0
    for value in values:
        total += value * steps
        if total > 100:
            total -= 100
    scaled = total / max(steps, 1)
    return round(scaled, 3)
"""


@pytest.mark.skipif(shutil.which("pylint", path=str(Path(sys.executable).parent)) is None, reason="pylint (dev)")
def test_the_duplicate_code_check_sees_a_block_repeated_in_two_modules(tmp_path: Path) -> None:
    for name in ("first", "second"):
        (tmp_path / f"{name}.py").write_text(REPEATED.format(name=name))
    pylint = str(Path(sys.executable).parent / "pylint")
    run = [pylint, "--rcfile", str(ROOT / "pyproject.toml"), "first.py", "second.py"]
    found = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert found.returncode != 0 and "duplicate-code" in found.stdout, found.stdout + found.stderr
    (tmp_path / "second.py").write_text("def second():\n    return 1\n")
    clean = subprocess.run(run, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert clean.returncode == 0, clean.stdout + clean.stderr
