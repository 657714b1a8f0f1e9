"""The run directories under a runs root, and what each one's own records say.

Read-only, like ``aggregate``: a run directory is a directory directly under the root
(one level down, never followed through a symlink) that holds ``journal.sqlite``. Its
start is the first controller epoch the journal recorded (``epochs.started_ns``, written
when the controller took the run lease); only when the journal records none, or cannot
be read, is it the directory's mtime, and the entry says so (``started_from``).

Campaign, status, counts and spend come from ``efold.controller.rundirs.aggregate``
(``read_run`` + ``build_run_results``): the status is ``efold.report.status``'s verdict,
never recomputed here; the spend is the journal's (every caller, settled and retained,
against the cap), never the receipts'. A receipt that fails its checks does not hide
the run: it is read with ``allow_damaged``, so the run shows as ``damaged`` with the
file named. A run whose records refuse is listed with the refusal's fixed code instead
of failing the whole listing.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import msgspec

from efold.controller.errors import ControllerError
from efold.controller.rundirs.aggregate import build_run_results, run_records
from efold.controller.rundirs.cluster_collect import read_any_run
from efold.controller.rundirs.runroot import is_bare_claim_at
from efold.controller.rundirs.suggest import suggest_prune
from efold.errors import Code, EfoldError
from efold.registry.journal import JOURNAL_NAME, JournalReader
from efold.registry.lease import LEASE_NAME, LeaseState, probe_lease
from efold.report import REPORT_FILES, Results
from efold.report.numbers import spend_line
from efold.report.readings import accuracy_brief, checkpoint_size
from efold.report.schema import ChainFacts, Execution, Money, RunMoney
from efold.report.status import status_banner

StartSource = Literal["journal", "mtime"]


class FoundRun(msgspec.Struct, frozen=True):
    """A run directory and its start (ns since the epoch, UTC)."""

    path: str
    started_ns: int
    started_from: StartSource


class RoleAccuracy(msgspec.Struct, frozen=True):
    """One role's exact score: ``correct`` of ``scored`` (completed, eligible,
    non-excluded slots; ``scored`` 0: nothing scored, no rate)."""

    role: str
    correct: int
    scored: int

    def text(self) -> str:
        """``native 100%``, ``store 97%``; ``pack -`` when nothing was scored."""
        rate = "-" if not self.scored else f"{self.correct / self.scored:.0%}"
        return f"{self.role} {rate}"


class RunEntry(msgspec.Struct, frozen=True):
    """One line of ``runs``. The fields from the run's records are null when it refused
    (``refused``: its fixed code, ``detail``: why)."""

    name: str
    path: str
    started: str  # ISO 8601, UTC, whole seconds
    started_from: StartSource
    campaign: str | None = None
    status: str | None = None  # the verdict of efold.report.status
    stop: str | None = None
    visited: int | None = None
    planned: int | None = None
    reader_faux: bool | None = None
    # The journal's money (every caller: settled, retained, open, charged) and the cap;
    # null when the run refused or its journal money is unknown (a cluster shard that
    # never came back). ``settled_*`` repeat ``money.settled`` for older readers.
    settled_units: int | None = None
    settled_usd: str | None = None
    money: RunMoney | None = None
    cap: Money | None = None
    damaged_files: list[str] = []  # names inside the run directory (status ``damaged``)
    accuracy: list[RoleAccuracy] = []  # per role, in the plan's order
    refused: str | None = None
    detail: str | None = None
    # A link of a chain (``pilot --continue``): its place and the chain's links; the
    # figures above are then the whole chain's. Null for a run that is no link.
    link: int | None = None
    links: int | None = None
    # The registration's probe mode; null when unknown (registered before modes).
    probe_mode: str | None = None


class RoleLine(msgspec.Struct, frozen=True):
    """``show``'s line for one role: its exact accuracy with the Wilson interval, and its
    median checkpoint with its share of the reference (``report.readings``)."""

    role: str
    accuracy: str
    checkpoint: str


class RunDetails(msgspec.Struct, frozen=True):
    """What ``show`` prints: the run's entry, its status headline, its counts, one line
    per role, and the path of each report in the run directory (null when absent)."""

    run: RunEntry
    headline: str
    execution: Execution
    reports: dict[str, str | None]
    roles: list[RoleLine] = []


def is_run_dir(path: str | os.PathLike[str]) -> bool:
    return not_a_run(path) is None


# The private temporary root of ``plan``, ``preflight`` and ``fold check``: its run is
# ``<root>/run`` (``recover`` and ``reap`` accept the root itself: ``private_run``).
PRIVATE_ROOT_PREFIX: Final = "efold-preflight-"
PRIVATE_RUN: Final = "run"


def private_run(path: str) -> str:
    """The run inside a private root named ``path`` (an ``efold-preflight-*`` directory
    holding ``run/``), else ``path`` as given."""
    inner = os.path.join(path, PRIVATE_RUN)
    if os.path.basename(os.path.normpath(path)).startswith(PRIVATE_ROOT_PREFIX) \
            and os.path.isdir(inner) and not os.path.islink(inner):
        return inner
    return path


def not_a_run(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is plainly not a run directory, or None when it may be one (its
    journal's own checks then decide): a run directory holds ``journal.sqlite``."""
    if not os.path.lexists(path):
        return "no such directory"
    if not os.path.isdir(path):
        return "not a directory"
    if not os.path.lexists(os.path.join(path, JOURNAL_NAME)):
        return f"no {JOURNAL_NAME}" + _claimed_without_journal(path)
    return None


