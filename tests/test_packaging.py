"""The distribution ships the package and its data, never tests or benchmarks."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
    )
    (wheel,) = out.glob("efold-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def test_wheel_ships_the_package_not_tests_or_benchmarks(wheel_names: list[str]) -> None:
    assert "efold/__init__.py" in wheel_names
    assert "efold/py.typed" in wheel_names
    assert "efold/registry/journal.py" in wheel_names
    assert not [n for n in wheel_names if n.startswith(("efold/tests/", "tests/"))]
    assert not [n for n in wheel_names if n.startswith(("efold/benchmarks/", "benchmarks/"))]
    assert not [n for n in wheel_names if "/.ci" in n or n.startswith(".ci")]


def test_console_script_reports_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "efold.controller", "--version"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "efold-controller, version" in out.stdout


def test_readme_test_command_is_what_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "Install and run the tests:" in readme
    assert "awk '/^Install and run the tests:/" in ci
    assert "efold-controller pilot --faux" in readme or "efold-controller --help" in readme
