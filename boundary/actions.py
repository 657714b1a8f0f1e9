"""Action capture: every model-visible tool call after the boundary, normalized.

Rules (docs/boundary.md §4):

- Every tool call becomes one ``ActionRecord``; ``index`` is its 0-based position in the
  run, assigned by ``ActionLog.record`` in call order, never reused.
- Normalization, per family (``normalize_args``):
  **read/edit** the ``path`` argument becomes a canonical workspace-relative POSIX path,
  computed lexically (``./a/../b.py`` is ``b.py``; symlinks are never followed to build
  it). A path that is absolute, escapes the workspace (``..`` past the root, or, given the
  workspace root, through a symlink), is empty, or holds a NUL or a backslash is
  *refused* (``boundary_action_invalid``), never normalized into the workspace.
  **search** the ``query`` is lowercased, trimmed and its whitespace collapsed; the
  pagination fields ``cursor``, ``page``, ``offset`` and ``limit`` are dropped; ``scope``
  and any other field are kept. **test/build** the ``command`` (or ``argv``) argv is
  joined by single spaces. **recall** the record id (``id``) or the query (normalized as a search's), the
  ``depth`` and the page ``offset`` are kept, the opaque ``cursor`` dropped.
  **delegate/other** the arguments as given. The target is the normalized path, query,
  command line, or record id (query); delegate/other have none. ``ActionLog.record``
  captures a call whose arguments cannot be normalized (the agent's own bad call) as
  given, with no target; ``normalize_args`` itself refuses it.
- ``args`` is the canonical JSON of the normalized arguments (sorted keys, no
  whitespace) and ``args_sha256`` its sha256.
- An action is a **duplicate** when an earlier action of a family named in
  ``duplicateRules`` has the same family, tool, target and normalized arguments *and* the
  same environment version before the call; ``duplicate_of`` is the first such action.
  An unknown version (``None``) or a ``time-sensitive`` one never matches: nothing proves
  the environment the same. A family not in the rules is never a duplicate.
- Environment versions are pure functions of the filesystem: a file's is the sha256 of
  its bytes (``absent`` when it does not exist), a tree's the digest of its sorted
  relative paths and file digests, caches (``__pycache__``, ``.pytest_cache``, ``*.pyc``)
  left out; a symlink counts by its link text, never followed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from efold.boundary.errors import BoundaryError
from efold.digests import canonical_json, digest_of, file_sha256, sha256_hex
from efold.errors import Code

ActionFamily = Literal["read", "search", "test", "edit", "build", "recall", "delegate", "other"]
FAMILIES: Final[tuple[ActionFamily, ...]] = (
    "read", "search", "test", "edit", "build", "recall", "delegate", "other")

ABSENT: Final = "absent"  # the version of a file (or tree) that does not exist
TIME_SENSITIVE: Final = "time-sensitive"  # the version of what efold cannot digest
PAGINATION_FIELDS: Final = frozenset({"cursor", "page", "offset", "limit"})
RECALL_DROPPED_FIELDS: Final = frozenset({"cursor"})
_SKIPPED_DIRS: Final = frozenset({"__pycache__", ".pytest_cache"})
_SKIPPED_SUFFIXES: Final = (".pyc",)
# The never-matching versions: a repeat under them is not provably the same environment.
_UNPROVEN_VERSIONS: Final = frozenset({TIME_SENSITIVE})


class ActionRecord(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One tool call after the boundary (docs/boundary.md §4)."""

    index: int
    family: ActionFamily
    tool: str
    args: str  # canonical JSON of the normalized arguments
    args_sha256: str
    target: str | None = None
    before: str | None = None  # environment version before the call
    after: str | None = None  # environment version after the call
    duplicate: bool = False
    duplicate_of: int | None = None


def _refuse(field: str, why: str) -> BoundaryError:
    return BoundaryError(Code.BOUNDARY_ACTION_INVALID, f"{field}: {why}")


# -- normalization -----------------------------------------------------------------------


