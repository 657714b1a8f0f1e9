"""A boundary case directory, loaded and checked; its digest (docs/boundary.md §1, §3).

A case is a directory::

    ef-boundary.yml        the sidecar (efold.boundary.sidecar)
    <source.session>       the pre-fold session: an efold trace, or a transcript an importer reads
    workspace/             the fixture the agent starts from
    workspace.expected/    optional: the files ``file-equals`` oracles compare against

Rules:

* **A case loads whole or not at all** (``load_case``): the sidecar decodes and checks,
  the session reads as a trace (the corpus codec for ``efold-trace``, else the importer
  ``corpus import`` uses for that format), ``source.boundary`` names one of its events
  (``end``: after the last one) with at least one event before it, every
  ``source.critical`` id names an event before the boundary, ``workspace/`` is a
  directory, and every ``file-equals`` expected file is a regular file in
  ``workspace.expected/``. Anything else is ``BOUNDARY_CASE_INVALID`` naming the file
  and the field.
* **The tree digest** (``tree_digest``) is sha256 over the sorted (relative POSIX path,
  sha256 of the bytes) of every regular file under a directory, canonical JSON as
  ``efold.digests`` writes it. Only regular files and directories may be there: a
  symlink, device, socket or FIFO refuses (``BOUNDARY_CASE_INVALID``), so the digest
  never follows anything out of the tree. ``__pycache__`` and ``.pytest_cache``
  directories and ``*.pyc`` files are left out: running a case's tests must not change
  it. A case's digest (``case_digest``) is the tree digest of its directory; the
  workspace's environment version is the tree digest of ``workspace/`` (same function).
* **A cases root** (``load_cases``) holds one case per subdirectory that has an
  ``ef-boundary.yml``; cases come sorted by id and two with one id refuse, and so do a
  root with no case and a case that is a symbolic link.
"""

from __future__ import annotations

import os
import stat
import unicodedata
from pathlib import Path
from typing import Final

import msgspec

from efold.boundary.actions import tree_entries
from efold.boundary.errors import BoundaryError
from efold.boundary.oracles import FileEquals
from efold.boundary.sidecar import (
    BOUNDARY_END,
    EFOLD_TRACE,
    SIDECAR_NAME,
    Sidecar,
    load_sidecar,
)
from efold.corpus.codec import load_trace
from efold.corpus.errors import CorpusError
from efold.corpus.import_formats import READERS
from efold.corpus.imports import to_trace, trace_id_for
from efold.corpus.model import Event, Trace
from efold.digests import digest_of
from efold.errors import Code
from efold.folds.checkpoint import Checkpoint, visible_text
from efold.folds.regime import older_sessions, safe_cut
from efold.input_files import TRANSCRIPT_LIMIT, InputFileError, read_input

WORKSPACE_DIR: Final = "workspace"
EXPECTED_DIR: Final = "workspace.expected"



class Case(msgspec.Struct, frozen=True):
    """A loaded case. ``boundary`` is the index of the first event after the boundary:
    the fold sees ``trace.events[:boundary]`` (never empty). ``expected`` is the
    ``workspace.expected/`` directory, None when the case has none. ``sha256`` is the
    case directory's digest when it was loaded."""

    path: Path
    sidecar: Sidecar
    trace: Trace
    boundary: int
    workspace: Path
    expected: Path | None
    sha256: str

    @property
    def id(self) -> str:
        return self.sidecar.id

    @property
    def version(self) -> int:
        return self.sidecar.version

    @property
    def prefix(self) -> list[Event]:
        """The pre-fold events: everything before the boundary."""
        return self.trace.events[:self.boundary]

    def shows_answer(self, checkpoint: Checkpoint) -> bool:
        """Whether this is a required-recall case whose answer ``checkpoint`` shows (in
        its reader-visible text): then the continuation needs no recall, and a run from
        it says nothing about recall (docs/boundary.md §13)."""
        recall = self.sidecar.recall
        if not recall.required or recall.answer is None:
            return False
        # Compared as Unicode NFC both sides: a composed and a decomposed "É" are one text.
        return (unicodedata.normalize("NFC", recall.answer)
                in unicodedata.normalize("NFC", visible_text(checkpoint.messages)))


