"""The run context: what every launch of one run shares, and the run's stop bookkeeping.

Every launch of a run (a prep child per checkpoint, a probe child per slot) is built
from the same digests, deadlines, permit source and launch options, and every sticky
stop any of them implies goes through ``take_stop``: the stop policy and the permit
source close admission at once, and the journal records the code once per run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from efold.controller.campaigns.stops import StopPolicy
from efold.controller.processes.childenv import child_environment
from efold.controller.processes.containment import ContainmentPolicy
from efold.controller.processes.launcher import DEFAULT_PROGRAM, WorkerHandle, supervise
from efold.controller.processes.run_cgroups import RunCgroups
from efold.controller.processes.template import Template
from efold.controller.rundirs.permits import DurablePermitSource
from efold.errors import Code, EfoldError
from efold.guard.ledger import CallerTerms
from efold.identity import ProcessIdentity
from efold.ipc.messages import BudgetGrant, DeadlineGrant, Welcome
from efold.protocol.assignment import ASSIGNMENT_VERSION, Assignment, SnapshotRef, WorkerKind
from efold.protocol.exit_codes import code_for_exit_status
from efold.protocol.tasks import Route, Task
from efold.registry.errors import RegistryError
from efold.registry.journal import JournalWriter

# IPC failures that are the peer's fault and break the protocol's integrity: sticky.
_INTEGRITY_IPC = frozenset({
    Code.IPC_BAD_MAC, Code.IPC_BINDING_MISMATCH, Code.IPC_OUT_OF_ORDER,
    Code.IPC_FRAME_TOO_LARGE, Code.IPC_BAD_MESSAGE, Code.IPC_SEQ_MISMATCH,
})
# The controller's watchdog outlasts the deadline it grants the child (``welcome``), so
# a child can abort its own request first (an own abort, settled by the child) before
# it is killed. Invariant: > guard.transport.ABORT_BOUND_S, the most a transport
# overruns a deadline. Offline children get this margin; a child on a real route gets
# ``campaign.REAL_WATCHDOG_MARGIN_S`` (``RunContext.probe_margin`` / ``prep_margin``).
WATCHDOG_MARGIN_S = 5.0
# ``--keep-answers``: the run's private artifact of the reader's answers (owner-only,
# one JSON line per answered slot, outside every report).
ANSWERS_NAME = "answers.jsonl"


@dataclass(frozen=True)
class SummariserRoute:
    """The summariser model of a run: the route its prep children send on, the terms
    the permit source holds each checkpoint's summary requests to, and the credential
    that reaches those prep children alone (None: a local server that takes none)."""

    route: Route
    terms: CallerTerms
    credential: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class JudgeRoute:
    """The judge of a run (19-C): the terms each probe slot's ``<slot>#judge`` ledger
    key is held to, and the rubric and threshold its readings are checked against."""

    terms: CallerTerms
    rubric: tuple[str, ...]
    pass_threshold: int


@dataclass
class LaunchEnd:
    """How one launch ended, as ``RunContext.launch`` leaves it."""

    # Why it failed: what the launch's body set first (it knows better), else the code
    # of the failure that ended it (``RunContext.failure_of``); None: it did not fail.
    failure: Code | None = None
    interrupted: bool = False  # the operator's interruption cancelled it


@dataclass
class RunContext:
    """What every launch of one run shares. Owned by the one command that opened the
    run (``run_setup.open_run``): the single writer."""

    run_dir: Path
    journal: JournalWriter
    epoch: int
    controller: ProcessIdentity
    registration_digest: str
    plan_digest: str
    build_digest: str
    source: DurablePermitSource
    policy: StopPolicy
    budgets: BudgetGrant
    prep_seconds: float
    probe_seconds: float
    containment: ContainmentPolicy = field(default_factory=ContainmentPolicy)
    hello_timeout_ms: int = 30_000
    # The child command line (the launcher's default: ``python -I -m efold.worker``).
    # Tests substitute a program that embeds the same entry point with a faulty body.
    program: Sequence[str] = DEFAULT_PROGRAM
    # The fork-server template the run's children are forked from (the same program
    # with ``--control-fd``: ``controller.processes.template``), or None: each child is spawned.
    # A template that fails is dead for the rest of the run and launches spawn.
    template: Template | None = None
    # The run's membership (``controller.processes.run_cgroups``): every launch's cgroup comes from
    # it in cgroup mode. None: process-group mode without a journaled decision (tests).
    cgroups: RunCgroups | None = None
    # The real route. Invariant: a credential is handed only to a launch that sends on
    # its route (probe children: the reader's; prep children of a summarising arm: the
    # summariser's), and only ever over the launch's credential pipe.
    reader_credential: bytes | None = field(default=None, repr=False)
    summariser: SummariserRoute | None = None  # None: the deterministic summariser
    judge: JudgeRoute | None = None  # None: no judge (19-C)
    probe_margin: float = WATCHDOG_MARGIN_S
    prep_margin: float = WATCHDOG_MARGIN_S
    # ``--keep-answers``: the owner-only file the reader's answers are appended to (None:
    # only their hashes are kept, in the receipts).
    answers_file: Path | None = None
    # Invariant: each sticky code is journaled once per run, however often it is taken.
    _journaled: set[Code] = field(default_factory=set)
    # The signal that interrupted the run (SIGINT/SIGTERM), once; then admission is
    # closed (an ``interrupted`` sticky stop) and every launch in flight is contained.
    interrupted: int | None = None
    # Invariant: the cancel scope of every launch in flight (``launch``), and only
    # those: up to ``concurrency`` prep or probe children at once (two per place in the probe
    # phase: one ending, one waiting for its first admission).
    _launch_scopes: set[anyio.CancelScope] = field(default_factory=set)

    # -- launching --------------------------------------------------------------------

    @asynccontextmanager
    async def launch(self, assignment: Assignment, end: LaunchEnd, *,
                     credential: bytes | None = None
                     ) -> AsyncIterator[WorkerHandle | None]:
        """One supervised launch (``launcher.supervise`` with this run's containment
        policy and program, and the child environment read now), ended the one way every
        launch of the run ends (``credential``, if given, reaches this child alone, over
        its credential pipe once its Hello is accepted: ``credential_handoff.CredentialHandoff``):
        - an interruption cancels it (``interrupt``): the launcher contains the child,
          shielded, on the way out, and ``end.interrupted`` says so;
        - a failure (an ``EfoldError``, or the watchdog's ``TimeoutError``) ends the
          block, not the run: ``end.failure`` names it;
        - a journal failure (``RegistryError``) propagates: nothing more may be recorded;
        - whatever the end, every sticky stop the containment episode decided is the
          run's before anything else launches (``adopt_containment``);
        - a launch that never started (its cgroup or its process could not be made, or
          the run was interrupted first) yields None: the block has no child, and
          ``end.failure`` (or ``end.interrupted``) says why."""
        slot = assignment.slot
        handle: WorkerHandle | None = None
        yielded = False
        with anyio.CancelScope() as scope:
            self._launch_scopes.add(scope)
            try:
                if self.interrupted is not None:
                    scope.cancel()
                # A sticky stop its containment decides closes admission at once, not
                # only when the episode ends (a SIGTERM grace later: ``adopt_containment``
                # then journals it, if the episode could not, and takes it whole).
                policy = dataclasses.replace(self.containment, on_stop=self._close_admission)
                async with supervise(self.journal, assignment, policy=policy,
                                     env=child_environment(), program=self.program,
                                     credential=credential, template=self.template,
                                     cgroups=self.cgroups, defer_exit=True) as handle:
                    yielded = True
                    yield handle
            except RegistryError:
                raise  # the journal failed: nothing more may be recorded; the run stops
            except (EfoldError, TimeoutError) as exc:
                if end.failure is None:
                    end.failure = self.failure_of(exc, handle, slot)
            finally:
                self.adopt_containment(handle, slot)
                self._launch_scopes.discard(scope)
        end.interrupted = scope.cancelled_caught
        if not yielded:
            yield None

    def welcome(self, seconds: float, *, admit_wait: float = 0.0) -> Welcome:
        """A child's deadlines: ``seconds`` for each request and each exchange, an
        exchange longer by ``admit_wait`` (a probe child's first ``Admit`` may wait that
        long for the slot before it in its place to end: ``places.Places``), so the
        child's own exchange timeout never fires while the controller holds it back."""
        ms = int(seconds * 1000)
        return Welcome(deadlines=DeadlineGrant(run_ms=ms,
                                               exchange_ms=ms + int(admit_wait * 1000)),
                       budgets=self.budgets)

    def assignment(self, *, kind: WorkerKind, body: str, slot: str, slot_dir: Path,
                   cache_key: str | None, snapshot: SnapshotRef | None,
                   task: Task) -> Assignment:
        return Assignment(
            version=ASSIGNMENT_VERSION, kind=kind, body=body, run_dir=str(self.run_dir),
            slot_dir=str(slot_dir), epoch=self.epoch, slot=slot, controller=self.controller,
            registration_digest=self.registration_digest, plan_digest=self.plan_digest,
            build_digest=self.build_digest, cache_key=cache_key, snapshot=snapshot,
            hello_timeout_ms=self.hello_timeout_ms, task=task,
        )

    # -- stops ------------------------------------------------------------------------

    def take_stop(self, code: Code, slot: str | None, *, journaled: bool = False) -> None:
        """Take a sticky stop of the run (journaling it unless it already is), with the
        policy's precedence: admission closes at once."""
        self._close_admission(code)
        if not journaled and code not in self._journaled:
            self.journal.record_stop(epoch=self.epoch, code=code.value, slot=slot, sticky=True)
        self._journaled.add(code)

    def _close_admission(self, code: Code) -> None:
        """Close admission for a sticky stop journaled elsewhere, in memory only."""
        self.policy.stop(code)
        self.source.stop(code)

    def take_stops(self, codes: Iterable[Code], slot: str) -> None:
        """Take, in order, the stops a slot's judgement implies (``judging.Verdict``)."""
        for code in codes:
            self.take_stop(code, slot)

    def interrupt(self, signum: int) -> bool:
        """The operator interrupted the run: close admission (a journaled ``interrupted``
        stop) and cancel every launch in flight. Only the first signal counts; False for
        a repeat, which changes nothing (containment is never skipped)."""
        if self.interrupted is not None:
            return False
        self.interrupted = signum
        self.take_stop(Code.INTERRUPTED, None)
        for scope in self._launch_scopes:
            scope.cancel()
        return True

    def adopt_containment(self, handle: WorkerHandle | None, slot: str) -> None:
        """Every sticky stop a containment episode decided (``lookup_worker_lost``,
        ``unreconciled_containment``) becomes the run's before anything else launches."""
        episode = handle.containment if handle is not None else None
        if episode is not None:
            for code in episode.stops:
                self.take_stop(code, slot, journaled=episode.persisted)

    def failure_of(self, exc: BaseException, handle: WorkerHandle | None, slot: str) -> Code:
        """The code a failed launch stands for: the child's own (its exit status) when
        it exited by itself, else the failure's. Sticky: an IPC integrity violation, and
        a digest mismatch (the code, registration or a fold changed under the run:
        every later child would refuse too, and the run must not end as complete)."""
        code = _own_code(handle)
        if code is None:
            code = exc.code if isinstance(exc, EfoldError) else Code.WORKER_TIMEOUT
        if code in _INTEGRITY_IPC or code is Code.WORKER_DIGEST_MISMATCH:
            self.take_stop(code, slot)
        return code


def _own_code(handle: WorkerHandle | None) -> Code | None:
    """The fixed code a child that exited on its own reported through its exit status
    (``worker_digest_mismatch``, ``worker_snapshot_invalid``...), if it did."""
    if handle is None or handle.process.returncode is None:
        return None
    return code_for_exit_status(handle.process.returncode)