def normalize_path(raw: object, workspace_root: Path | None = None, *,
                   field: str = "path") -> str:
    """The canonical workspace-relative POSIX form of ``raw`` (``.`` is the root itself).

    Lexical: ``.`` and empty segments go, ``..`` removes the segment before it; a ``..``
    with nothing left to remove escapes and is refused. With ``workspace_root``, the path
    is also refused when resolving it (symlinks followed) leaves the root, though the
    returned form stays the lexical one."""
    if not isinstance(raw, str):
        raise _refuse(field, f"a path is a string, not {type(raw).__name__}")
    if raw == "":
        raise _refuse(field, "empty path")
    if "\x00" in raw:
        raise _refuse(field, "NUL in path")
    if "\\" in raw:
        raise _refuse(field, "backslash in path (paths are POSIX)")
    if raw.startswith("/"):
        raise _refuse(field, f"absolute path {raw!r}")
    parts: list[str] = []
    for segment in raw.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                raise _refuse(field, f"{raw!r} escapes the workspace")
            parts.pop()
        else:
            parts.append(segment)
    canonical = "/".join(parts) or "."
    if workspace_root is not None:
        root = Path(workspace_root).resolve()
        try:
            resolved = (root / canonical).resolve()
        except (OSError, RuntimeError) as exc:  # a symlink loop
            raise _refuse(field, f"{raw!r} does not resolve: {type(exc).__name__}") from exc
        if resolved != root and not resolved.is_relative_to(root):
            raise _refuse(field, f"{raw!r} leaves the workspace through a symlink")
    return canonical


def normalize_query(q: object, *, field: str = "query") -> str:
    """Lowercased, trimmed, every run of whitespace one space."""
    if not isinstance(q, str):
        raise _refuse(field, f"a query is a string, not {type(q).__name__}")
    return " ".join(q.lower().split())


def normalize_command(argv: object, *, field: str = "command") -> str:
    """An argv joined by single spaces (a string's whitespace runs collapse to one)."""
    if isinstance(argv, str):
        words = argv.split()
    elif isinstance(argv, list) and all(isinstance(w, str) for w in argv):
        words = list(argv)
    else:
        raise _refuse(field, "a command is a list of strings")
    if not words:
        raise _refuse(field, "empty command")
    return " ".join(words)


def _required(args: Mapping[str, Any], key: str, family: str) -> Any:
    if key not in args:
        raise _refuse(f"args.{key}", f"a {family} call needs {key!r}")
    return args[key]


def normalize_args(family: ActionFamily, tool: str, args: Mapping[str, Any],
                   workspace_root: Path | None = None) -> tuple[str | None, dict[str, Any]]:
    """(target, normalized arguments) of one tool call, by the family's rule (module
    docstring). ``tool`` is not used by any rule today; it is part of the signature so a
    tool-specific rule needs no caller change."""
    del tool
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise _refuse("args", "arguments are an object with string keys")
    out = dict(args)
    if family in ("read", "edit"):
        target = normalize_path(_required(args, "path", family), workspace_root,
                                field="args.path")
        out["path"] = target
        return target, out
    if family == "search":
        out = {k: v for k, v in out.items() if k not in PAGINATION_FIELDS}
        target = normalize_query(_required(args, "query", family), field="args.query")
        out["query"] = target
        return target, out
    if family in ("test", "build"):
        key = "argv" if "argv" in args and "command" not in args else "command"
        target = normalize_command(_required(args, key, family), field=f"args.{key}")
        out[key] = target
        return target, out
    if family == "recall":
        out = {k: v for k, v in out.items() if k not in RECALL_DROPPED_FIELDS}
        if "id" in args:
            record_id = args["id"]
            if not isinstance(record_id, str) or not record_id:
                raise _refuse("args.id", "a record id is a non-empty string")
            return record_id, out
        target = normalize_query(_required(args, "query", "recall (id or query)"),
                                 field="args.query")
        out["query"] = target
        return target, out
    if family in ("delegate", "other"):
        return None, out
    raise _refuse("family", f"unknown action family {family!r}")


# -- environment versions ------------------------------------------------------------------


