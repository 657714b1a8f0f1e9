"""The closed union of machine oracles and their evaluation (docs/boundary.md §5).

Rules:

- Oracles run outside the agent, after the run, on the ``Evidence``: the final workspace,
  the initial one (the fixture), ``workspace.expected/``, the action log, the recall
  outputs and the fold's declared state. No oracle asks a model, none reads the agent's
  prose.
- The declared state is the checkpoint's (``efold.folds.state``: the state the fold
  returned, else its last visible ``handoff_state`` record); ``DeclaredState`` lives
  there and is re-exported here.
- Each yields ``pass``, ``fail`` or ``not_applicable``; only a state oracle
  (``state-key-equals``, ``anchor-active``, ``failure-open``, ``failure-retired``,
  ``obligation-open``) on a fold that declares no state is ``not_applicable``, counted
  apart and never as a pass (``passed`` is then ``None`` unless something failed).
- Every path an oracle names goes through ``normalize_path`` against the root it is read
  from; an escaping path is refused (``boundary_action_invalid``), never read.
- Byte comparisons are by environment version (``file_version``/``tree_version``): a
  missing file is ``absent``, so created and removed files count as changes; caches
  (``__pycache__``, ``.pytest_cache``, ``*.pyc``) never do.
- ``tests-pass`` runs its command through the injected ``run_command(argv, cwd)`` (the
  contained runner); exit status 0 passes.
- A target in ``tool-action-*`` is normalized by the family's rule: the oracle's family
  when it names one, else each action's own family.
- ``detail`` names files and counts for a human, never file contents.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from efold.boundary.actions import (
    ABSENT,
    FAMILIES,
    ActionFamily,
    ActionRecord,
    file_version,
    normalize_command,
    normalize_path,
    normalize_query,
    tree_entries,
)
from efold.boundary.errors import BoundaryError
from efold.digests import file_sha256
from efold.errors import Code
from efold.folds.state import DeclaredState as DeclaredState  # re-exported: oracles read it


class _Oracle(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type",
              rename="camel"):
    pass


class TestsPass(_Oracle, frozen=True, tag="tests-pass"):
    __test__ = False  # not a pytest test class, whatever its name
    command: list[str]


class FileEquals(_Oracle, frozen=True, tag="file-equals"):
    path: str
    expected: str  # a path inside workspace.expected/


class FileUnchanged(_Oracle, frozen=True, tag="file-unchanged"):
    path: str


class FileChanged(_Oracle, frozen=True, tag="file-changed"):
    path: str


class ForbiddenPathUnchanged(_Oracle, frozen=True, tag="forbidden-path-unchanged"):
    path: str


class ArtifactExists(_Oracle, frozen=True, tag="artifact-exists"):
    path: str
    contains: str | None = None


class StateKeyEquals(_Oracle, frozen=True, tag="state-key-equals"):
    key: str
    value: str


class AnchorActive(_Oracle, frozen=True, tag="anchor-active"):
    state_key: str


class FailureOpen(_Oracle, frozen=True, tag="failure-open"):
    failure: str


class FailureRetired(_Oracle, frozen=True, tag="failure-retired"):
    failure: str


class ObligationOpen(_Oracle, frozen=True, tag="obligation-open"):
    obligation: str


class RecallContains(_Oracle, frozen=True, tag="recall-contains"):
    text: str


class NoCrossSessionRecall(_Oracle, frozen=True, tag="no-cross-session-recall"):
    sessions: list[int]


class ToolActionAbsent(_Oracle, frozen=True, tag="tool-action-absent"):
    family: ActionFamily | None = None
    tool: str | None = None
    target: str | None = None


class ToolActionPresent(_Oracle, frozen=True, tag="tool-action-present"):
    family: ActionFamily | None = None
    tool: str | None = None
    target: str | None = None


Oracle = (TestsPass | FileEquals | FileUnchanged | FileChanged | ForbiddenPathUnchanged
          | ArtifactExists | StateKeyEquals | AnchorActive | FailureOpen | FailureRetired
          | ObligationOpen | RecallContains | NoCrossSessionRecall | ToolActionAbsent
          | ToolActionPresent)
ORACLE_TYPES: tuple[type[_Oracle], ...] = (
    TestsPass, FileEquals, FileUnchanged, FileChanged, ForbiddenPathUnchanged, ArtifactExists,
    StateKeyEquals, AnchorActive, FailureOpen, FailureRetired, ObligationOpen, RecallContains,
    NoCrossSessionRecall, ToolActionAbsent, ToolActionPresent)
Verdict = Literal["pass", "fail", "not_applicable"]


# -- evidence -----------------------------------------------------------------------------


class RecallOutput(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one recall returned: its text, and the sessions of the records it named."""

    text: str
    sessions: list[int] = msgspec.field(default_factory=list)


