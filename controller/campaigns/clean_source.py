"""``--require-clean-source``: a run refuses when a fold's source is a git checkout with
changes not committed.

A registration pins every fold that is not efold's by the bytes it runs
(``folds.pinning``), so a changed file never runs unseen. This check is the operator's
stronger promise, for a run whose results will be cited by commit: each command, proxy
and plugin fold's files (the resolved program and the argument files of a command; the
files a plugin's distribution lists, and the source directories an editable install's
``.pth`` file names) are looked up in their git checkout, and a checkout refuses
(``fold_source_unclean``) when ``git status`` shows anything (modified, staged, deleted
or untracked files, ignored ones excepted; submodules included) or when an index entry
hides a change from it (the assume-unchanged and skip-worktree flags). A file outside any
checkout has no commit to be clean against and passes; a checkout git will not read
(another owner's, ``safe.directory``) refuses, saying why. Git runs with a minimal
environment, so no ``GIT_*`` variable redirects it.
"""

from __future__ import annotations

import ast
import os
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from efold.controller.campaigns.campaign import Role
from efold.controller.errors import ControllerError
from efold.errors import Code
from efold.folds.pinning import resolve_program
from efold.folds.registry import BUILTIN_ARMS, plugin_entry_point

__all__ = ["fold_files", "require_clean_source", "unclean_checkouts"]

GIT_TIMEOUT_S: Final = 30
_SHOWN: Final = 3  # entries of a dirty checkout named in the refusal


def fold_files(role: Role) -> tuple[list[Path], list[Path]]:
    """What a role's fold runs from, links resolved, as (files that must be committed in
    their checkout, paths whose checkout must be clean); nothing for a built-in arm,
    whose code the registration's build digest binds.

    A command's argument files must be committed (``python3 fold.py``: the fold is
    ``fold.py``, ignored by git or not); its program (usually an interpreter, built, not
    committed), its working directory (``python -m`` finds modules there) and the
    directories its ``PYTHONPATH`` names must sit in clean checkouts. So must a plugin's
    installed files and the source directories of an editable install (a ``.pth`` path
    line, or the module map of setuptools' editable finder)."""
    committed: list[Path] = []
    clean: list[Path] = []
    if role.command is not None:
        program = resolve_program(role.command[0]) if role.command else None
        clean += [] if program is None else [Path(program)]
        for arg in role.command[1:]:
            path = Path(role.cwd, arg) if role.cwd else Path(arg)
            if path.is_file():
                committed.append(path)
        clean += [Path(role.cwd)] if role.cwd else []
        clean += [Path(p) for p in (role.env or {}).get("PYTHONPATH", "").split(os.pathsep)
                  if p and os.path.isdir(p)]
    elif role.arm not in BUILTIN_ARMS:
        dist = plugin_entry_point(role.arm).dist
        listed_files = [] if dist is None or dist.files is None else \
            [Path(str(dist.locate_file(listed))) for listed in dist.files]
        for path in listed_files:
            clean.append(path)
            if path.suffix == ".pth" and path.is_file():
                clean += [Path(line.strip()) for line in _pth_lines(path)]
            elif path.name.startswith("__editable__") and path.suffix == ".py" \
                    and path.is_file():
                clean += [Path(p) for p in _finder_roots(path)]
    return ([Path(os.path.realpath(p)) for p in committed],
            [Path(os.path.realpath(p)) for p in clean])


def _pth_lines(path: Path) -> Iterable[str]:
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.strip() and not line.startswith(("#", "import ")) and os.path.isdir(line.strip()):
            yield line


