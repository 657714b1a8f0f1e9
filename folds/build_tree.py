"""A fold's build tree: the source directory a command or proxy fold runs from, pinned
file by file, so that a change to any file of it (not only the program and the files its
arguments name) changes the fold's pin and is refused before the fold runs again.

The manifest maps every regular file's path relative to the tree (POSIX form) to the
sha256 of its bytes. Left out, as no build output: hidden entries (a name starting with
``.``: ``.git``, ``.venv``, editor state), ``__pycache__`` directories and ``*.pyc``
files. A symbolic link is refused (it could name anything outside the tree, which would
then not be what its digest says), and so is a tree of more than ``MAX_FILES`` files or
``MAX_BYTES`` bytes: a build tree is a fold's source, not a data directory.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Final

from efold.digests import digest_of, file_sha256
from efold.errors import Code
from efold.folds.errors import PluginError

MAX_FILES: Final = 20_000
MAX_BYTES: Final = 256 * 1024 * 1024


def _skipped(name: str) -> bool:
    return name.startswith(".") or name == "__pycache__" or name.endswith(".pyc")


def build_manifest(root: str) -> dict[str, str]:
    """Relative path -> sha256 of every file of the tree at ``root`` (module docstring);
    ``PluginError`` (``fold_plugin_invalid``) for anything that cannot be pinned."""
    if os.path.islink(root):
        raise PluginError(Code.FOLD_PLUGIN_INVALID,
                          f"build {root!r} is a link: name the directory itself")
    if not os.path.isdir(root):
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"build {root!r} is not a directory")
    manifest: dict[str, str] = {}
    total = 0
    def unreadable(exc: OSError) -> None:
        raise exc  # a directory os.walk cannot list is not skipped: it is refused

    try:
        for folder, dirs, files in os.walk(root, onerror=unreadable):
            dirs[:] = sorted(d for d in dirs if not _skipped(d))
            for name in sorted(files):
                if _skipped(name):
                    continue
                path = os.path.join(folder, name)
                info = os.lstat(path)
                relative = os.path.relpath(path, root).replace(os.sep, "/")
                if not stat.S_ISREG(info.st_mode):
                    raise PluginError(Code.FOLD_PLUGIN_INVALID,
                                      f"build {root!r}: {relative} is not a regular file "
                                      "(a link or a device is not pinned)")
                total += info.st_size
                if len(manifest) >= MAX_FILES or total > MAX_BYTES:
                    raise PluginError(Code.FOLD_PLUGIN_INVALID,
                                      f"build {root!r}: more than {MAX_FILES} files or "
                                      f"{MAX_BYTES} bytes (a build tree is a fold's source)")
                manifest[relative] = file_sha256(path)
            for name in dirs:
                if os.path.islink(os.path.join(folder, name)):
                    relative = os.path.relpath(os.path.join(folder, name), root)
                    raise PluginError(Code.FOLD_PLUGIN_INVALID,
                                      f"build {root!r}: {relative} is a link (not pinned; a "
                                      "virtual environment belongs outside the tree, or in "
                                      "a hidden one such as .venv)")
    except OSError as exc:
        where = os.path.relpath(exc.filename, root) if exc.filename else "it"
        raise PluginError(Code.FOLD_PLUGIN_INVALID,
                          f"build {root!r}: cannot read {where} ({exc.strerror}); a build "
                          "tree is read whole") from exc
    if not manifest:
        raise PluginError(Code.FOLD_PLUGIN_INVALID, f"build {root!r} holds no file")
    return manifest


def manifest_sha256(manifest: Mapping[str, str]) -> str:
    """The digest of a manifest: its sorted (path, sha256) pairs."""
    return digest_of(sorted(manifest.items()))


def changed_paths(a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The paths whose bytes differ between two manifests (added, removed or changed),
    sorted."""
    return sorted({p for p in a.keys() | b.keys() if a.get(p) != b.get(p)})
