"""Boundary cases as campaign items (docs/boundary.md §10).

A campaign's ``[boundary]`` names cases (of the bundled corpus, or of a cases root of
the operator's); each becomes one ``SuiteItem`` beside the suite's question traces, so
that selection, registration, the plan and preparation treat it as they treat a trace:

* its **trace** is the case's pre-fold session: the events before the boundary, under
  the session's own trace id (the fold sees exactly what ``boundary run`` folds);
* its one **probe** (id ``continuation``, category ``boundary``) carries the
  continuation stimulus as its question. It is never scored from an answer: the slot is
  judged by the case's oracles (``controller.pilot.boundary_slots``).

``select_cases`` resolves the names: a case's full id, or its stable short id (``B01``,
``X07``: the part before the first ``-``), or ``all``. The cases' lock must hold for
every case named (``lock_problems``): a case edited without a new version, or missing
from the lock, refuses, so a regression is never made to pass by editing its oracle.

efold ships two cases roots: the bundled cases (``bundled_cases_root``) and the contract
corpus (``contract_cases_root``, docs/boundary.md "The contract corpus"). A campaign
without a ``root`` names the bundled cases; the one reserved name ``contract``
(``CONTRACT_CORPUS``), given alone, names instead every case of the contract corpus, so
a bundled campaign (which has no directory its ``root`` could be relative to) can run it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from efold.boundary.case import Case, load_cases
from efold.boundary.errors import BoundaryError
from efold.boundary.lock import lock_problems
from efold.boundary.runner_check import require_runners
from efold.boundary.validate import require_recall_needed
from efold.corpus.model import Category, Probe, ProbeFile, SuiteItem, Trace
from efold.digests import digest_of, package_root
from efold.errors import Code

CONTINUATION_PROBE: Final = "continuation"
ALL_CASES: Final = "all"
# ``[boundary] cases = ["contract"]`` without a ``root``: the whole contract corpus.
CONTRACT_CORPUS: Final = "contract"


def bundled_cases_root() -> Path:
    """The cases shipped with efold (``efold/boundary/cases``)."""
    return package_root() / "boundary" / "cases"


def contract_cases_root() -> Path:
    """The contract corpus shipped with efold (``efold/boundary/contract``): twenty
    contract tasks, each with its protected contract and verifier, written by
    ``scripts/build_contract_corpus.py``; ``analyze --corpus contract`` compares over
    exactly its cases."""
    return package_root() / "boundary" / "contract"


def short_id(case_id: str) -> str:
    """``B01`` of ``B01-explicit-api-constraint``."""
    return case_id.split("-", 1)[0]


def case_item(case: Case) -> SuiteItem:
    """The case as a suite item (module docstring)."""
    trace = Trace(header=case.trace.header, events=case.prefix)
    trace_id = trace.header.trace_id
    probe = Probe(id=CONTINUATION_PROBE, trace_id=trace_id, category=Category.BOUNDARY,
                  question="\n\n".join(case.sidecar.continuation.input))
    return SuiteItem(trace=trace, probes=ProbeFile(trace_id=trace_id, probes=[probe]))


def is_case(item: SuiteItem) -> bool:
    """Whether ``item`` is a boundary case's (``case_item``), not a suite trace."""
    return any(p.category is Category.BOUNDARY for p in item.probes.probes)


def select_cases(root: Path, names: Sequence[str]) -> list[Case]:
    """The cases of ``root`` that ``names`` name, in the order of the root (sorted by
    id), each loaded whole and locked (``["contract"]`` with the bundled root: every case
    of the contract corpus, module docstring). An unknown name, a name given twice, a case that
    does not load or a lock problem refuses (``boundary_case_invalid``), and so does a
    case whose commands cannot run here (``boundary_runner_unavailable``)."""
    if not names:
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID, "[boundary] names no case")
    if len(set(names)) != len(names):
        raise BoundaryError(Code.BOUNDARY_CASE_INVALID, "[boundary] names a case twice")
    if CONTRACT_CORPUS in names:
        if list(names) != [CONTRACT_CORPUS] or root != bundled_cases_root():
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                                f"[boundary] {CONTRACT_CORPUS!r} names the bundled contract "
                                "corpus: give it alone, without a root")
        root, names = contract_cases_root(), [ALL_CASES]
    cases = load_cases(root)
    if list(names) != [ALL_CASES]:
        by_name = {c.id: c for c in cases} | {short_id(c.id): c for c in cases}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID,
                                f"{root}: no case {unknown} (its cases: "
                                f"{', '.join(short_id(c.id) for c in cases)})")
        wanted = {by_name[n].id for n in names}
        if len(wanted) != len(names):
            raise BoundaryError(Code.BOUNDARY_CASE_INVALID, "[boundary] names a case twice")
        cases = [c for c in cases if c.id in wanted]
    problems = lock_problems(root, cases, complete=False)
    if problems:
        case_id, problem = problems[0]
        raise BoundaryError(problem.code, f"{case_id}: {problem.detail}")
    # A case whose checks cannot run here would be scored as a loss of every fold:
    # refused now, at registration, before any slot (boundary.runner_check).
    require_runners(cases)
    require_recall_needed(cases)  # the rule ``boundary validate`` applies
    return cases


def cases_digest(cases: Sequence[Case]) -> str:
    """What a registration binds of its cases: each one's id, version and tree digest
    (the whole directory: session, sidecar, workspace, expected files)."""
    return digest_of(["boundary-cases-v1", [[c.id, c.version, c.sha256] for c in cases]])