def needs_rationale(case: Case) -> bool:
    """Whether ``case`` expects the ``rationale`` capability (its incidents are
    ``missing_rationale``: ``boundary.incidents``)."""
    return "rationale" in case.sidecar.classification.expected_capability


def _invalid(detail: str) -> BoundaryError:
    return BoundaryError(Code.BOUNDARY_CASE_INVALID, detail)


def tree_digest(directory: Path) -> str:
    """The tree version of ``directory`` (``actions.tree_version``: sha256 over the sorted
    relative paths and file digests, caches skipped), refusing anything in it that is not
    a regular file or a directory: a case holds nothing else."""
    try:
        if not stat.S_ISDIR(os.stat(directory).st_mode):
            raise _invalid(f"{directory}: not a directory")
        entries = tree_entries(directory)
    except OSError as exc:
        raise _invalid(f"{directory}: {exc.strerror}") from exc
    for rel, digest in entries.items():
        if digest.startswith("symlink:") or digest == "special":
            kind = ("a symlink" if digest.startswith("symlink:")
                    else "not a regular file or directory")
            raise _invalid(f"{directory}/{rel}: {kind}; a case holds only regular files "
                           "and directories")
    return digest_of(sorted(entries.items()))


def case_digest(path: Path) -> str:
    """The digest ``boundary.lock`` records for a case directory."""
    return tree_digest(path)


def _load_session(case_dir: Path, sidecar: Sidecar) -> Trace:
    session = case_dir / sidecar.source.session
    shown = str(session)
    try:
        data = read_input(session, what="the session ($.source.session)", limit=TRANSCRIPT_LIMIT)
    except InputFileError as exc:
        if exc.code is not Code.INPUT_FILE_UNREADABLE:
            raise  # a FIFO, a device, too large: its own code, nothing read
        raise _invalid(exc.detail) from exc
    try:
        if sidecar.source.format == EFOLD_TRACE:
            return load_trace(data)
        transcript = READERS[sidecar.source.format](data, session.name)
        return to_trace(transcript, trace_id=trace_id_for(sidecar.id),
                        family=sidecar.source.format, title=session.name,
                        name=session.name).trace
    except CorpusError as exc:
        raise _invalid(f"{shown}: not a session in format {sidecar.source.format!r} "
                       f"({exc.code.value}: {exc.detail})") from exc


def _resolve_boundary(sidecar: Sidecar, trace: Trace, shown: str) -> int:
    name = sidecar.source.boundary
    if name == BOUNDARY_END:
        index = len(trace.events)
    else:
        found = [i for i, event in enumerate(trace.events) if event.id == name]
        if not found:
            raise _invalid(f"{shown}: boundary {name!r} names no event of "
                           f"{sidecar.source.session} - at `$.source.boundary`")
        index = found[0]
    if index == 0:
        raise _invalid(f"{shown}: boundary {name!r} leaves no event before it to fold "
                       "- at `$.source.boundary`")
    before = {event.id for event in trace.events[:index]}
    for at, event_id in enumerate(sidecar.source.critical):
        if event_id not in before:
            raise _invalid(f"{shown}: critical event {event_id!r} is no event before the "
                           f"boundary - at `$.source.critical[{at}]`")
    _check_regime(sidecar, trace.events[:index], shown)
    return index


