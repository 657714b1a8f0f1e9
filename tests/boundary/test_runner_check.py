"""A check that cannot run refuses (``boundary_runner_unavailable``), never scores.

The bundled cases' tests run ``python -m pytest``. On an interpreter without pytest
(``pip install .`` before pytest was a runtime dependency) every ``tests-pass`` oracle
failed, native scored 4 of 22 and the report blamed the folds. Here a real interpreter
without pytest (a venv that sees every package of the test environment except pytest)
runs ``boundary validate``, ``boundary run`` and the bundled campaign's ``pilot``: each
refuses before anything is run or judged. In-process tests pin the rule per command.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path
from typing import Any

import pytest

import efold
from efold.boundary.case import load_case, load_cases
from efold.boundary.errors import BoundaryError
from efold.boundary.lock import write_lock
from efold.boundary.runner_check import (
    command_problem,
    module_of,
    require_runners,
    runner_problems,
)
from efold.boundary.suite import bundled_cases_root, select_cases
from efold.boundary.validate import run_offline
from efold.errors import Code
from tests.boundary.conftest import MakeCase

# Never a module of any environment: the in-process stand-in for a missing runner.
MISSING = "efold_no_such_test_runner"
PYTHON_CASES = 20  # bundled cases whose tests run `python -m pytest -q` (X09, X10: check.py)


@pytest.fixture(scope="module")
def no_pytest_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real interpreter with efold (this tree) and every installed package but pytest."""
    root = tmp_path_factory.mktemp("no-pytest")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")],
                   check=True, timeout=120)
    site = Path(sysconfig.get_paths()["purelib"])
    visible = root / "site"
    visible.mkdir()
    hidden = ("pytest", "_pytest", "py.py", "_hypothesis_pytestplugin", "__editable__")
    for entry in site.iterdir():
        if not entry.name.startswith(hidden) and entry.suffix != ".pth":
            (visible / entry.name).symlink_to(entry)
    pkgroot = root / "pkgroot"
    pkgroot.mkdir()
    (pkgroot / "efold").symlink_to(Path(efold.__file__).resolve().parent)
    (venv_site,) = (root / "venv" / "lib").glob("python*/site-packages")
    (venv_site / "efold-tests.pth").write_text(f"{pkgroot}\n{visible}\n", encoding="utf-8")
    python = root / "venv" / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import efold, importlib.util; print(efold.__file__); "
         "print(importlib.util.find_spec('pytest'))"],
        capture_output=True, text=True, timeout=60, check=True)
    where, spec = probe.stdout.split()
    assert Path(where).resolve() == Path(efold.__file__).resolve() and spec == "None"
    return python


