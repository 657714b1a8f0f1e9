"""What the tests need to know about who runs them (tests/conftest.py puts this folder
on ``sys.path``). The README's test command runs as root in CI and as an ordinary user
on most machines; the tests hold in both.

* ``REAL_RUN_FLAGS``: a real run (``smoke``, ``pilot --real``) refuses to start without a
  cgroup (``containment_unavailable``) unless its operator passes
  ``--process-group-containment``. Where this user can make no cgroup (an ordinary user
  without a delegated one), the real-route tests pass it, as such an operator would;
  where it can, they pass nothing and the runs are cgroup-contained.
* ``needs_root``: a test that must make a file another user owns (``chown``), which only
  root can, is skipped, saying so, for anyone else.
* ``without_containment_warning``: a command's stderr without the one line an ordinary
  user always gets at run open (``warning: containment: process-group, ...``).
"""

from __future__ import annotations

import os

import pytest

from efold.controller.processes.cgroup_mount import NoCgroup2, find_cgroup2

REAL_RUN_FLAGS: list[str] = (["--process-group-containment"]
                             if isinstance(find_cgroup2(), NoCgroup2) else [])

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: makes a file another user owns (chown)")


def without_containment_warning(stderr: str) -> str:
    return "".join(line for line in stderr.splitlines(keepends=True)
                   if not line.startswith(("warning: containment:",
                                           "efold: warning: containment:")))