def _check_regime(sidecar: Sidecar, prefix: list[Event], shown: str) -> None:
    """A regime other than the plain one must fold what the case tests: an
    ``oldest-safe-span`` needs a span that closes cleanly and holds every critical
    event; a root rebase needs older sessions, and the critical events in them (the
    old bundle whose fact must come back)."""
    fold = sidecar.fold
    critical = set(sidecar.source.critical)
    span = len(prefix)
    if fold.target != "whole":
        cut = safe_cut(prefix)
        if cut is None:
            raise _invalid(f"{shown}: no span of the session closes cleanly: every cut "
                           "would split a tool call from its result or an unanswered turn "
                           "- at `$.fold.target`")
        span = cut
        kept = sorted(critical & {e.id for e in prefix[cut:]})
        if kept:
            raise _invalid(f"{shown}: critical events {kept} are after the oldest safe span "
                           f"(it ends before {prefix[cut].id}), so the fold never folds them "
                           "- at `$.fold.target`")
    if fold.mode == "root":
        older = older_sessions(prefix[:span])
        if older is None:
            raise _invalid(f"{shown}: a root rebase needs older sessions to bundle, and the "
                           "folded span holds one session - at `$.fold.mode`")
        late = sorted(critical - {e.id for e in prefix[:older]})
        if late:
            raise _invalid(f"{shown}: critical events {late} are not in the older sessions "
                           "the rebase bundles - at `$.fold.mode`")


def _directory(path: Path, what: str) -> bool:
    """True if ``path`` is a real directory, False if absent; anything else refuses."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _invalid(f"{path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(mode):
        raise _invalid(f"{path}: the {what} must be a directory")
    return True


def load_case(path: Path) -> Case:
    """The case in directory ``path``, loaded whole (the rules of the module docstring)."""
    if not path.is_dir():
        raise _invalid(f"{path}: not a case directory")
    sidecar_path = path / SIDECAR_NAME
    if sidecar_path.is_symlink() or not sidecar_path.is_file():
        raise _invalid(f"{sidecar_path}: missing (a case directory holds an {SIDECAR_NAME})")
    sidecar = load_sidecar(sidecar_path)
    digest = case_digest(path)  # refuses links and special files anywhere in the case
    trace = _load_session(path, sidecar)
    boundary = _resolve_boundary(sidecar, trace, str(sidecar_path))
    workspace = path / WORKSPACE_DIR
    if not _directory(workspace, "workspace"):
        raise _invalid(f"{workspace}: missing (a case holds its fixture in {WORKSPACE_DIR}/)")
    expected_dir = path / EXPECTED_DIR
    expected = expected_dir if _directory(expected_dir, "expected workspace") else None
    for index, oracle in enumerate(sidecar.oracle.success):
        if isinstance(oracle, FileEquals):
            target = expected_dir / oracle.expected
            if not target.is_file():
                raise _invalid(f"{sidecar_path}: {EXPECTED_DIR}/{oracle.expected} is missing or "
                               f"not a regular file - at `$.oracle.success[{index}].expected`")
    return Case(path=path, sidecar=sidecar, trace=trace, boundary=boundary,
                workspace=workspace, expected=expected, sha256=digest)


def case_dirs(root: Path) -> list[Path]:
    """Every direct subdirectory of ``root`` holding an ``ef-boundary.yml``, by name."""
    try:
        children = sorted(root.iterdir())
    except OSError as exc:
        raise _invalid(f"{root}: not a cases directory: {exc.strerror}") from exc
    linked = [child.name for child in children
              if child.is_symlink() and (child / SIDECAR_NAME).exists()]
    if linked:  # a case is its own directory: a link would lock another tree's bytes
        raise _invalid(f"{root}: {linked[0]} is a symbolic link to a case, not a case "
                       "directory (copy the case in)")
    return [child for child in children
            if child.is_dir() and not child.is_symlink()
            and (child / SIDECAR_NAME).exists()]


def check_unique(cases: list[Case]) -> list[Case]:
    """``cases`` sorted by id; two with one id refuse."""
    owners: dict[str, Path] = {}
    for case in cases:
        if case.id in owners:
            raise _invalid(f"{owners[case.id]} and {case.path} both have id {case.id!r}")
        owners[case.id] = case.path
    return sorted(cases, key=lambda c: c.id)


def load_cases(root: Path) -> list[Case]:
    """Every case under ``root``, sorted by id; the first invalid one refuses, and so
    does a root that holds none (a validation of nothing is no green check)."""
    dirs = case_dirs(root)
    if not dirs:
        raise _invalid(f"{root}: no case (a subdirectory holding an {SIDECAR_NAME})")
    return check_unique([load_case(path) for path in dirs])