def tree_entries(root: Path) -> dict[str, str]:
    """Relative POSIX path -> digest of every file under ``root`` (caches skipped): a
    regular file's sha256, a symlink's ``symlink:<sha256 of its link text>``, anything
    else ``special``. Directories count only through their files."""
    entries: dict[str, str] = {}
    base = Path(root)
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
        here = Path(dirpath)
        # os.walk lists a symlink to a directory among dirnames and never descends it.
        for name in [*filenames, *(d for d in dirnames if (here / d).is_symlink())]:
            if name.endswith(_SKIPPED_SUFFIXES):
                continue
            path = here / name
            rel = path.relative_to(base).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                entries[rel] = "symlink:" + sha256_hex(os.fsencode(os.readlink(path)))
            elif stat.S_ISREG(mode):
                entries[rel] = file_sha256(path)
            else:
                entries[rel] = "special"
        dirnames[:] = [d for d in dirnames if not (here / d).is_symlink()]
    return dict(sorted(entries.items()))


def tree_version(root: Path) -> str:
    """The digest of a directory tree (``absent`` when it does not exist)."""
    if not Path(root).is_dir():
        return ABSENT
    return digest_of(sorted(tree_entries(root).items()))


def file_version(path: Path) -> str:
    """sha256 of a file's bytes; ``absent`` when nothing is there; a directory's tree
    version (a read of a directory sees the tree)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return ABSENT
    if stat.S_ISDIR(mode):
        return tree_version(p)
    return file_sha256(p)


# -- the action log -----------------------------------------------------------------------


class ActionLog:
    """The action records of one run, in call order, with duplicates marked."""

    def __init__(self, duplicate_rules: Iterable[ActionFamily] = (), *,
                 workspace_root: Path | None = None) -> None:
        rules = tuple(duplicate_rules)
        unknown = [f for f in rules if f not in FAMILIES]
        if unknown:
            raise _refuse("duplicate_rules", f"unknown families {unknown!r}")
        self.duplicate_rules: frozenset[ActionFamily] = frozenset(rules)
        self.workspace_root = workspace_root
        # Invariant: _records[i].index == i, and only records of a family in
        # duplicate_rules are ever marked duplicate.
        self._records: list[ActionRecord] = []
        # Invariant: key -> index of the FIRST action with that key; later equal keys are
        # duplicates of it. Only actions of a listed family with a proven version enter.
        self._first: dict[tuple[str, str, str | None, str, str], int] = {}
        self._duplicates = 0

    def record(self, family: ActionFamily, tool: str, args: Mapping[str, Any],
               before: str | None, after: str | None) -> ActionRecord:
        """Normalize one call, assign its index, mark it if it repeats earlier work."""
        if family not in FAMILIES:
            raise _refuse("family", f"unknown action family {family!r}")
        if not isinstance(tool, str) or not tool:
            raise _refuse("tool", "a tool name is a non-empty string")
        try:
            target, normalized = normalize_args(family, tool, args, self.workspace_root)
        except BoundaryError:
            # The agent's own bad call (an escaping path, a missing field) is behaviour to
            # record, not a crash: kept as given, with no target.
            if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
                raise
            target, normalized = None, dict(args)
        try:
            encoded = canonical_json(normalized)
        except (TypeError, msgspec.EncodeError) as exc:
            raise _refuse("args", f"not JSON: {exc}") from exc
        args_json = encoded.decode("utf-8")
        index = len(self._records)
        duplicate_of: int | None = None
        if (family in self.duplicate_rules and before is not None
                and before not in _UNPROVEN_VERSIONS):
            key = (family, tool, target, args_json, before)
            duplicate_of = self._first.setdefault(key, index)
            if duplicate_of == index:
                duplicate_of = None
        rec = ActionRecord(
            index=index, family=family, tool=tool, args=args_json,
            args_sha256=sha256_hex(encoded), target=target, before=before, after=after,
            duplicate=duplicate_of is not None, duplicate_of=duplicate_of)
        self._records.append(rec)
        self._duplicates += rec.duplicate
        return rec

    @property
    def records(self) -> list[ActionRecord]:
        return list(self._records)

    def duplicate_rate(self) -> Fraction:
        """Duplicates / actions, exact; 0 for an empty log."""
        if not self._records:
            return Fraction(0)
        return Fraction(self._duplicates, len(self._records))