@dataclass(frozen=True)
class Evidence:
    """Everything the oracles may look at, after the run."""

    workspace: Path  # the final workspace
    fixture: Path  # the initial workspace (the case's fixture)
    expected: Path | None = None  # the case's workspace.expected/, when it has one
    actions: list[ActionRecord] = field(default_factory=list)
    recall_outputs: list[RecallOutput] = field(default_factory=list)
    # The fold's declared state (``efold.folds.declared.declared_state`` of the checkpoint
    # the agent resumed from); None: the fold declared no state.
    state: DeclaredState | None = None


class OracleResult(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    type: str  # the oracle's type tag, e.g. "tests-pass"
    verdict: Verdict
    detail: str = ""  # for a human: which file, which exit status; never contents


RunCommand = Callable[[list[str], Path], int]  # (argv, cwd) -> exit status, run contained
STATE_ORACLES: tuple[type[_Oracle], ...] = (
    StateKeyEquals, AnchorActive, FailureOpen, FailureRetired, ObligationOpen)


# -- evaluation ---------------------------------------------------------------------------


def oracle_type(oracle: _Oracle) -> str:
    tag = type(oracle).__struct_config__.tag
    return str(tag)


def _version_in(root: Path, rel: str) -> str:
    """The version of ``root/rel`` (a file's sha256, a directory's tree, ``absent``),
    refused when ``rel`` leaves ``root`` through a symlink."""
    return file_version(root / normalize_path(rel, root, field="oracle.path"))


def _files_at(root: Path, rel: str) -> dict[str, str]:
    """rel -> digest of the files at ``root/rel``: one entry for a file, every file under
    a directory (caches left out), none when nothing is there."""
    path = root / normalize_path(rel, root, field="oracle.path")
    if path.is_dir():
        return {k if rel == "." else f"{rel}/{k}": v for k, v in tree_entries(path).items()}
    version = file_version(path)
    return {} if version == ABSENT else {rel: version}


def _changed_files(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def _listed(names: list[str], limit: int = 5) -> str:
    more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def _targets(family: ActionFamily, raw: str) -> frozenset[str]:
    """The normalized forms ``raw`` may take as a target of ``family`` (a recall's is a
    record id as given or a normalized query)."""
    if family in ("read", "edit"):
        return frozenset({normalize_path(raw, field="oracle.target")})
    if family == "search":
        return frozenset({normalize_query(raw, field="oracle.target")})
    if family == "recall":
        return frozenset({raw, normalize_query(raw, field="oracle.target")})
    if family in ("test", "build"):
        return frozenset({normalize_command(raw, field="oracle.target")})
    return frozenset({raw})


def _matches(action: ActionRecord, oracle: ToolActionAbsent | ToolActionPresent) -> bool:
    if oracle.family is not None and action.family != oracle.family:
        return False
    if oracle.tool is not None and action.tool != oracle.tool:
        return False
    if oracle.target is None:
        return True
    if action.target is None:
        return False
    try:
        return action.target in _targets(action.family, oracle.target)
    except BoundaryError:  # not a target of this action's family at all
        return False


def _state(oracle: _Oracle, state: DeclaredState) -> OracleResult:
    kind = oracle_type(oracle)
    ok: bool
    if isinstance(oracle, StateKeyEquals):
        value = state.keys.get(oracle.key)
        ok = value == oracle.value
        detail = f"key {oracle.key!r} " + ("has the value" if ok else
                                           "not declared" if value is None else "differs")
    elif isinstance(oracle, AnchorActive):
        ok = oracle.state_key in state.anchors
        detail = f"anchor {oracle.state_key!r} " + ("active" if ok else "not active")
    elif isinstance(oracle, (FailureOpen, FailureRetired)):
        want = "open" if isinstance(oracle, FailureOpen) else "retired"
        got = state.failures.get(oracle.failure)
        ok = got == want
        detail = f"failure {oracle.failure!r} " + (got or "not declared")
    elif isinstance(oracle, ObligationOpen):
        got_obligation = state.obligations.get(oracle.obligation)
        ok = got_obligation == "open"
        detail = f"obligation {oracle.obligation!r} " + (got_obligation or "not declared")
    else:  # pragma: no cover - STATE_ORACLES lists exactly the classes above
        raise TypeError(kind)
    return OracleResult(kind, "pass" if ok else "fail", detail)


def evaluate(oracle: _Oracle, evidence: Evidence, *, run_command: RunCommand) -> OracleResult:
    """One oracle's verdict on the evidence (the table of docs/boundary.md §5)."""
    kind = oracle_type(oracle)

    def verdict(ok: bool, detail: str) -> OracleResult:
        return OracleResult(kind, "pass" if ok else "fail", detail)

    if isinstance(oracle, STATE_ORACLES):
        if evidence.state is None:
            return OracleResult(kind, "not_applicable", "the fold declares no state")
        return _state(oracle, evidence.state)
    ws = evidence.workspace
    if isinstance(oracle, TestsPass):
        if not oracle.command:
            raise BoundaryError(Code.BOUNDARY_ACTION_INVALID, "oracle.command: empty argv")
        status = run_command(list(oracle.command), ws)
        return verdict(status == 0, f"exit status {status}")
    if isinstance(oracle, FileEquals):
        rel = normalize_path(oracle.path, ws, field="oracle.path")
        if evidence.expected is None:
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                                "oracle.expected: the case has no workspace.expected/")
        exp_rel = normalize_path(oracle.expected, evidence.expected, field="oracle.expected")
        if not (evidence.expected / exp_rel).is_file():
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                                f"oracle.expected: workspace.expected/{exp_rel} is no file")
        path = ws / rel
        if not path.is_file():
            return verdict(False, f"{rel}: " + ("not a file" if path.exists() else ABSENT))
        same = file_sha256(path) == file_sha256(evidence.expected / exp_rel)
        return verdict(same, f"{rel}: " + ("equal" if same else "bytes differ"))
    if isinstance(oracle, (FileUnchanged, FileChanged)):
        rel = normalize_path(oracle.path, ws, field="oracle.path")
        before = _version_in(evidence.fixture, rel)
        after = file_version(ws / rel)
        same = before == after
        how = ("unchanged" if same else "created" if before == ABSENT
               else "removed" if after == ABSENT else "bytes differ")
        return verdict(same if isinstance(oracle, FileUnchanged) else not same,
                       f"{rel}: {how}")
    if isinstance(oracle, ForbiddenPathUnchanged):
        rel = normalize_path(oracle.path, ws, field="oracle.path")
        changed = _changed_files(_files_at(evidence.fixture, rel), _files_at(ws, rel))
        return verdict(not changed, f"{rel}: " + (
            f"changed {_listed(changed)}" if changed else "unchanged"))
    if isinstance(oracle, ArtifactExists):
        rel = normalize_path(oracle.path, ws, field="oracle.path")
        path = ws / rel
        if not path.is_file():
            return verdict(False, f"{rel}: " + ("not a file" if path.exists() else ABSENT))
        if oracle.contains is None:
            return verdict(True, f"{rel}: exists")
        found = oracle.contains.encode("utf-8") in path.read_bytes()
        return verdict(found, f"{rel}: " + ("contains the text" if found
                                            else "lacks the text"))
    if isinstance(oracle, RecallContains):
        hits = sum(oracle.text in out.text for out in evidence.recall_outputs)
        return verdict(hits > 0, f"{hits} of {len(evidence.recall_outputs)} recall "
                                 "outputs contain the text")
    if isinstance(oracle, NoCrossSessionRecall):
        allowed = set(oracle.sessions)
        foreign = sorted({s for out in evidence.recall_outputs for s in out.sessions
                          if s not in allowed})
        return verdict(not foreign, f"sessions outside the list: {foreign}" if foreign
                       else f"{len(evidence.recall_outputs)} recall outputs, all allowed")
    if isinstance(oracle, (ToolActionAbsent, ToolActionPresent)):
        if oracle.family is not None and oracle.family not in FAMILIES:
            raise BoundaryError(Code.BOUNDARY_ACTION_INVALID,
                                f"oracle.family: unknown family {oracle.family!r}")
        if oracle.target is not None and oracle.family is not None:
            _targets(oracle.family, oracle.target)  # refuse a bad target, even unmatched
        matching = [str(a.index) for a in evidence.actions if _matches(a, oracle)]
        detail = f"matching actions: {_listed(matching)}" if matching \
            else "no matching action"
        return verdict(not matching if isinstance(oracle, ToolActionAbsent)
                       else bool(matching), detail)
    raise BoundaryError(Code.BOUNDARY_ACTION_INVALID,  # pragma: no cover - closed union
                        f"unknown oracle {type(oracle).__name__}")


def evaluate_all(oracles: Iterable[_Oracle], evidence: Evidence,
                 run_command: RunCommand) -> list[OracleResult]:
    """Every oracle's verdict, in the case's order."""
    return [evaluate(o, evidence, run_command=run_command) for o in oracles]


def passed(results: Sequence[OracleResult]) -> bool | None:
    """False when any failed; else None when any is not_applicable; else True."""
    verdicts = {r.verdict for r in results}
    if "fail" in verdicts:
        return False
    if "not_applicable" in verdicts:
        return None
    return True
