"""A comparison set over a bundled corpus: its tasks are exactly the corpus's cases.

``analyze --corpus contract --run RUN --arms REF,CAND`` compares two roles of a run
over the contract corpus (``boundary.suite.contract_cases_root``, docs/boundary.md "The
contract corpus"). The task list is not the run's: it is the corpus's case ids, as a
manifest's ``tasks`` are (``report.comparison_manifest``, whose pairing this reuses), so

* every corpus case is a task: one whose two slots were not both completed and scored
  (or that the run never ran) is left out and named (``Collected.missing``), never
  filled in;
* a slot of any other case, or of a question, is not read;
* the set's provenance names the corpus and the sha256 of its ``boundary.lock``, which
  binds every case's id, version and digest.

The corpus is read whole first (``load_corpus``): every case loads and agrees with the
lock, else the set is refused (``comparison_invalid``): a digest of a lock its cases do
not match would name tasks other than the ones compared. The run must have run the
corpus: a run with no slot of any corpus case, with a slot of a corpus case at another
version than the locked one (another revision of the task), or with a judged slot whose
case digest (``BoundaryRecord.case_sha256``) is not the locked one (the same id and
version, edited and locked again elsewhere) is refused (``comparison_invalid``), naming
what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from efold.boundary.case import load_cases
from efold.boundary.lock import LOCK_NAME, lock_problems, read_lock
from efold.boundary.suite import contract_cases_root
from efold.digests import sha256_hex
from efold.errors import Code, EfoldError
from efold.protocol.records import Receipt
from efold.report.comparison_manifest import (
    MANIFEST_SCHEMA,
    Collected,
    Manifest,
    ManifestRun,
    collect,
)
from efold.report.comparison_set import Provenance, check_comparison
from efold.report.errors import ReportError

# The corpora ``--corpus`` names: each a cases root shipped with efold.
CORPORA: Final[dict[str, Callable[[], Path]]] = {"contract": contract_cases_root}


@dataclass(frozen=True)
class Corpus:
    """A corpus as its lock records it: ``versions`` case id -> locked version and
    ``digests`` case id -> locked tree digest, the tasks in id order; ``lock_sha256``
    the sha256 of the lock file's bytes."""

    name: str
    root: Path
    versions: dict[str, int]
    digests: dict[str, str]
    lock_sha256: str

    @property
    def tasks(self) -> list[str]:
        return sorted(self.versions)


def _invalid(detail: str) -> ReportError:
    return ReportError(Code.COMPARISON_INVALID, detail)


def load_corpus(name: str, root: Path | None = None) -> Corpus:
    """The corpus ``name`` (one of ``CORPORA``; ``root`` overrides where it is read),
    loaded whole and checked against its lock (module docstring)."""
    if name not in CORPORA:
        raise _invalid(f"no corpus {name!r} (corpora: {', '.join(CORPORA)})")
    where = CORPORA[name]() if root is None else root
    try:
        cases = load_cases(where)
        problems = lock_problems(where, cases)
        lock = read_lock(where)
        raw = (where / LOCK_NAME).read_bytes()
    except EfoldError as exc:
        raise _invalid(f"the {name} corpus at {where} does not load: {exc.code.value}: "
                       f"{exc.detail}") from exc
    except OSError as exc:
        raise _invalid(f"the {name} corpus at {where} has no readable {LOCK_NAME}: "
                       f"{exc.strerror}") from exc
    if problems:
        case_id, problem = problems[0]
        raise _invalid(f"the {name} corpus at {where} disagrees with its lock: {case_id}: "
                       f"{problem.code.value}: {problem.detail}")
    if not cases:
        raise _invalid(f"the {name} corpus at {where} holds no case")
    return Corpus(name=name, root=where,
                  versions={case_id: entry.version for case_id, entry in lock.cases.items()},
                  digests={case_id: entry.sha256 for case_id, entry in lock.cases.items()},
                  lock_sha256=sha256_hex(raw))


def corpus_comparison(corpus: Corpus, receipts: Sequence[Receipt], reference: str,
                      candidate: str, *, run: str, registration_sha256: str,
                      efold_version: str, models: Sequence[str], faux: bool | None,
                      representative: bool) -> Collected:
    """The set of ``reference`` against ``candidate`` over ``corpus``'s tasks, from one
    run's ``receipts`` (module docstring); ``Collected.missing`` names the corpus tasks
    without a scored pair, in id order."""
    if reference == candidate:
        raise _invalid("compare two different roles")
    ran: dict[str, set[int]] = {}
    for receipt in receipts:
        record = receipt.boundary
        if record is not None and record.case in corpus.versions:
            ran.setdefault(record.case, set()).add(record.case_version)
            if record.code is None and record.case_sha256 != corpus.digests[record.case]:
                said = ("recorded no case digest (a run made before digests were recorded)"
                        if record.case_sha256 is None else
                        f"judged a case with digest {record.case_sha256[:12]}")
                raise _invalid(f"run {run}: slot {receipt.slot} {said}; the {corpus.name} "
                               f"corpus locks {record.case} at "
                               f"{corpus.digests[record.case][:12]}: the run's case is not "
                               "this corpus's")
    if not ran:
        raise _invalid(f"run {run} did not run the {corpus.name} corpus: none of its "
                       f"{len(corpus.versions)} cases ({corpus.tasks[0]} ... "
                       f"{corpus.tasks[-1]}) has a slot there (run it with "
                       f"`pilot --campaign {corpus.name}`)")
    for case_id in sorted(ran):
        other = sorted(ran[case_id] - {corpus.versions[case_id]})
        if other:
            raise _invalid(f"run {run} ran {case_id} at version {other[0]}, the {corpus.name} "
                           f"corpus locks version {corpus.versions[case_id]}: another "
                           "revision of the task is not this corpus's")
    manifest = Manifest(
        schema=MANIFEST_SCHEMA, arms=[reference, candidate],
        runs=[ManifestRun(arm=reference, run=run, registration_sha256=registration_sha256,
                          role=reference),
              ManifestRun(arm=candidate, run=run, registration_sha256=registration_sha256,
                          role=candidate)],
        tasks=corpus.tasks, representative_task_set=representative)
    collected = collect(manifest, corpus.lock_sha256, [receipts, receipts],
                        efold_version=efold_version, models=models, faux=faux)
    provenance = Provenance(source="efold-corpus", efold_version=efold_version,
                            models=sorted(set(models))[:16],
                            registration_sha256=registration_sha256, faux=faux,
                            corpus=corpus.name, corpus_sha256=corpus.lock_sha256)
    data = msgspec.structs.replace(collected.data, provenance=provenance)
    return Collected(check_comparison(data), collected.missing)
