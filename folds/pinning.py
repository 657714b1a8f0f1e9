"""Fold pins: the identity of the code a campaign role's fold runs, as data.

A registration binds efold's own code through its build digest; a fold that is not
efold's (an entry-point plugin, an external command) is bound here, one identity per
role (``Digests.folds`` is the digest of the list, in role order). The prep child
recomputes its role's pin (``fold_sha256``) just before building and refuses any drift.

Identity per kind:

* built-in arm: ``{"kind": "builtin", "arm": name}``: the build digest covers its code.
* entry-point plugin: ``{"kind": "entry_point", "name", "distribution", "version",
  "files_sha256"}``: ``files_sha256`` is the digest of the sorted (relative path, sha256
  of bytes) pairs of every file the distribution's ``RECORD`` lists, bytecode caches
  (``__pycache__``, ``.pyc``) excluded. A distribution without a readable ``RECORD``,
  or one whose listed file is missing or not a regular file, cannot be pinned.
* external command: ``{"kind": "command", "argv", "executable_sha256",
  "argument_files"}``: the bytes of the resolved program, and of every argument that
  names an existing regular file (so ``python3 fold.py`` pins the script too; a
  relative argument is looked up in the command's ``cwd`` when it has one). A proxy
  fold's command is pinned the same way, as ``"kind": "proxy"``. A command with a
  ``build`` tree adds ``"build_sha256"``, the digest of every file of that tree
  (``folds.build_tree``), so a module the program imports is pinned too.

Anything that cannot be pinned raises ``PluginError`` (``fold_plugin_invalid``).
"""

from __future__ import annotations

import os
import shutil

from efold.digests import digest_of, file_sha256
from efold.errors import Code
from efold.folds.build_tree import build_manifest, manifest_sha256
from efold.folds.errors import FoldError, PluginError
from efold.folds.registry import BUILTIN_ARMS, plugin_entry_point
from efold.folds.spec import FoldSpec

_CHUNK = 1 << 20


def resolve_program(program: str) -> str | None:
    """The executable ``program`` names: an absolute path to an executable regular file,
    or a bare name found on ``PATH``; None otherwise (a relative path with a ``/`` is
    never resolved: it would mean something else in another working directory)."""
    if not program or "\0" in program:
        return None
    if os.path.isabs(program):
        return program if os.path.isfile(program) and os.access(program, os.X_OK) else None
    if os.sep in program or (os.altsep is not None and os.altsep in program):
        return None
    return shutil.which(program)


def _command_identity(arm: str, argv: list[str], kind: str,
                      cwd: str | None, build: str | None) -> dict[str, object]:
    if not argv:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{arm}: empty command")
    executable = resolve_program(argv[0])
    if executable is None:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{arm}: program {argv[0]!r} not found")
    try:
        executable_sha = file_sha256(executable)
        # A relative argument means a file in the directory the command runs in.
        located = {arg: os.path.join(cwd, arg) if cwd else arg for arg in argv[1:]}
        argument_files = {arg: file_sha256(path) for arg, path in located.items()
                          if os.path.isfile(path)}
    except OSError as exc:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"{arm}: cannot read a pinned file") from exc
    identity: dict[str, object] = {
        "kind": kind,
        "argv": list(argv),
        "executable_sha256": executable_sha,
        "argument_files": argument_files,
    }
    if build is not None:  # absent otherwise, so such a pin is what it was before builds
        identity["build_sha256"] = manifest_sha256(build_manifest(build))
    return identity


def _skipped(parts: tuple[str, ...]) -> bool:
    return "__pycache__" in parts or parts[-1].endswith(".pyc")


def _entry_point_identity(name: str) -> dict[str, object]:
    dist = plugin_entry_point(name).dist
    if dist is None:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"plugin {name!r} has no distribution")
    files = dist.files
    if files is None:
        raise PluginError(Code.FOLD_PLUGIN_INVALID,
                          f"plugin {name!r}: its distribution lists no files (no RECORD)")
    entries: dict[str, str] = {}
    for listed in files:
        if not listed.parts or _skipped(listed.parts):
            continue
        path = str(dist.locate_file(listed))
        if not os.path.isfile(path):
            raise PluginError(Code.FOLD_PLUGIN_INVALID,
                              f"plugin {name!r}: listed file {listed.as_posix()} is missing")
        try:
            entries[listed.as_posix()] = file_sha256(path)
        except OSError as exc:
            raise PluginError(Code.FOLD_PLUGIN_INVALID,
                              f"plugin {name!r}: cannot read {listed.as_posix()}") from exc
    return {
        "kind": "entry_point",
        "name": name,
        "distribution": dist.metadata["Name"],
        "version": dist.version,
        "files_sha256": digest_of(sorted(entries.items())),
    }


def fold_identity(spec: FoldSpec) -> dict[str, object]:
    """The pin document of ``spec``'s fold (see the module docstring)."""
    if spec.command is not None:
        return _command_identity(spec.arm, spec.command,
                                 "command" if spec.proxy is None else "proxy", spec.cwd,
                                 spec.build)
    if spec.arm in BUILTIN_ARMS:
        return {"kind": "builtin", "arm": spec.arm}
    try:
        return _entry_point_identity(spec.arm)
    except PluginError:
        raise
    except FoldError as exc:  # fold_unknown: nothing installed under that name
        raise PluginError(Code.FOLD_PLUGIN_INVALID, exc.detail) from exc


def fold_sha256(spec: FoldSpec) -> str:
    """The digest of ``fold_identity(spec)``: what a prep task carries and re-checks."""
    return digest_of(fold_identity(spec))
