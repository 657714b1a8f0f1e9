"""Every lazily exported name resolves, and the TYPE_CHECKING block is the whole table."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

from efold.lazy import EXPORT_LINE

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAZY_PACKAGES = sorted(
    p.parent.name for p in ROOT.glob("*/__init__.py") if "lazy_exports(" in p.read_text()
)


def _type_checking_imports(init: pathlib.Path) -> list[tuple[str, str, str | None]]:
    """(module, name, alias) of every import inside ``if TYPE_CHECKING:``."""
    found = []
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom), ast.unparse(stmt)
                found.extend((stmt.module or "", a.name, a.asname) for a in stmt.names)
    return found


def test_the_lazy_packages_are_the_ones_expected() -> None:
    assert LAZY_PACKAGES == ["corpus", "folds", "guard", "registry"]


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_typed_import_is_a_table_line(package: str) -> None:
    """A line the runtime table would not read (another form, two names on a line) fails
    here rather than as a missing attribute in a child."""
    init = ROOT / package / "__init__.py"
    imports = _type_checking_imports(init)
    table = EXPORT_LINE.findall(init.read_text())
    assert imports, "no exports"
    assert all(alias == name for _, name, alias in imports)
    assert sorted((module, name) for module, name, _ in imports) == sorted(table)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_exported_name_resolves_to_its_module(package: str) -> None:
    module = importlib.import_module(f"efold.{package}")
    for defining, name in EXPORT_LINE.findall((ROOT / package / "__init__.py").read_text()):
        assert getattr(module, name) is getattr(importlib.import_module(defining), name)
        assert name in dir(module)
    with pytest.raises(AttributeError):
        _ = module.no_such_name
