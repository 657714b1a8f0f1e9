"""The agent's tools over a workspace copy: read, search, write, edit, test.

A boundary run works on a **copy** of the case's fixture (``copy_fixture``: regular
files and directories only; a symlink or any other file type refuses the fixture,
``boundary_case_invalid``). ``Workspace`` offers the model five function tools
(``TOOL_SCHEMAS``; ``FAMILY_OF`` maps each to its action family, docs/boundary.md §4):

- ``workspace_read(path, offset=0, limit=20000)``: a slice of the file's text (UTF-8,
  undecodable bytes replaced), in characters, with a note when more follows;
- ``workspace_search(query, path=".")``: ``path:line: text`` for every line of a text
  file under ``path`` that contains ``query`` (case-insensitive substring), sorted by
  path then line, at most 50 (caches and ``.git`` skipped, symlinks never followed);
- ``workspace_write(path, content)``: the file's whole content, parents created;
- ``workspace_edit(path, old, new)``: replaces ``old``, which must occur exactly once;
- ``workspace_test(command)``: only a command equal to one of the case's
  ``tools.test.commands``, run in the workspace root by ``run_contained``; the answer is
  ``exit <code>`` or ``timed out``, then the output tail.

Rules:

- **A model mistake is an answer, never an exception**: a path that is absolute,
  escapes the root (``..``, a symlink planted by a test run) or names no file, an
  ambiguous or missing edit, editing when the case does not allow it, a command not in
  the list, bad JSON, unknown tools and wrong arguments all return ``error: ...`` text
  the model sees. Only an efold bug raises.
- **Paths** are normalized by ``boundary.actions.normalize_path`` against the root (the
  same rule the action log applies), then resolved: nothing outside the root is ever
  read or written, and symlinks are resolved at each call. No process of the run is
  alive between calls (``run_contained`` leaves none), so nothing changes the tree
  between the check and the use.
- ``call(name, arguments)`` returns ``(output, family, args)``: ``args`` is the decoded
  arguments with defaults filled (so the action log normalizes equal calls equally);
  a call that cannot be carried out as its tool (bad JSON, an unknown tool, wrong
  arguments, a refused path) is family ``other`` with the arguments as given, since
  there is no target to normalize. A well-formed call that is refused for another
  reason (editing disabled, a command not allowed, a missing file) keeps its family.
"""

from __future__ import annotations

import copy
import os
import shutil
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Final

import msgspec

from efold.boundary.actions import ActionFamily, normalize_path
from efold.boundary.errors import BoundaryError
from efold.boundary.runner import DEFAULT_OUTPUT_LIMIT, run_contained
from efold.errors import Code, EfoldError

READ = "workspace_read"
SEARCH = "workspace_search"
WRITE = "workspace_write"
EDIT = "workspace_edit"
TEST = "workspace_test"

MAX_READ_CHARS: Final = 20000
MAX_SEARCH_HITS: Final = 50
MAX_SEARCH_FILE_BYTES: Final = 1 << 20  # larger files are not searched
MAX_HIT_CHARS: Final = 300  # a matching line is cut to this many characters
SEARCH_SKIPPED_DIRS: Final = frozenset({".git", "__pycache__", ".pytest_cache"})

FAMILY_OF: Final[dict[str, ActionFamily]] = {
    READ: "read", SEARCH: "search", WRITE: "edit", EDIT: "edit", TEST: "test"}


def _schema(name: str, description: str, properties: dict[str, Any],
            required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required,
                       "additionalProperties": False},
        "strict": False,
    }


