"""The import contract (scripts/check_imports.py): the project keeps it, and a forbidden import breaks it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_imports", ROOT / "scripts" / "check_imports.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while it is built
    spec.loader.exec_module(module)
    return module


def _project(tmp_path: Path, layers: list[str], files: dict[str, str], private: str = "") -> Path:
    """A toy project: ``pkg`` in pkg/ and ``pkg.parts`` in parts/ (mapped like vla_recover.envs is)."""
    quoted = ", ".join(f'"{line}"' for line in layers)
    (tmp_path / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"pkg" = "pkg"\n"pkg.parts" = "parts"\n\n'
        f"[tool.vla_recover]\nimport_layers = [{quoted}]\n\n[tool.vla_recover.private]\n{private}"
    )
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_the_project_keeps_its_import_contract() -> None:
    violations, checked = _checker().check(ROOT)
    assert [str(v) for v in violations] == []
    assert checked > 100  # the contract reads the project's imports, not an empty tree


def test_a_function_local_import_from_a_part_into_the_core_breaks_the_contract(tmp_path: Path) -> None:
    checker = _checker()
    root = _project(
        tmp_path,
        ["pkg.core", "pkg.parts"],
        {
            "pkg/__init__.py": "",
            "pkg/core.py": "from pkg.parts import arm\n",
            "parts/__init__.py": "",
            "parts/arm.py": "def move():\n    from pkg.core import plan\n    return plan\n",
        },
    )
    violations, checked = checker.check(root)
    assert checked == 2
    assert [(str(v.path), v.line, v.importer) for v in violations] == [("parts/arm.py", 2, "pkg.parts.arm")]
    assert "pkg.core is a layer above pkg.parts" in str(violations[0])
    assert checker.main([str(root)]) == 1


def test_packages_on_one_line_are_independent_and_relative_imports_count(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        ["pkg.a | pkg.b"],
        {"pkg/__init__.py": "", "pkg/a/__init__.py": "from ..b import thing\n", "pkg/b.py": "thing = 1\n"},
    )
    violations, _ = _checker().check(root)
    assert [v.imported for v in violations] == ["pkg.b.thing"]
    assert "independent" in violations[0].why


def test_a_layer_that_names_no_module_is_an_error(tmp_path: Path) -> None:
    root = _project(tmp_path, ["pkg.core", "pkg.gone"], {"pkg/__init__.py": "", "pkg/core.py": ""})
    with pytest.raises(SystemExit, match=r"'pkg\.gone' holds no module"):
        _checker().check(root)


def test_a_contract_that_sees_no_import_between_layers_fails(tmp_path: Path) -> None:
    root = _project(tmp_path, ["pkg.core", "pkg.parts"], {"pkg/core.py": "", "parts/__init__.py": ""})
    assert _checker().main([str(root)]) == 1


def test_a_private_module_or_attribute_used_outside_its_package_breaks_the_contract(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        ["pkg.core", "pkg.parts"],
        {
            "pkg/__init__.py": "",
            "pkg/core/__init__.py": "from pkg.core.store import Store\n",
            "pkg/core/store.py": "from pkg.core import index\nclass Store:\n    _index = None\n",
            "pkg/core/index.py": "",
            "pkg/core/use.py": "from pkg.parts import arm\n",
            "parts/__init__.py": "",
            "parts/arm.py": "",
            "pkg/loop.py": "from pkg.core.index import Index\n",
            "tests/__init__.py": "",
            "tests/test_store.py": "def test(store):\n    return store._index\n",
        },
        private='"pkg.core.index" = ["pkg.core"]\n"._index" = ["pkg.core"]\n',
    )
    violations, _ = _checker().check(root)
    assert sorted((str(v.path), v.line, v.imported) for v in violations) == [
        ("pkg/loop.py", 1, "pkg.core.index.Index"),
        ("tests/test_store.py", 2, "_index"),
    ]
    assert "private to pkg.core" in violations[0].why
