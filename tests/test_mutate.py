"""``scripts/mutate.py``: the mutants it makes, and that the mutated file always comes back
byte-exact (after a kill, a survivor, and a Ctrl-C in the middle of a test run)."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "mutate.py"

MODULE = '''"""A docstring with 1 and True: never mutated."""

LIMIT = 10


def admit(total: int, rmax: int, cap: int, stopped: bool) -> bool:
    if stopped:
        return False
    return total + rmax <= cap and rmax > 0


def label(n: int) -> str:
    return f"{n + 1} items"
'''

TESTS = '''from rules import admit


def test_admit_at_the_cap() -> None:
    assert admit(5, 5, 10, False)
    assert not admit(6, 5, 10, False)
    assert not admit(0, 5, 10, True)
'''


@pytest.fixture(scope="module")
def mutate() -> ModuleType:
    spec = importlib.util.spec_from_file_location("efold_mutate_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "rules.py").write_text(MODULE)
    (tmp_path / "test_rules.py").write_text(TESTS)
    (tmp_path / "conftest.py").write_text(
        "import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parent))\n")
    return tmp_path


def _describe(mutants: list) -> list[str]:  # type: ignore[type-arg]
    return [f"{m.line} {m.operator} {m.old} -> {m.new}" for m in mutants]


def test_the_mutants_of_a_function(mutate: ModuleType, tree: Path) -> None:
    mutants = mutate.find_mutants(tree, "rules.py", ["admit"])
    assert _describe(mutants) == [
        "7 condition-False stopped -> False",
        "7 condition-True stopped -> True",
        "8 swap-bool False -> True",
        "9 flip-compare total + rmax <= cap -> (total + rmax < cap)",
        "9 drop-operand total + rmax <= cap and rmax > 0 -> (rmax > 0)",
        "9 drop-operand total + rmax <= cap and rmax > 0 -> (total + rmax <= cap)",
        "9 swap-and-or total + rmax <= cap and rmax > 0 -> (total + rmax <= cap or rmax > 0)",
        "9 flip-compare rmax > 0 -> (rmax >= 0)",
        "9 constant+1 0 -> (1)",
        "9 constant-1 0 -> (-1)",
    ]
    everything = mutate.find_mutants(tree, "rules.py", [])
    # The module constant is mutated; the docstring and the f-string never are.
    assert "3 constant+1 10 -> (11)" in _describe(everything)
    assert not [m for m in everything if m.line in (1, 13)]
    with pytest.raises(SystemExit):
        mutate.find_mutants(tree, "rules.py", ["no_such_function"])


def _sandbox(mutate: ModuleType, tree: Path) -> object:
    return mutate.Sandbox(root=tree, tree=tree, python=Path(sys.executable))


def test_a_killed_and_a_surviving_mutant_leave_the_file_byte_exact(
        mutate: ModuleType, tree: Path) -> None:
    rules = tree / "rules.py"
    before, mtime = rules.read_bytes(), rules.stat().st_mtime_ns
    by_text = {(m.old, m.new): m for m in mutate.find_mutants(tree, "rules.py", ["admit"])}
    sandbox = _sandbox(mutate, tree)
    killed = mutate.run_mutant(sandbox, by_text[("total + rmax <= cap", "(total + rmax < cap)")],
                               ["test_rules.py"], 120)
    assert killed.killed and killed.how == "failed"
    assert rules.read_bytes() == before and rules.stat().st_mtime_ns == mtime
    # `rmax > 0` -> `rmax >= 0`: no test sends rmax = 0, so it survives (a finding).
    survived = mutate.run_mutant(sandbox, by_text[("rmax > 0", "(rmax >= 0)")],
                                 ["test_rules.py"], 120)
    assert not survived.killed and survived.how == "passed"
    assert rules.read_bytes() == before and rules.stat().st_mtime_ns == mtime
    assert mutate._summary([killed, survived]) == [
        "rules.py: 1 of 2 killed (50%)", "total: 1 of 2 killed (50%)"]


def test_ctrl_c_during_a_mutant_restores_the_file(mutate: ModuleType, tree: Path) -> None:
    (tree / "test_slow.py").write_text("import time\n\ndef test_slow() -> None:\n"
                                       "    time.sleep(60)\n")
    rules = tree / "rules.py"
    before = rules.read_bytes()
    (mutant,) = [m for m in mutate.find_mutants(tree, "rules.py", ["admit"])
                 if m.operator == "condition-True"]
    main = threading.get_ident()
    timer = threading.Timer(3.0, lambda: signal.pthread_kill(main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            mutate.run_mutant(_sandbox(mutate, tree), mutant, ["test_slow.py"], 120)
    finally:
        timer.cancel()
    assert rules.read_bytes() == before
    assert b"if True" not in rules.read_bytes()


def test_list_prints_the_mutants_and_runs_nothing(mutate: ModuleType,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert mutate.main(["--target", "controller/processes/proof.py:prove", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"{len(out) - 1} mutants" and len(out) > 10
    assert all(line.startswith("controller/processes/proof.py:") for line in out[:-1])
    assert any("entry.pgid != member.pgid -> False" in line for line in out)


def test_the_sandbox_imports_the_copy(mutate: ModuleType, tmp_path: Path) -> None:
    # The copy, never this checkout, is what its interpreter (and a `python -I` child)
    # imports; a mutant written there is seen there and only there.
    box = tmp_path / "box"
    box.mkdir()
    sandbox = mutate.make_sandbox(box)
    assert os.path.islink(sandbox.root / "pkgroot" / "efold")
    done = subprocess.run([str(sandbox.python), "-I", "-c",
                           "import efold; print(efold.__file__)"], cwd=tmp_path,
                          env=sandbox.environment(), capture_output=True, text=True,
                          timeout=120, check=True)
    where = Path(done.stdout.strip()).resolve()
    assert where.is_relative_to(sandbox.tree.resolve())
    assert where != (SCRIPT.parents[1] / "__init__.py").resolve()