_PATH = {"type": "string", "description": "a path relative to the workspace root"}
TOOL_SCHEMAS: Final[list[dict[str, Any]]] = [
    _schema(READ, "Read a text file of the workspace. Long files come in slices: pass the "
            "offset the answer names to read on.",
            {"path": _PATH,
             "offset": {"type": "integer", "minimum": 0, "description": "first character"},
             "limit": {"type": "integer", "minimum": 1, "maximum": MAX_READ_CHARS}},
            ["path"]),
    _schema(SEARCH, "Search the workspace's text files for lines containing a text "
            "(case-insensitive). Answers path:line: text, at most 50 lines.",
            {"query": {"type": "string"},
             "path": {"type": "string", "description": "a file or directory; default the root"}},
            ["query"]),
    _schema(WRITE, "Write a file of the workspace (its whole content); creates it and its "
            "directories if needed.",
            {"path": _PATH, "content": {"type": "string"}}, ["path", "content"]),
    _schema(EDIT, "Replace a text in a file of the workspace. `old` must occur exactly once "
            "in the file; include enough context to make it unique.",
            {"path": _PATH, "old": {"type": "string"}, "new": {"type": "string"}},
            ["path", "old", "new"]),
    _schema(TEST, "Run one of the workspace's allowed test commands (an argv list, exactly "
            "as allowed) in the workspace root. Answers the exit status and the output tail.",
            {"command": {"type": "array", "items": {"type": "string"}}}, ["command"]),
]


class _Args(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The arguments of one tool, decoded from the model's JSON."""


class _ReadArgs(_Args, frozen=True, forbid_unknown_fields=True):
    path: str
    offset: Annotated[int, msgspec.Meta(ge=0)] = 0
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_READ_CHARS)] = MAX_READ_CHARS


class _SearchArgs(_Args, frozen=True, forbid_unknown_fields=True):
    query: str
    path: str = "."


class _WriteArgs(_Args, frozen=True, forbid_unknown_fields=True):
    path: str
    content: str


class _EditArgs(_Args, frozen=True, forbid_unknown_fields=True):
    path: str
    old: str
    new: str


class _TestArgs(_Args, frozen=True, forbid_unknown_fields=True):
    command: list[str]


_ARGS: Final[dict[str, type[_Args]]] = {
    READ: _ReadArgs, SEARCH: _SearchArgs, WRITE: _WriteArgs, EDIT: _EditArgs, TEST: _TestArgs}


def copy_fixture(src: Path, dst: Path) -> None:
    """Copy the fixture tree ``src`` to the new directory ``dst`` (regular files with
    their mode bits, and directories). A symlink or any other file type anywhere in
    ``src`` refuses the fixture (``boundary_case_invalid``) and leaves no ``dst``."""
    source = Path(src)
    mode = os.lstat(source).st_mode
    if not stat.S_ISDIR(mode):
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                            f"{source}: the workspace fixture is not a directory")
    target = Path(dst)
    target.mkdir()
    try:
        _copy_tree(source, target, source)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise


def _copy_tree(src: Path, dst: Path, top: Path) -> None:
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        rel = Path(entry.path).relative_to(top).as_posix()
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            (dst / entry.name).mkdir()
            _copy_tree(Path(entry.path), dst / entry.name, top)
        elif stat.S_ISREG(mode):
            _copy_file(Path(entry.path), dst / entry.name)
        else:
            kind = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                                f"{top}: workspace fixture entry {rel} is {kind}")


