"""The import direction of the package (docs/architecture.md §2), checked on the source.

Layers, top to bottom; a module may import its own package and any package of a lower
layer, never a peer or anything above. Every import statement counts, function-local
ones included, and so does ``importlib.import_module("efold...")`` with a literal name.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _load_draw_rooms() -> ModuleType:
    """``scripts/draw_rooms.py``: its import scanner is the one the picture of the rooms
    in docs/architecture.md is drawn with, so the picture and these checks see alike."""
    spec = importlib.util.spec_from_file_location("draw_rooms", ROOT / "scripts" / "draw_rooms.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_draw_rooms = _load_draw_rooms()
_module_imports = _draw_rooms.module_imports
_module = _draw_rooms.module_name

LAYERS: list[set[str]] = [
    {"api"},  # efold from Python: above the controller it launches as a child
    {"controller"},
    {"report", "worker", "certify"},
    {"boundary"},
    {"protocol", "folds"},
    {"guard", "corpus", "ipc", "registry"},
    {"closed_stdout", "digests", "identity", "input_files", "isolation"},
    {"errors", "lazy", "__init__"},  # __init__: the root package (its version)
]
LAYER_OF = {unit: depth for depth, units in enumerate(LAYERS) for unit in units}

# Inside ``controller/``: its rooms, top to bottom (each ``__init__`` says what it owns);
# a room imports its own modules and the rooms below it. ``__main__`` and ``cli`` sit
# above every room (``cli`` loads the commands by name), ``errors`` below them all.
CONTROLLER_ROOMS: list[str] = ["__main__", "cli", "commands", "cluster", "pilot", "rundirs", "campaigns",
                               "processes", "errors"]
CONTROLLER_TOP = {"__init__.py", "__main__.py", "cli.py", "errors.py"}

# Parent-only packages start once per command, not once per child: they import at the
# top, so that a function-local import never hides a cycle there.
PARENT_ONLY = {"controller", "report"}


def _source_files() -> list[pathlib.Path]:
    return sorted(
        p for p in ROOT.rglob("*.py")
        if p.relative_to(ROOT).parts[0] in LAYER_OF or p.parent == ROOT
    )


def _unit(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def _targets(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[tuple[int, str, bool]]:
    """(line, imported efold unit, inside a function) for every import in ``path``."""
    tree = _draw_rooms.parse(path, root)  # a module that does not parse is named
    local: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local.update(id(n) for n in ast.walk(node) if n is not node)
    module = _module(path, root)
    package = module if path.name == "__init__.py" else module[:-1]
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                names.append(".".join([*base, *([node.module] if node.module else [])]))
            elif node.module and node.module.startswith("efold."):
                names.append(node.module.removeprefix("efold."))
            elif node.module == "efold":  # a unit, or a name of the root package itself
                names.extend(a.name if a.name in LAYER_OF else "__init__" for a in node.names)
        elif isinstance(node, ast.Import):
            names.extend(a.name.removeprefix("efold.") for a in node.names
                         if a.name.startswith("efold."))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args
              and isinstance(node.args[0], ast.Constant)
              and str(node.args[0].value).startswith("efold.")):
            names.append(str(node.args[0].value).removeprefix("efold."))
        found.extend((node.lineno, n.split(".")[0], id(node) in local) for n in names if n)
    return found


def _violations() -> tuple[list[str], list[str]]:
    upward: list[str] = []
    hidden: list[str] = []
    for path in _source_files():
        unit = _unit(path)
        for line, target, in_function in _targets(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if target != unit and (target not in LAYER_OF or LAYER_OF[target] <= LAYER_OF[unit]):
                upward.append(f"{where} {unit} -> {target}")
            if unit in PARENT_ONLY and in_function:
                hidden.append(f"{where} imports {target} inside a function")
    return upward, hidden


def _room_violations(root: pathlib.Path) -> list[str]:
    """Imports inside ``controller/`` that climb from a room to one above it, or reach a
    room that is not declared."""
    rank = {room: i for i, room in enumerate(CONTROLLER_ROOMS)}
    found: list[str] = []
    for path in sorted((root / "controller").rglob("*.py")):
        rel = path.relative_to(root / "controller")
        room = rel.parts[0].removesuffix(".py")
        for target in _module_imports(path, root):
            parts = target.split(".")
            if parts[0] != "controller" or len(parts) < 2:
                continue
            other = parts[1]
            if other == room:
                continue
            if room not in rank or other not in rank or rank[other] <= rank[room]:
                found.append(f"controller/{rel} ({room}) -> {target}")
    return found


def test_controller_rooms_import_only_down() -> None:
    assert _room_violations(ROOT) == []


def _layout_problems(root: pathlib.Path) -> list[str]:
    """What in ``controller/`` is neither an entry point nor a declared room. A folder
    without ``__init__.py`` counts: Python would import it as a namespace package, yet
    it would be neither drawn, nor checked as a room, nor shipped."""
    declared = [room for room in CONTROLLER_ROOMS if room not in ("__main__", "cli", "errors")]
    found = [f"controller/{p.name} is not an entry point: move it into a room"
             for p in sorted((root / "controller").glob("*.py"))
             if p.name not in CONTROLLER_TOP]
    for folder in sorted(p for p in (root / "controller").iterdir() if p.is_dir()):
        if folder.name == "__pycache__":
            continue
        if not (folder / "__init__.py").is_file():
            found.append(f"controller/{folder.name}/ has no __init__.py: a room needs one, "
                         "its docstring saying what it owns and may import")
        elif folder.name not in declared:
            found.append(f"controller/{folder.name}/ is not a declared room: add it to "
                         "CONTROLLER_ROOMS in tests/test_layers.py, in import order")
    found += [f"controller/{room}/ is declared in CONTROLLER_ROOMS but missing"
              for room in declared if not (root / "controller" / room / "__init__.py").is_file()]
    return found


def test_controller_top_level_holds_only_its_entry_points_and_rooms() -> None:
    assert _layout_problems(ROOT) == []


def test_the_layout_check_names_a_stray_module_an_undeclared_room_and_a_bare_folder(
    tmp_path: pathlib.Path,
) -> None:
    controller = tmp_path / "controller"
    for room in CONTROLLER_ROOMS:
        if room not in ("__main__", "cli", "errors"):
            (controller / room).mkdir(parents=True)
            (controller / room / "__init__.py").write_text('"""A room."""\n')
    for name in CONTROLLER_TOP:
        (controller / name).write_text("")
    (controller / "__pycache__").mkdir()
    assert _layout_problems(tmp_path) == []
    (controller / "helpers.py").write_text("")
    (controller / "newroom").mkdir()
    (controller / "newroom" / "__init__.py").write_text('"""New."""\n')
    (controller / "bare").mkdir()
    (controller / "bare" / "thing.py").write_text("from efold.errors import Code\n")
    assert _layout_problems(tmp_path) == [
        "controller/helpers.py is not an entry point: move it into a room",
        "controller/bare/ has no __init__.py: a room needs one, its docstring saying what "
        "it owns and may import",
        "controller/newroom/ is not a declared room: add it to CONTROLLER_ROOMS in "
        "tests/test_layers.py, in import order",
    ]


@pytest.mark.parametrize("source", [
    "from efold.controller.pilot.slots import x\n",
    "from ..pilot.slots import x\n",
    "from ..pilot import slots\n",
    "import efold.controller.pilot.slots\n",
    "def f():\n    from efold.controller.pilot import slots\n",
    "import importlib\nimportlib.import_module('efold.controller.pilot.slots')\n",
], ids=["absolute", "relative", "relative-from-package", "import", "in-function",
        "import_module"])
def test_the_room_check_finds_an_upward_import(tmp_path: pathlib.Path, source: str) -> None:
    for room in ("rundirs", "pilot"):
        (tmp_path / "controller" / room).mkdir(parents=True)
        (tmp_path / "controller" / room / "__init__.py").write_text("")
    (tmp_path / "controller" / "__init__.py").write_text("")
    (tmp_path / "controller" / "pilot" / "slots.py").write_text("")
    (tmp_path / "controller" / "rundirs" / "reap.py").write_text(source)
    assert _room_violations(tmp_path) == [
        "controller/rundirs/reap.py (rundirs) -> controller.pilot.slots"]


def test_a_module_that_does_not_parse_is_named(tmp_path: pathlib.Path) -> None:
    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / "ok.py").write_text("x = 1\n")
    (tmp_path / "guard" / "broken.py").write_text("x = 1\ndef broken(:\n")
    assert _targets(tmp_path / "guard" / "ok.py", root=tmp_path) == []
    with pytest.raises(_draw_rooms.RoomsError, match=r"^guard/broken\.py:2: "):
        _targets(tmp_path / "guard" / "broken.py", root=tmp_path)


def test_every_package_is_in_a_layer() -> None:
    units = {_unit(p) for p in ROOT.glob("*/__init__.py")} | {
        p.stem for p in ROOT.glob("*.py")
    }
    assert units <= set(LAYER_OF), sorted(units - set(LAYER_OF))


def test_imports_point_only_down() -> None:
    upward, _ = _violations()
    assert upward == []


def test_parent_only_packages_import_at_the_top() -> None:
    _, hidden = _violations()
    assert hidden == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from efold.controller import cli\n", [(1, "controller", False)]),
        ("def f():\n    from efold.report import x\n", [(2, "report", True)]),
        ("import importlib\nimportlib.import_module('efold.worker.entry')\n",
         [(2, "worker", False)]),
        ("from ..report import schema\n", [(1, "report", False)]),
    ],
)
def test_the_checker_sees_every_kind_of_import(
    tmp_path: pathlib.Path, source: str, expected: list[tuple[int, str, bool]]
) -> None:
    module = tmp_path / "guard" / "probe.py"
    module.parent.mkdir()
    module.write_text(source)
    assert _targets(module, root=tmp_path) == expected


def _circles(root: pathlib.Path, files: list[pathlib.Path]) -> list[list[str]]:
    """Every set of two or more modules that import each other, directly or round a
    longer loop (Tarjan's strongly connected components)."""
    graph = {".".join(_module(f, root)): _module_imports(f, root) for f in files}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other() -> None:
    """A circle hides the order a reader needs: what rests on what. Packages importing
    their own submodules (``__init__`` re-exports) count like any module, and so do the
    top-level modules (``errors``, ``lazy``, the root ``__init__``...)."""
    assert _circles(ROOT, _source_files()) == []


def test_the_circle_check_finds_a_circle_through_a_top_level_module(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "folds").mkdir()
    (tmp_path / "folds" / "__init__.py").write_text("")
    (tmp_path / "folds" / "a.py").write_text("from efold import lazy\n")
    (tmp_path / "lazy.py").write_text("import importlib\nimportlib.import_module('efold.folds.a')\n")
    files = [*sorted((tmp_path / "folds").glob("*.py")), tmp_path / "lazy.py"]
    assert _circles(tmp_path, files) == [["folds.a", "lazy"]]


def test_the_circle_check_finds_a_circle(tmp_path: pathlib.Path) -> None:
    (tmp_path / "folds").mkdir()
    (tmp_path / "folds" / "__init__.py").write_text("")
    (tmp_path / "folds" / "a.py").write_text("from efold.folds.b import x\n")
    (tmp_path / "folds" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from efold.folds import a\n")
    (tmp_path / "folds" / "c.py").write_text("from efold.folds.a import y\n")
    files = sorted((tmp_path / "folds").glob("*.py"))
    assert _circles(tmp_path, files) == [["folds.a", "folds.b"]]


def test_every_package_is_shipped_and_in_the_build_digest() -> None:
    """A package left out of the build digest could change under a registration unseen."""
    import tomllib

    from efold.digests import _BUILD_PACKAGES

    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert packages == set(_BUILD_PACKAGES)
    assert {f"efold.{p}" for p in packages} <= set(shipped)
    assert _unshipped(ROOT, set(shipped)) == []


def _unshipped(root: pathlib.Path, shipped: set[str]) -> list[str]:
    """Every package below a unit (a room of controller/, guard/wire, ...) that the
    wheel leaves out: `pip install .` would install efold without it. The workspace
    fixtures of boundary cases are data, not efold's packages."""
    found = []
    inits = [i for unit in LAYER_OF if (root / unit).is_dir()  # not a venv in the checkout
             for i in (root / unit).rglob("__init__.py")]
    for init in sorted(inits):
        rel = init.parent.relative_to(root)
        if rel.parts[:2] != ("boundary", "cases"):
            name = ".".join(("efold", *rel.parts))
            if name not in shipped:
                found.append(f"{name} is not in pyproject.toml's [tool.setuptools] packages")
    return found


def test_the_shipping_check_names_a_nested_package_left_out(tmp_path: pathlib.Path) -> None:
    for folder in ("controller", "controller/pilot", "controller/newroom",
                   "boundary/cases/B01/workspace/src/shop"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    shipped = {"efold.controller", "efold.controller.pilot"}
    assert _unshipped(tmp_path, shipped) == [
        "efold.controller.newroom is not in pyproject.toml's [tool.setuptools] packages"]
    assert _unshipped(tmp_path, shipped | {"efold.controller.newroom"}) == []


# The journal writer's blocks whose flag is the writer's, not a task's: an ``await``
# inside one would let another task's record fall under it.
_WRITER_FLAG_BLOCKS = ("deferred", "unsynced")


def _awaits_in_deferred_blocks(tree: ast.AST) -> list[int]:
    """Line numbers of an ``await`` (or ``async with``/``async for``) inside a ``with
    ....deferred():`` or ``with ....unsynced():`` block."""
    found: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.With) and any(
                isinstance(item.context_expr, ast.Call)
                and isinstance(item.context_expr.func, ast.Attribute)
                and item.context_expr.func.attr in _WRITER_FLAG_BLOCKS for item in node.items):
            found += [inner.lineno for stmt in node.body for inner in ast.walk(stmt)
                      if isinstance(inner, (ast.Await, ast.AsyncWith, ast.AsyncFor))]
    return found


def test_no_deferred_journal_block_awaits() -> None:
    """``JournalWriter.deferred``'s and ``JournalWriter.unsynced``'s invariant, over every
    module of the package."""
    uses = {name: 0 for name in _WRITER_FLAG_BLOCKS}
    for path in sorted(ROOT.rglob("*.py")):
        if {"tests", "benchmarks", "build"} & set(path.relative_to(ROOT).parts[:1]) \
                or ".venv" in path.parts or ".ci-venv" in path.parts:
            continue
        text = path.read_text()
        found = {name: text.count(f".{name}()") for name in _WRITER_FLAG_BLOCKS}
        if not any(found.values()):
            continue
        uses = {name: uses[name] + found[name] for name in uses}
        assert _awaits_in_deferred_blocks(ast.parse(text)) == [], path
    # deferred: the exit row, the settlement, the assignment, the members; unsynced: the
    # hold, the consumption, the launch.
    assert uses["deferred"] >= 4 and uses["unsynced"] >= 3


def test_the_deferred_check_finds_an_await() -> None:
    tree = ast.parse("async def f(j, x):\n    with j.deferred():\n        j.record()\n"
                     "        await x()\n    with j.unsynced():\n        await x()\n")
    assert _awaits_in_deferred_blocks(tree) == [4, 6]