def _efold(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "efold.controller", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_validate_without_the_runner_says_not_valid(no_pytest_python: Path,
                                                    tmp_path: Path) -> None:
    done = _efold(no_pytest_python, tmp_path, "boundary", "validate", "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is False
    codes = {c["id"].split("-")[0]: c.get("code") for c in report["cases"]}
    assert len(codes) == PYTHON_CASES + 2
    unavailable = [k for k, code in codes.items() if code == "boundary_runner_unavailable"]
    assert len(unavailable) == PYTHON_CASES
    assert codes["X09"] is None and codes["X10"] is None  # `python check.py` runs anywhere
    text = _efold(no_pytest_python, tmp_path, "boundary", "validate")
    assert text.returncode == 2
    assert "2 of 22 valid and locked" in text.stdout
    # The same command on this interpreter (pytest installed): all valid.
    same = subprocess.run([sys.executable, "-m", "efold.controller", "boundary", "validate"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert same.returncode == 0 and "22 of 22 valid and locked" in same.stdout


def test_run_without_the_runner_refuses_before_any_case(no_pytest_python: Path,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = _efold(no_pytest_python, tmp_path, "boundary", "run", "--faux", "--arms", "native",
                  "--out", str(out))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("refused: boundary_runner_unavailable (B01-")
    assert "has no module 'pytest'" in done.stderr
    assert done.stdout == "" and not out.exists()  # nothing ran, nothing scored


def test_the_campaign_without_the_runner_refuses_before_any_slot(no_pytest_python: Path,
                                                                  tmp_path: Path) -> None:
    done = _efold(no_pytest_python, tmp_path, "pilot", "--faux", "--campaign", "boundary")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refused: boundary_runner_unavailable (B01-" in done.stderr
    assert list(tmp_path.iterdir()) == []  # no run directory, no slot, no results


# -- the rule per command, in process ------------------------------------------------------

def _command(data: dict[str, Any], command: list[str]) -> None:
    data["tools"]["test"]["commands"] = [command]
    data["oracle"]["success"][0]["command"] = command


def test_a_missing_module_refuses_every_entry_point(make_case: MakeCase,
                                                    case_root: Path) -> None:
    command = ["python", "-m", MISSING, "-q"]
    case = load_case(make_case(lambda d: _command(d, command)))
    (problem,) = runner_problems(case)
    assert problem.startswith(f"python -m {MISSING} -q: ") and MISSING in problem
    with pytest.raises(BoundaryError) as raised:
        run_offline(case, case.prefix)
    assert raised.value.code is Code.BOUNDARY_RUNNER_UNAVAILABLE
    write_lock(case_root, load_cases(case_root))
    with pytest.raises(BoundaryError) as raised:
        select_cases(case_root, ["all"])
    assert raised.value.code is Code.BOUNDARY_RUNNER_UNAVAILABLE
    assert raised.value.detail.startswith(f"{case.id}: ")


def test_a_module_the_fixture_provides_runs(make_case: MakeCase) -> None:
    # `-m` puts the working directory (the workspace copy) first on sys.path.
    case_dir = make_case(lambda d: _command(d, ["python", "-m", MISSING]))
    (case_dir / "workspace" / f"{MISSING}.py").write_text("raise SystemExit(0)\n")
    case = load_case(case_dir)
    assert runner_problems(case) == []
    require_runners([case])
    assert command_problem(["python", "-m", f"{MISSING}.sub"], case.workspace) is None


def test_the_runner_this_interpreter_has_is_available(tmp_path: Path) -> None:
    assert command_problem(["python", "-m", "pytest", "-q"], tmp_path) is None
    assert command_problem(["python3", "-I", "-m", "pytest"], tmp_path) is None
    assert command_problem(["python", "check.py"], tmp_path) is None
    assert command_problem(["sh", "-c", "true"], tmp_path) is None
    assert command_problem(["python", "-m", MISSING], tmp_path) is not None
    assert command_problem([f"{MISSING}-tool"], tmp_path) is not None
    assert command_problem(["./run-tests"], tmp_path) is not None
    (tmp_path / "run-tests").write_text("#!/bin/sh\n")
    assert command_problem(["./run-tests"], tmp_path) is None
    assert command_problem(["/nonexistent/efold-runner"], tmp_path) is not None
    assert command_problem(["/bin/sh"], tmp_path) is None


def test_module_of_reads_only_python_dash_m() -> None:
    assert module_of(["python", "-m", "pytest", "-q"]) == "pytest"
    assert module_of(["python3", "-I", "-B", "-m", "pytest"]) == "pytest"
    assert module_of(["python", "-m"]) is None
    assert module_of(["python", "check.py", "-m", "pytest"]) is None
    assert module_of(["python", "-c", "import x", "-m", "pytest"]) is None
    assert module_of(["pytest", "-m", "slow"]) is None
    assert module_of([]) is None


def test_the_bundled_cases_can_run_here() -> None:
    # The test environment has the runner the bundled cases name (a runtime dependency).
    require_runners(load_cases(bundled_cases_root()))


def test_every_runner_the_bundled_cases_name_is_a_runtime_dependency() -> None:
    # `pip install .` (the README's main job) must be able to judge the bundled cases:
    # the module each one's commands run is a [project] dependency, not a test extra.
    pyproject = Path(efold.__file__).resolve().parent / "pyproject.toml"
    with pyproject.open("rb") as f:
        requires = tomllib.load(f)["project"]["dependencies"]
    installed = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requires}
    named = {module_of(command) for case in load_cases(bundled_cases_root())
             for command in (case.sidecar.tools.test.commands
                             if case.sidecar.tools.test is not None else [])}
    modules = {m for m in named if m is not None}
    assert modules == {"pytest"}
    assert modules <= installed
