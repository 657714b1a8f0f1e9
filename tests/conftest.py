"""Shared fixtures: the original suite and one hard trace (session-scoped), a run
(directory, lease, journal, epoch) for the process tests, trio for anyio tests, and on
sys.path the process harness (tests/worker/programs/proc_harness.py) and the shared
test material (tests/kit/efold_test_kit.py)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).resolve().parent / "worker" / "programs"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "kit"))

from proc_harness import Run, open_run

from efold.corpus.model import SuiteItem


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    opened = open_run(tmp_path)
    yield opened
    opened.close()


@pytest.fixture(scope="session")
def original_items() -> list[SuiteItem]:
    from efold.corpus import original_suite

    return original_suite()


@pytest.fixture(scope="session")
def hard_item() -> SuiteItem:
    from efold.corpus import generate_hard

    return generate_hard(101)


# CI decides whether a submission lands, so there the property tests run on a fixed
# seed (reproducible verdicts); everywhere else they explore fresh examples each run.
if "CI" in os.environ:
    settings.register_profile("ci", derandomize=True, database=None)
    settings.load_profile("ci")


# The suite runs on every CPU (pytest-xdist, `-n logical` in pyproject.toml). Tests that
# share one outside thing run one at a time, on one worker:
# - each cluster module starts a three-node Ray cluster of its own (two at once would
#   fight over two cores and Ray's ports);
# - the model-server tests share the one local model server;
# - the tests that install an entry-point fold into the venv's site-packages
#   (``plugin_kit``) install arms of fixed names, which two at once would register twice;
#   and the tests that list the installed plugins (``plugin_arms``) run with them, since a
#   plugin installed meanwhile is one more name, or a duplicate that is rejected, in the
#   list they assert on (tests/folds/test_plugins.py expects exactly one rejection).
SERIAL_GROUPS = {"cluster": "ray-cluster", "model_server": "model-server"}
GROUPS_FIRST = ("model-server", "ray-cluster", "site-packages")  # the longest first
TESTS = Path(__file__).resolve().parent
PLUGIN_USERS = ("installed_plugin", "plugin_arms")  # a test module that imports either


def _top(parts: tuple[str, ...]) -> str:
    """The folder under tests/ of a path relative to the checkout ('' for none)."""
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else ""


def _top_of(path: Path) -> str:
    """The folder under tests/ of a collected file; '' for one outside the checkout (a
    test file named on the command line beside the suite's)."""
    if not path.is_relative_to(TESTS.parent):
        return ""
    return _top(path.relative_to(TESTS.parent).parts)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    groups: dict[str, str] = {}
    for item in items:
        group = SERIAL_GROUPS.get(_top_of(Path(item.path)))
        module = getattr(item, "module", None)
        if group is None and any(hasattr(module, name) for name in PLUGIN_USERS):
            group = "site-packages"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            groups[item.nodeid] = group
    # Each group is one long unit of work for one worker: started first, it runs beside
    # everything else instead of after it (the model server's tests took 7 minutes).
    first = {group: rank for rank, group in enumerate(GROUPS_FIRST)}
    items.sort(key=lambda item: first.get(groups.get(item.nodeid, ""), len(first)))


def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the xdist controller: a grouped test's id carries its group
    (``...@ray-cluster``), and that suffix is what keeps the group on one worker. Only
    ``--dist loadgroup`` keeps it, and some pytest and xdist versions drop it silently
    (pytest-xdist issue 1386, pytest 9.2); then the groups would run at once and fail at
    random, so stop with the reason."""
    lost = [i for i in ids
            if "@" not in i and _top(Path(i.partition("::")[0]).parts) in SERIAL_GROUPS]
    if not lost:
        return
    dist = node.config.getoption("dist", None)
    fix = (f"--dist {dist} does not keep them: leave --dist at loadgroup (pyproject.toml's "
           "addopts) or run with -n 0" if dist != "loadgroup" else
           "install the test extra's versions (pip install -e '.[test]') or run with -n 0")
    pytest.exit(f"xdist groups are not in effect ({lost[0]} has no @group suffix): {fix}",
                returncode=4)