def _finder_roots(path: Path) -> list[str]:
    """The source paths of setuptools' editable finder (its ``MAPPING`` of package
    names to paths), read as data: the module is never imported."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "MAPPING" for t in node.targets):
            try:
                mapping = ast.literal_eval(node.value)
            except ValueError:
                return []
            if isinstance(mapping, dict):
                return [str(v) for v in mapping.values() if isinstance(v, str)]
    return []


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C",
           "HOME": os.environ.get("HOME", "/nonexistent")}
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          env=env, timeout=GIT_TIMEOUT_S, check=False)


def unclean_checkouts(paths: Sequence[Path],
                      elsewhere: Sequence[Path] = ()) -> dict[str, str]:
    """Each git checkout holding one of ``paths`` or ``elsewhere`` that is not clean, and
    why; a file of ``paths`` must moreover be tracked there."""
    tops: set[Path] = set()
    files: dict[Path, list[Path]] = {}  # checkout -> the fold files in it
    out: dict[str, str] = {}
    found_in: dict[Path, Path | None] = {}  # directory -> its checkout (one git each)
    for path in (*paths, *elsewhere):
        where = path if path.is_dir() else path.parent
        if not where.is_dir():
            continue
        if where not in found_in:
            found = _git(where, "rev-parse", "--show-toplevel")
            found_in[where] = Path(found.stdout.strip()) if found.returncode == 0 else None
            if found.returncode != 0 and ("dubious ownership" in found.stderr
                                          or "safe.directory" in found.stderr):
                out[str(where)] = "git will not read this checkout (another owner's)"
        top = found_in[where]
        if top is None:
            continue  # not in a checkout: nothing to be clean against
        tops.add(top)
        if path.is_file() and path in paths:
            files.setdefault(top, []).append(path)
    for top, listed in sorted(files.items()):
        # A fold file git does not track (one it ignores, say) was never committed.
        relative = [os.path.relpath(p, top) for p in listed]
        untracked = [rel for rel in relative
                     if _git(top, "ls-files", "--error-unmatch", "--", rel).returncode != 0]
        if untracked:
            out[str(top)] = "fold files not committed: " + ", ".join(untracked[:_SHOWN])
    for top in sorted(tops - {Path(t) for t in out}):
        status = _git(top, "status", "--porcelain=v1", "--untracked-files=all",
                      "--ignore-submodules=none")
        flags = _git(top, "ls-files", "-v")
        if status.returncode != 0 or flags.returncode != 0:
            out[str(top)] = "git status failed: " + (status.stderr or flags.stderr).strip()[:200]
            continue
        changed = [line[3:] for line in status.stdout.splitlines() if line.strip()]
        hidden = [line[2:] for line in flags.stdout.splitlines()
                  if line[:1].islower() or line[:1] == "S"]
        if changed:
            out[str(top)] = (f"{len(changed)} uncommitted change(s): "
                             + ", ".join(changed[:_SHOWN]) + ("..." if len(changed) > _SHOWN
                                                              else ""))
        elif hidden:
            out[str(top)] = (f"{len(hidden)} index entries marked assume-unchanged or "
                             "skip-worktree: " + ", ".join(hidden[:_SHOWN]))
    return out


def require_clean_source(roles: Sequence[Role]) -> None:
    """``fold_source_unclean`` unless every fold's checkout is clean (module docstring)."""
    # Imported here: importlib.metadata is ~20 ms of every pilot's start, and only a
    # plugin fold's files need it.
    from importlib.metadata import PackageNotFoundError

    committed: list[Path] = []
    clean: list[Path] = []
    try:
        for role in roles:
            files, paths = fold_files(role)
            committed += files
            clean += paths
    except PackageNotFoundError as exc:
        raise ControllerError(Code.FOLD_SOURCE_UNCLEAN, f"a plugin's files: {exc}") from exc
    try:
        dirty = unclean_checkouts(committed, clean)
    except (OSError, subprocess.SubprocessError) as exc:
        raise ControllerError(Code.FOLD_SOURCE_UNCLEAN,
                              f"cannot run git to check the folds' checkouts: {exc}") from exc
    if dirty:
        raise ControllerError(Code.FOLD_SOURCE_UNCLEAN, "; ".join(
            f"{top}: {why}" for top, why in dirty.items())
            + " (--require-clean-source: commit them, or run without it)")
