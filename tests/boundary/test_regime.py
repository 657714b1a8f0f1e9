"""A case's fold regime (``folds.regime``): the oldest safe span, the root rebase, and
the real restart (``boundary.restart``), each observably different from the plain
regime it replaces."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from efold.boundary.case import Case, load_case, load_cases
from efold.boundary.errors import BoundaryError
from efold.boundary.restart import continue_restarted
from efold.boundary.runner import LAUNCH_MARKER_VAR
from efold.boundary.suite import bundled_cases_root
from efold.boundary.validate import run_offline
from efold.boundary.workspace import copy_fixture
from efold.corpus.model import Event, FunctionCall, ToolCall
from efold.errors import Code
from efold.folds import regime as fold_regime
from efold.folds.arms import CompactionFold, NativeFold, StoreFold
from efold.folds.checkpoint import (
    BoundaryEvidence,
    Checkpoint,
    ReaderMessage,
    folds_recorded,
)
from efold.folds.errors import FoldError
from efold.folds.fold import TracePrefix, build_checkpoint, checked
from efold.folds.regime import fold_case, kept_tail, older_sessions, safe_cut
from efold.folds.snapshot import content_digest, write_checkpoint
from efold.folds.transcript import reader_message
from efold.protocol import regime as wire_regime
from efold.protocol.regime import Regime
from tests.boundary.conftest import MakeCase


def _event(n: int, role: str, content: str = "", *, session: int = 1,
           calls: list[str] | None = None, answers: str | None = None,
           steer: bool = False) -> Event:
    return Event(id=f"e{n:04d}", session=session, day=session, role=role,  # type: ignore[arg-type]
                 content=content or f"{role} {n}", steer=steer,
                 tool_calls=None if calls is None else [
                     ToolCall(id=c, function=FunctionCall(name="shell", arguments="{}"))
                     for c in calls],
                 tool_call_id=answers, name="shell" if answers else None)


def _bundled(short: str) -> Case:
    return next(load_case(p) for p in sorted(bundled_cases_root().iterdir())
                if p.name.startswith(short + "-"))


def test_the_wire_regime_spells_what_the_folds_accept() -> None:
    assert typing.get_args(wire_regime.FoldMode) == typing.get_args(fold_regime.FoldMode)
    assert typing.get_args(wire_regime.FoldTarget) == typing.get_args(fold_regime.FoldTarget)


# -- the oldest safe span -------------------------------------------------------------

def test_the_safe_cut_is_before_the_newest_owner_turn_that_starts_cleanly() -> None:
    events = [_event(1, "user"), _event(2, "assistant"), _event(3, "user"),
              _event(4, "assistant", calls=["c1"]), _event(5, "tool", answers="c1"),
              _event(6, "assistant"), _event(7, "user"), _event(8, "assistant")]
    assert safe_cut(events) == 6  # before e0007: every call answered, the turn complete


def test_no_cut_splits_a_call_from_its_result_or_an_unanswered_turn() -> None:
    # e0003 arrives while c1 is open: cutting there would split c1 from its result, so
    # the cut is the next clean owner turn, e0006, and the pair stays in the span.
    split = [_event(1, "user"), _event(2, "assistant", calls=["c1"]), _event(3, "user"),
             _event(4, "tool", answers="c1"), _event(5, "assistant"), _event(6, "user"),
             _event(7, "assistant")]
    assert safe_cut(split) == 5
    steered = [_event(1, "user"), _event(2, "assistant"), _event(3, "user", steer=True),
               _event(4, "assistant")]
    assert safe_cut(steered) is None  # a steer is no turn of its own
    unanswered = [_event(1, "user"), _event(2, "user"), _event(3, "assistant")]
    assert safe_cut(unanswered) is None  # the first owner turn was never answered
    open_call = [_event(1, "user"), _event(2, "assistant", calls=["c1"]), _event(3, "user"),
                 _event(4, "tool", answers="c1"), _event(5, "assistant")]
    assert safe_cut(open_call) is None


def test_a_span_fold_keeps_the_rest_verbatim_after_the_folds_output() -> None:
    events = [_event(1, "user", "the old plan"), _event(2, "assistant"),
              _event(3, "user", "the live work"), _event(4, "assistant")]
    prefix = TracePrefix(trace_id="t", events=events)
    span = fold_case(CompactionFold(), prefix, target="oldest-safe-span")
    plain = fold_case(CompactionFold(), prefix)
    assert span != plain
    assert span.messages[-2:] == [reader_message(e) for e in events[2:]]
    assert span.messages[:-2] == CompactionFold().build(
        TracePrefix(trace_id="t", events=events[:2])).messages
    receipt = span.receipt
    assert receipt.span is not msgspec.UNSET
    assert (receipt.span.folded_events, receipt.span.kept_events,
            receipt.span.first_kept_id) == (2, 2, "e0003")
    assert receipt.source_events == 4 and receipt.messages == len(span.messages)
    assert checked(span, "compaction", prefix) is span  # the seam's own checks hold
    assert plain.receipt.span is msgspec.UNSET  # the plain regime: exactly fold.build
    assert plain == CompactionFold().build(prefix)


def test_a_session_without_a_safe_span_refuses() -> None:
    events = [_event(1, "user"), _event(2, "user"), _event(3, "assistant")]
    with pytest.raises(FoldError) as caught:
        fold_case(NativeFold(), TracePrefix(trace_id="t", events=events),
                  target="oldest-safe-span")
    assert caught.value.code is Code.BOUNDARY_CASE_INVALID


def _with_fold(**fold: Any) -> Any:
    def mutate(data: dict[str, Any]) -> None:
        data["fold"].update(fold)
    return mutate


def test_a_case_validates_its_span(make_case: MakeCase) -> None:
    case = load_case(make_case(_with_fold(target="oldest-safe-span")))  # critical e0001
    assert case.sidecar.fold.regime == Regime(target="oldest-safe-span")

    def critical_in_tail(data: dict[str, Any]) -> None:
        data["fold"]["target"] = "oldest-safe-span"
        data["source"]["critical"] = ["e0003"]  # after the cut: the fold never folds it
    with pytest.raises(BoundaryError, match=r"after the oldest safe span.*\$\.fold\.target"):
        load_case(make_case(critical_in_tail, name="tail"))
    with pytest.raises(BoundaryError, match=r"\$\.fold\.target"):
        load_case(make_case(_with_fold(target="newest"), name="unknown"))


# -- the root rebase -------------------------------------------------------------------

class _Rolling:
    """A fold that builds on its previous summary when offered one (as a rolling
    summariser does): its one summary message lists what it was offered, then counts
    the events."""

    name = "rolling"

    def __init__(self) -> None:
        self.offered: list[Any] = []

    def build(self, prefix: TracePrefix) -> Checkpoint:
        self.offered.append(prefix.prior)
        before = "" if prefix.prior is msgspec.UNSET else \
            " | ".join(m.content for m in prefix.prior.messages) + " | "
        summary = ReaderMessage(role="user",
                                content=f"{before}summary of {len(prefix.events)} events")
        return build_checkpoint("rolling", prefix, [summary], [],
                                BoundaryEvidence(kind="external", verified=True), [])


def _sessions() -> list[Event]:
    return [_event(1, "user", "the known-good tag is r7", session=1),
            _event(2, "assistant", session=1), _event(3, "user", session=2),
            _event(4, "assistant", session=2), _event(5, "user", session=3),
            _event(6, "assistant", session=3)]


def test_root_rebases_onto_the_leaf_bundle_of_the_older_sessions() -> None:
    events = _sessions()
    prefix = TracePrefix(trace_id="t", events=events)
    fold = _Rolling()
    root = fold_case(fold, prefix, mode="root")
    leaf = fold_case(_Rolling(), prefix)
    assert leaf.messages[0].content == "summary of 6 events"
    assert root.messages[0].content == "summary of 4 events | summary of 6 events"
    assert older_sessions(events) == 4
    # the leaf saw the older sessions only and no prior; the root was offered its summary
    assert fold.offered[0] is msgspec.UNSET
    offered = fold.offered[1]
    assert offered.cycle == 1 and [m.content for m in offered.messages] == \
        ["summary of 4 events"] and offered.first_kept_id is None
    rebase = root.receipt.rebase
    assert rebase is not msgspec.UNSET
    assert (rebase.leaf_events, rebase.leaf_folds, rebase.prior_messages) == (4, 1, 1)
    assert rebase.leaf_checkpoint_sha256 == content_digest(
        _Rolling().build(TracePrefix(trace_id="t", events=events[:4])))
    assert folds_recorded(root.receipt) == 2 and folds_recorded(leaf.receipt) == 1


def test_the_prior_is_the_leafs_summary_and_its_kept_tail_exactly() -> None:
    """store's cold boundary keeps the newest event verbatim: the prior is only what it
    rebuilt, and ``first_kept_id`` names the first event of the tail (provenance is
    exact)."""
    case = _bundled("B09")
    prefix = TracePrefix(trace_id=case.trace.header.trace_id, events=case.prefix)
    older = older_sessions(case.prefix)
    assert older is not None
    leaf = StoreFold().build(msgspec.structs.replace(prefix, events=case.prefix[:older]))
    kept = kept_tail(leaf.messages, case.prefix[:older])
    root = fold_case(StoreFold(), prefix, mode="root")
    rebase = root.receipt.rebase
    assert rebase is not msgspec.UNSET
    assert rebase.prior_messages == len(leaf.messages) - kept > 0
    assert rebase.first_kept_id == (case.prefix[older - kept].id if kept else None)
    assert rebase.leaf_checkpoint_sha256 == content_digest(leaf)
    # store rebuilds from the source: its root is its plain checkpoint, plus the
    # rebase's record, and its folds count the leaf's fold too
    assert msgspec.structs.replace(root.receipt, rebase=msgspec.UNSET) == \
        StoreFold().build(prefix).receipt
    assert folds_recorded(root.receipt) == folds_recorded(leaf.receipt) + 1


def test_a_root_case_needs_older_sessions_holding_its_critical_events(
        make_case: MakeCase) -> None:
    with pytest.raises(BoundaryError, match=r"one session.*\$\.fold\.mode"):
        load_case(make_case(_with_fold(mode="root")))  # the test case has one session
    case = _bundled("B09")
    assert case.sidecar.fold.regime == Regime(mode="root")
    assert case.sidecar.source.critical[0] in {e.id for e in case.prefix[
        :older_sessions(case.prefix) or 0]}


def test_b09_runs_as_a_rebase_offline() -> None:
    outcome = run_offline(_bundled("B09"), _bundled("B09").prefix, "store")
    assert outcome.passed is True  # the old bundle's tag recalled after the rebase
    assert outcome.folds == 2  # the leaf's fold and the root's
    assert run_offline(_bundled("B09"), _bundled("B09").prefix, "store",
                       regime=Regime()).folds == 1  # the same case as a plain leaf fold


# -- the real restart ------------------------------------------------------------------

def test_b11_resumes_in_a_new_process_from_the_snapshot_alone() -> None:
    case = _bundled("B11")
    assert case.sidecar.fold.restart
    outcome = run_offline(case, case.prefix, "store")
    assert outcome.passed is True
    restarted = outcome.restarted
    assert restarted is not None
    assert restarted.fold_pid == os.getpid() != restarted.agent_pid
    # the store arm recalled in the new process, through the store its snapshot held
    assert any(a.family == "recall" for a in outcome.run.actions)
    plain = run_offline(_bundled("B10"), _bundled("B10").prefix, "native")
    assert plain.restarted is None  # a case without fold.restart runs in this process


def test_a_restart_from_another_snapshot_refuses(tmp_path: Path) -> None:
    case = _bundled("B11")
    checkpoint = NativeFold().build(TracePrefix(trace_id=case.trace.header.trace_id,
                                                events=case.prefix))
    snapshot = tmp_path / "snapshot"
    digest = write_checkpoint(checkpoint, snapshot).digest
    (tmp_path / "ws").mkdir()
    (tmp_path / "out").mkdir()
    # the snapshot changed after it was written: the new process refuses to resume
    target = snapshot / "checkpoint.json"
    os.chmod(target, 0o600)
    target.write_bytes(target.read_bytes().replace(b"500 units", b"900 units"))
    done = subprocess.run([sys.executable, "-m", "efold.boundary.restart", str(snapshot),
                           digest, str(case.path), str(tmp_path / "ws"), str(tmp_path / "out")],
                          capture_output=True, check=False)
    assert done.returncode == 1 and done.stdout == b""
    assert b"checkpoint_digest_mismatch" in done.stderr
    with pytest.raises(BoundaryError) as caught:  # a case directory that is no case
        continue_restarted(tmp_path, checkpoint, tmp_path / "ws", timeout_s=5)
    assert caught.value.code is Code.BOUNDARY_RESTART_FAILED
    assert "boundary_case_invalid" in caught.value.detail


def test_the_leaf_bundles_what_precedes_the_last_run_of_the_last_session() -> None:
    events = [_event(1, "user", session=1), _event(2, "assistant", session=1),
              _event(3, "user", session=2), _event(4, "assistant", session=2),
              _event(5, "user", session=1), _event(6, "assistant", session=1)]
    assert older_sessions(events) == 4  # session 1 again at the end: its last run
    assert older_sessions(events[:2]) is None


def _slow_case(tmp_path: Path) -> Path:
    """B11 whose test command sleeps: its restarted agent runs a long command."""
    case_dir = tmp_path / "B11-restart"
    shutil.copytree(_bundled("B11").path, case_dir)
    (case_dir / "workspace" / "tests" / "conftest.py").write_text(
        "import time\ntime.sleep(60)\n")
    return case_dir


def _marked_processes() -> list[int]:
    """Live processes carrying a launch marker that this test did not inherit."""
    mine = os.environ.get(LAUNCH_MARKER_VAR)
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        marks = [v for v in env if v.startswith(f"{LAUNCH_MARKER_VAR}=".encode())]
        if marks and (mine is None or marks[0] != f"{LAUNCH_MARKER_VAR}={mine}".encode()):
            found.append(int(name))
    return found


def test_a_killed_restart_leaves_no_process(tmp_path: Path) -> None:
    """The restarted agent is killed mid-test (its command ignores nothing, it simply
    runs on): the run fails with its code, and nothing it started is left alive."""
    before = set(_marked_processes())
    case = load_case(_slow_case(tmp_path))
    checkpoint = NativeFold().build(TracePrefix(trace_id=case.trace.header.trace_id,
                                                events=case.prefix))
    workspace = tmp_path / "ws"
    copy_fixture(case.workspace, workspace)

    def cmdline(pid: int) -> bytes:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f.read()
        except OSError:
            return b""

    def kill_the_agent() -> None:
        """Once the agent's test command runs, SIGKILL the agent alone."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = set(_marked_processes()) - before
            agents = [p for p in new if b"efold.boundary.restart" in cmdline(p)]
            if agents and any(b"-m\0pytest" in cmdline(p) for p in new):
                seen.update(new)
                os.kill(agents[0], signal.SIGKILL)
                return
            time.sleep(0.05)

    seen: set[int] = set()
    killer = threading.Thread(target=kill_the_agent)
    killer.start()
    with pytest.raises(BoundaryError) as caught:
        continue_restarted(case.path, checkpoint, workspace, timeout_s=120)
    killer.join()
    assert caught.value.code is Code.BOUNDARY_RESTART_FAILED
    assert "exited -9" in caught.value.detail
    assert len(seen) >= 2  # the agent and its running test command
    assert set(_marked_processes()) - before == set()  # the sleeping test is gone too


def test_the_restarted_agent_runs_the_efold_this_process_runs(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """A directory named efold in the working directory is never what the child runs."""
    shadow = tmp_path / "efold" / "boundary"
    shadow.mkdir(parents=True)
    (tmp_path / "efold" / "__init__.py").write_text("")
    (shadow / "__init__.py").write_text("")
    (shadow / "restart.py").write_text("raise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    outcome = run_offline(_bundled("B11"), _bundled("B11").prefix, "native")
    assert outcome.passed is True and outcome.restarted is not None


def test_a_root_with_no_case_or_a_linked_case_refuses(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BoundaryError, match="no case"):
        load_cases(tmp_path / "empty")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "B11-restart").symlink_to(_bundled("B11").path)
    with pytest.raises(BoundaryError, match="symbolic link"):
        load_cases(linked)