def _claimed_without_journal(path: str | os.PathLike[str]) -> str:
    """What a directory a controller claimed but has no journal in holds: its claim's
    controller is starting (it holds the lease), or it stopped before it recorded
    anything (a journal is created complete or not at all, and every launch is
    journaled first). Nothing when it holds no lease to tell by."""
    if not os.path.lexists(os.path.join(path, LEASE_NAME)):
        return ""
    try:
        state = probe_lease(path).state
    except EfoldError:  # a lease this user cannot read, or not a private file
        return ""
    if state is LeaseState.LIVE:
        return " yet: the controller that claimed it is live and still starting"
    return (": a controller claimed it and stopped before it recorded anything, so "
            "nothing was launched for it; it can be removed"
            + (f" (`{suggest_prune(path)}`)" if is_bare_claim(path) else ""))


def is_bare_claim(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory (not a link) holding nothing but what a claim
    leaves before its journal (``runroot.is_bare_claim_at``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return is_bare_claim_at(fd)
    except OSError:
        return False
    finally:
        os.close(fd)


def find_claims(root: str | os.PathLike[str]) -> list[FoundRun]:
    """The bare claims (``is_bare_claim``) directly under ``root``, each dated by its
    directory's mtime, newest first; none when ``root`` cannot be listed."""
    try:
        with os.scandir(root) as entries:
            paths = [e.path for e in entries
                     if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
                     and is_bare_claim(e.path)]
        found = [FoundRun(p, os.stat(p, follow_symlinks=False).st_mtime_ns, "mtime")
                 for p in paths]
    except OSError:
        return []
    return sorted(found, key=lambda r: (r.started_ns, os.path.basename(r.path)), reverse=True)


CLAIM_STATUS: Final = "claimed, nothing recorded"


def describe_claim(found: FoundRun) -> RunEntry:
    """A bare claim's entry: its directory's mtime, and ``CLAIM_STATUS``."""
    return RunEntry(name=os.path.basename(found.path), path=found.path,
                    started=_iso(found.started_ns), started_from="mtime", status=CLAIM_STATUS)


def run_start(run: str | os.PathLike[str]) -> tuple[int, StartSource]:
    """The run's first controller epoch, else the directory's mtime."""
    try:
        with JournalReader(run) as journal:
            started = [row["started_ns"] for row in journal.rows("epochs")]
    except (EfoldError, OSError):
        started = []
    if started:
        return min(started), "journal"
    return os.stat(run).st_mtime_ns, "mtime"


def find_runs(root: str | os.PathLike[str]) -> list[FoundRun]:
    """The run directories directly under ``root``, newest start first (then by name,
    last first). ``runs_root_invalid`` when ``root`` cannot be listed."""
    where = os.fspath(root)
    if not os.path.lexists(where):
        raise ControllerError(Code.RUNS_ROOT_INVALID, f"{where}: no such directory")
    if not os.path.isdir(where):
        raise ControllerError(Code.RUNS_ROOT_INVALID, f"{where}: not a directory")
    try:
        with os.scandir(where) as entries:
            dirs = [e.path for e in entries
                    if e.is_dir(follow_symlinks=False) and is_run_dir(e.path)]
        found = [FoundRun(path, *run_start(path)) for path in dirs]
    except OSError as exc:
        raise ControllerError(Code.RUNS_ROOT_INVALID,
                              f"{where}: {exc.strerror or 'cannot be listed'}") from exc
    return sorted(found, key=lambda r: (r.started_ns, os.path.basename(r.path)), reverse=True)


def latest_run(root: str | os.PathLike[str]) -> str:
    """The newest run under ``root``; ``run_not_found`` when it holds none."""
    found = find_runs(root)
    if not found:
        raise ControllerError(Code.RUN_NOT_FOUND,
                              f"no run directory (one holding {JOURNAL_NAME}) under {root}")
    return found[0].path


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _entry(found: FoundRun, results: Results) -> RunEntry:
    status = results.status
    chain = status.chain if status is not None else None
    spent = results.money
    return RunEntry(
        name=os.path.basename(found.path), path=found.path, started=_iso(found.started_ns),
        started_from=found.started_from, campaign=results.campaign,
        status=status.verdict if status is not None else None,
        stop=status.stop if status is not None else None,
        visited=results.execution.visited, planned=results.execution.planned,
        reader_faux=results.reader_faux,
        settled_units=None if spent is None else spent.settled.units,
        settled_usd=None if spent is None else spent.settled.usd,
        money=spent, cap=results.cap,
        damaged_files=[] if status is None else list(status.damaged_files),
        accuracy=[RoleAccuracy(role.role, role.overall.exact.successes,
                               role.overall.exact.trials) for role in results.results],
        link=_link_index(found.path, chain), links=None if chain is None else len(chain.links),
        probe_mode=None if results.run is None else results.run.probe_mode,
    )


def _link_index(path: str, chain: ChainFacts | None) -> int | None:
    """A chain's link's place in it (its plan's link; 1 without one); None: no chain."""
    if chain is None:
        return None
    plan, _ = run_records(Path(path))
    return 1 if plan.link is None else plan.link.index


def _results(path: str, *, chain: bool = True) -> Results:
    try:
        return build_run_results(read_any_run(path, allow_damaged=True, chain=chain))
    except OSError as exc:  # a receipt that vanished or cannot be read meanwhile
        raise ControllerError(Code.RUN_RECORDS_INVALID,
                              exc.strerror or "unreadable") from exc


def describe(found: FoundRun, *, chain: bool = True) -> RunEntry:
    """The run's entry (``chain``: a link's as its whole chain's, else its own); a
    refusal becomes the entry's ``refused`` code."""
    try:
        return _entry(found, _results(found.path, chain=chain))
    except EfoldError as exc:
        return RunEntry(name=os.path.basename(found.path), path=found.path,
                        started=_iso(found.started_ns), started_from=found.started_from,
                        refused=exc.code.value, detail=exc.detail or None)


def list_runs(root: str | os.PathLike[str]) -> list[RunEntry]:
    return [describe(found) for found in find_runs(root)]


def show_run(run: str | os.PathLike[str]) -> RunDetails:
    """The details of one run; refuses (``EfoldError``) when its records do."""
    path = os.fspath(run)
    if not is_run_dir(path):
        raise ControllerError(Code.JOURNAL_INVALID,
                              f"{path} is not a run directory: no {JOURNAL_NAME}")
    found = FoundRun(path, *run_start(path))
    results = _results(path)
    reports = {name: (os.path.join(path, name)
                      if os.path.isfile(os.path.join(path, name)) else None)
               for name in REPORT_FILES}
    roles = [RoleLine(role.role, accuracy_brief(role), checkpoint_size(role))
             for role in results.results]
    return RunDetails(run=_entry(found, results), headline=status_banner(results.status)[0],
                      execution=results.execution, reports=reports, roles=roles)


def status_text(entry: RunEntry) -> str:
    """``complete``, ``stopped (CODE)``, ``damaged``, ``interrupted``, ``crashed``,
    ``running``, ``unreconciled`` (``, damaged`` after a verdict that outranks damage);
    ``refused: CODE`` for a run that cannot be read."""
    if entry.refused is not None:
        return f"refused: {entry.refused}"
    text = f"stopped ({entry.stop or 'no code'})" if entry.status == "stopped" \
        else entry.status or "unknown"
    if entry.damaged_files and entry.status != "damaged":  # a verdict above it leads
        text += ", damaged"
    if entry.link is not None:
        text += f" (chain: link {entry.link} of {entry.links})"
    return text


def spend_text(entry: RunEntry) -> str:
    """The journal's spend against the cap (``report.numbers.spend_line``: settled +
    retained [+ open] of the cap, exact amounts; a faux reader's labelled as faux units,
    nobody paid it); ``-`` when unknown."""
    if entry.money is None or entry.cap is None:
        return "-"
    return spend_line(entry.money, entry.cap, entry.reader_faux is True)


def started_text(entry: RunEntry) -> str:
    return entry.started + ("" if entry.started_from == "journal" else " (dir mtime)")
