"""Whether the commands a case runs can run here, checked before any run is judged.

A case's test tool and its ``tests-pass`` oracle run commands of ``tools.test.commands``
(``boundary.runner.run_contained``). A command whose program is missing (``python -m
pytest`` on an interpreter without pytest) does not fail the agent's work: it makes the
oracle unable to judge it. Scored, it would read as a fold losing the case (every arm
fails alike, the report blames the folds). So a check that cannot run **refuses**
(``boundary_runner_unavailable``, naming the case and the command) before anything is
run or judged: ``boundary validate`` and ``boundary run`` on the cases they load, a
campaign when it selects its cases (at registration, before any slot).

What "can run" means, per command (resolved as ``run_contained`` resolves it):

* ``python``/``python3 [-opts] -m MODULE ...``: efold's interpreter finds ``MODULE``
  in the contained environment (a probe run by ``run_contained`` itself, so its
  ``PATH``, ``HOME`` and lack of ``PYTHONPATH`` are the command's), or the fixture
  provides it at its root (``MODULE.py`` or a ``MODULE/`` directory: ``-m`` puts the
  working directory first on ``sys.path``);
* ``python``/``python3`` with a script or ``-c``: efold's interpreter runs it, so yes
  (a script missing from the workspace is the agent's or the case's failure, judged);
* a path with a ``/``: relative to the workspace, a file of the fixture; absolute, an
  executable file;
* any other program: found on the contained ``PATH``.

The interpreter probe is cached per (interpreter, module) for the life of the process:
a campaign selects its cases several times (registration, plan, run setup).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from efold.boundary.case import Case
from efold.boundary.errors import BoundaryError
from efold.boundary.runner import PYTHON_NAMES, SAFE_PATH, run_contained
from efold.errors import Code

# The probe exits 0 when the module is found, 3 when it is not (or a parent package
# of a dotted name is missing: find_spec raises, the interpreter exits 1).
_PROBE: Final = ("import importlib.util, sys; "
                 "sys.exit(0 if importlib.util.find_spec(sys.argv[1]) is not None else 3)")
_PROBE_TIMEOUT_S: Final = 60.0


def module_of(argv: Sequence[str]) -> str | None:
    """The module of ``python [-opts] -m MODULE ...``; None for any other command."""
    if not argv or argv[0] not in PYTHON_NAMES:
        return None
    for index in range(1, len(argv)):
        arg = argv[index]
        if arg == "-m":
            return argv[index + 1] if index + 1 < len(argv) else None
        if not arg.startswith("-") or arg == "-c":
            return None  # a script or -c: whatever follows is its arguments
    return None


@functools.cache
def interpreter_finds(executable: str, module: str) -> bool:
    """Whether ``executable`` (efold's interpreter) finds ``module`` when run contained,
    from an empty working directory."""
    with tempfile.TemporaryDirectory(prefix="efold-runner-check-") as cwd:
        result = run_contained(["python", "-c", _PROBE, module], Path(cwd),
                               timeout_s=_PROBE_TIMEOUT_S)
    return result.exit_code == 0


def _fixture_provides(fixture: Path, module: str) -> bool:
    top = module.split(".", 1)[0]
    return (fixture / f"{top}.py").is_file() or (fixture / top).is_dir()


def command_problem(argv: Sequence[str], fixture: Path) -> str | None:
    """Why ``argv`` cannot run on a copy of ``fixture`` here, or None (module docstring)."""
    module = module_of(argv)
    if module is not None:
        if _fixture_provides(fixture, module) or interpreter_finds(sys.executable, module):
            return None
        return f"{sys.executable} has no module {module!r} (install it, e.g. pip install {module})"
    if argv[0] in PYTHON_NAMES:
        return None
    program = argv[0]
    if "/" in program:
        if os.path.isabs(program):
            if os.path.isfile(program) and os.access(program, os.X_OK):
                return None
            return f"{program!r} is not an executable file"
        if (fixture / program).is_file():
            return None
        return f"{program!r} is not a file of the workspace"
    path = os.pathsep.join([os.path.dirname(sys.executable), SAFE_PATH])
    if shutil.which(program, path=path) is not None:
        return None
    return f"{program!r} is not on the contained PATH ({path})"


def runner_problems(case: Case) -> list[str]:
    """Every command of ``case`` that cannot run here, with the reason."""
    test = case.sidecar.tools.test
    problems: list[str] = []
    for command in (test.commands if test is not None else []):
        problem = command_problem(command, case.workspace)
        if problem is not None:
            problems.append(f"{' '.join(command)}: {problem}")
    return problems


def require_runners(cases: Iterable[Case]) -> None:
    """Refuse (``boundary_runner_unavailable``) when some case's command cannot run
    here, naming the first such case and every command of it that cannot."""
    for case in cases:
        problems = runner_problems(case)
        if problems:
            raise BoundaryError(Code.BOUNDARY_RUNNER_UNAVAILABLE,
                                f"{case.id}: {'; '.join(problems)}: its checks cannot run, "
                                "so it cannot be judged")