def _copy_file(src: Path, dst: Path) -> None:
    """Copy one regular file, never through a symlink swapped in meanwhile."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fin:
        mode = stat.S_IMODE(os.fstat(fin.fileno()).st_mode)
        with open(dst, "xb") as fout:
            shutil.copyfileobj(fin, fout)
        os.chmod(dst, mode)


class Workspace:
    """The tools of one run over a workspace copy at ``root`` (module docstring)."""

    def __init__(self, root: Path, *, allowed_commands: Sequence[Sequence[str]],
                 timeout_s: float, edit: bool,
                 output_limit: int = DEFAULT_OUTPUT_LIMIT) -> None:
        self.root = Path(root).resolve(strict=True)
        if not self.root.is_dir():
            raise NotADirectoryError(f"no workspace directory {root}")
        self.allowed_commands: tuple[tuple[str, ...], ...] = tuple(
            tuple(c) for c in allowed_commands)
        self.timeout_s = timeout_s
        self.edit_allowed = edit
        self.output_limit = output_limit

    # -- dispatch --------------------------------------------------------------------------

    def call(self, name: str, arguments: str) -> tuple[str, ActionFamily, dict[str, Any]]:
        """Carry out one function call of the model: (output, family, arguments)."""
        try:
            raw = msgspec.json.decode(arguments)
        except msgspec.DecodeError:
            return "error: the arguments are not valid JSON", "other", {"arguments": arguments}
        given: dict[str, Any] = raw if isinstance(raw, dict) else {"arguments": raw}
        spec = _ARGS.get(name)
        if spec is None:
            return f"error: unknown tool {name!r}", "other", given
        if not isinstance(raw, dict):
            return "error: the arguments must be a JSON object", "other", given
        try:
            args = msgspec.convert(raw, spec)
        except msgspec.ValidationError as exc:
            return f"error: invalid arguments: {exc}", "other", given
        path = getattr(args, "path", None)
        if isinstance(path, str) and (refusal := self._refusal(path)) is not None:
            return refusal, "other", given
        output = self._dispatch(args)
        return output, FAMILY_OF[name], msgspec.to_builtins(args)

    def _dispatch(self, args: _Args) -> str:
        if isinstance(args, _ReadArgs):
            return self.read(args.path, args.offset, args.limit)
        if isinstance(args, _SearchArgs):
            return self.search(args.query, args.path)
        if isinstance(args, _WriteArgs):
            return self.write(args.path, args.content)
        if isinstance(args, _EditArgs):
            return self.edit(args.path, args.old, args.new)
        if isinstance(args, _TestArgs):
            return self.test(args.command)
        raise AssertionError(f"no tool for {type(args).__name__}")

    # -- paths -----------------------------------------------------------------------------

    def _resolve(self, raw: str) -> tuple[str, Path] | str:
        """(canonical path, resolved location inside the root), or an error text."""
        try:
            canonical = normalize_path(raw, self.root)
        except EfoldError as exc:
            if exc.code is not Code.BOUNDARY_ACTION_INVALID:
                raise
            return f"error: {raw!r}: path outside the workspace or malformed ({exc.detail})"
        return canonical, (self.root / canonical).resolve()

    def _refusal(self, raw: str) -> str | None:
        found = self._resolve(raw)
        return found if isinstance(found, str) else None

    # -- the tools -------------------------------------------------------------------------

    def read(self, path: str, offset: int = 0, limit: int = MAX_READ_CHARS) -> str:
        found = self._resolve(path)
        if isinstance(found, str):
            return found
        rel, where = found
        if offset < 0 or not 1 <= limit <= MAX_READ_CHARS:
            return f"error: offset must be >= 0 and limit between 1 and {MAX_READ_CHARS}"
        if not where.exists():
            return f"error: {rel}: no such file"
        if not where.is_file():
            return f"error: {rel}: not a file"
        try:
            text = where.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            return f"error: {rel}: {exc.strerror}"
        if offset > len(text):
            return f"error: {rel}: offset {offset} is past the end ({len(text)} characters)"
        if not text:
            return f"({rel} is empty)"
        end = min(len(text), offset + limit)
        piece = text[offset:end]
        if end < len(text):
            piece += (f"\n[{len(text) - end} more characters: read again with "
                      f"offset={end}]")
        return piece

    def search(self, query: str, path: str = ".") -> str:
        found = self._resolve(path)
        if isinstance(found, str):
            return found
        rel, where = found
        needle = query.casefold()
        if not needle.strip():
            return "error: the query is empty"
        if not where.exists():
            return f"error: {rel}: no such file or directory"
        hits: list[tuple[str, int, str]] = []
        for file in self._text_files(where):
            hits.extend(_matches(file, file.relative_to(self.root).as_posix(), needle))
        if not hits:
            return "no matches"
        hits.sort()
        lines = [f"{p}:{n}: {t}" for p, n, t in hits[:MAX_SEARCH_HITS]]
        if len(hits) > MAX_SEARCH_HITS:
            lines.append(f"[{len(hits) - MAX_SEARCH_HITS} more matches: narrow the query "
                         "or the path]")
        return "\n".join(lines)

    def _text_files(self, where: Path) -> list[Path]:
        if where.is_file():
            return [where]
        files: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(where):  # never follows symlinks
            here = Path(dirpath)
            dirnames[:] = sorted(d for d in dirnames
                                 if d not in SEARCH_SKIPPED_DIRS and not (here / d).is_symlink())
            files.extend(here / f for f in sorted(filenames) if _searchable(here / f))
        return files

    def write(self, path: str, content: str) -> str:
        if not self.edit_allowed:
            return "error: editing is not allowed in this workspace"
        found = self._resolve(path)
        if isinstance(found, str):
            return found
        rel, where = found
        if where.is_dir():
            return f"error: {rel}: is a directory"
        data = content.encode("utf-8", errors="surrogatepass")
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_bytes(data)
        except OSError as exc:
            return f"error: {rel}: {exc.strerror}"
        return f"wrote {rel} ({len(data)} bytes)"

    def edit(self, path: str, old: str, new: str) -> str:
        if not self.edit_allowed:
            return "error: editing is not allowed in this workspace"
        found = self._resolve(path)
        if isinstance(found, str):
            return found
        rel, where = found
        if not where.exists():
            return f"error: {rel}: no such file"
        if not where.is_file():
            return f"error: {rel}: not a file"
        if not old:
            return "error: `old` is empty"
        try:
            text = where.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            return f"error: {rel}: not UTF-8 text"
        except OSError as exc:
            return f"error: {rel}: {exc.strerror}"
        count = text.count(old)
        if count == 0:
            return f"error: {rel}: `old` does not occur in the file"
        if count > 1:
            return (f"error: {rel}: `old` occurs {count} times; include more context so it "
                    "occurs once")
        try:
            where.write_bytes(text.replace(old, new, 1).encode("utf-8", errors="surrogatepass"))
        except OSError as exc:
            return f"error: {rel}: {exc.strerror}"
        return f"edited {rel}"

    def test(self, command: Sequence[str]) -> str:
        argv = tuple(command)
        if argv not in self.allowed_commands:
            allowed = " | ".join(" ".join(c) for c in self.allowed_commands) or "none"
            return f"error: command not allowed; allowed commands: {allowed}"
        result = run_contained(list(argv), self.root, timeout_s=self.timeout_s,
                               output_limit=self.output_limit)
        head = "timed out" if result.timed_out else f"exit {result.exit_code}"
        cut = "[earlier output cut]\n" if result.truncated else ""
        return f"{head}\n{cut}{result.stdout}"


def _searchable(file: Path) -> bool:
    """A regular file (not through a symlink) whose name is UTF-8."""
    try:
        os.fsencode(file.name).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return file.is_file() and not file.is_symlink()


def _matches(file: Path, rel: str, needle: str) -> list[tuple[str, int, str]]:
    """The matching lines of one text file (not UTF-8, holding a NUL or too large: none)."""
    try:
        if file.stat().st_size > MAX_SEARCH_FILE_BYTES:
            return []
        data = file.read_bytes()
    except OSError:
        return []
    if b"\0" in data:
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return []
    out: list[tuple[str, int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line.casefold():
            out.append((rel, number, line[:MAX_HIT_CHARS]))
    return out


def tool_schemas() -> list[dict[str, Any]]:
    """A fresh copy of ``TOOL_SCHEMAS`` (callers may change theirs)."""
    return copy.deepcopy(TOOL_SCHEMAS)
