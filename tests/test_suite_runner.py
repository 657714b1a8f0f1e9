"""What a newcomer types around the README's test command works or says why
(tests/conftest.py): the xdist groups' guard names the option that dropped them, and a
test file from outside the checkout runs beside the suite's.

Each test runs pytest in a real child process on this checkout, with the addopts of
pyproject.toml (xdist included), as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUARDED = "tests/model_server"  # a serial group whose tests skip, or stop at collection


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    # not this run's xdist worker identity, nor the model servers: a nested run that
    # reached a real-server test would otherwise talk to it
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "EFOLD_MODEL_SERVER", "EFOLD_GEMMA"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("dist", ["load", "worksteal"])
def test_a_dist_mode_that_drops_the_groups_is_named(dist: str) -> None:
    done = _pytest(GUARDED, "-n", "2", "--dist", dist)
    assert done.returncode == 4, done.stdout + done.stderr
    assert (f"has no @group suffix): --dist {dist} does not keep them: leave --dist at "
            "loadgroup (pyproject.toml's addopts) or run with -n 0") in done.stdout + done.stderr


def test_the_default_dist_mode_keeps_the_groups() -> None:
    done = _pytest(GUARDED, "-n", "2", "--co")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "groups are not in effect" not in done.stdout + done.stderr


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_test_file_outside_the_checkout_runs_beside_the_suite(
    tmp_path: Path, workers: str
) -> None:
    outside = tmp_path / "test_outside.py"
    outside.write_text("def test_outside() -> None:\n    assert True\n")
    done = _pytest("-n", workers, "tests/test_lazy_exports.py", str(outside))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_the_tests_that_list_the_installed_plugins_share_the_installers_group() -> None:
    """A plugin another worker installs meanwhile would be one more name, or a rejected
    duplicate, in the list these tests assert on: they run in the installers' group."""
    files = ["tests/folds/test_plugins.py", "tests/folds/test_fold_guide.py",
             "tests/controller/test_fold_pinning.py", "tests/test_lazy_exports.py"]
    grouped = _pytest("--co", "-n", "0", "-m", "xdist_group", *files)
    everything = _pytest("--co", "-n", "0", *files)
    assert grouped.returncode == everything.returncode == 0, grouped.stdout + grouped.stderr

    def modules(listing: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for line in listing.splitlines():
            if "::" in line:
                found[line.split("::")[0]] = found.get(line.split("::")[0], 0) + 1
        return found

    assert modules(grouped.stdout) == {
        name: count for name, count in modules(everything.stdout).items()
        if name != "tests/test_lazy_exports.py"}
    assert set(modules(grouped.stdout)) == set(files[:3])
