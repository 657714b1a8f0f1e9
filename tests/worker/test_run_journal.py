"""A worker's one view of its run's journal sees what the controller commits after it
was opened, as a fresh connection would (it confirms each hold through it)."""

from __future__ import annotations

import threading
from pathlib import Path

from efold.registry.journal import JournalWriter
from efold.registry.lease import acquire_lease
from efold.worker.run_journal import run_journal


def test_the_view_is_opened_once_and_sees_later_commits(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    with acquire_lease(run) as lease:
        writer = JournalWriter(run, lease)
        try:
            view = run_journal(str(run))
            assert view.hold("p1") is None
            writer.record_hold(permit_id="p1", epoch=1, slot="s0001", request_id="r1",
                               round=1, payload_digest="d" * 64, hold_units=100)
            assert run_journal(str(run)) is view
            row = view.hold("p1")
            assert row is not None and row["hold_units"] == 100
        finally:
            writer.close()


def test_each_thread_reads_through_a_view_of_its_own(tmp_path: Path) -> None:
    """A compaction proxy's holds are verified on its server's threads: a view opened by
    one thread is never used by another (SQLite refuses that)."""
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    with acquire_lease(run) as lease:
        writer = JournalWriter(run, lease)
        try:
            writer.record_hold(permit_id="p1", epoch=1, slot="s0001", request_id="r1",
                               round=1, payload_digest="d" * 64, hold_units=100)
            mine = run_journal(str(run))
            seen: list[object] = []
            other = threading.Thread(target=lambda: seen.append(
                (run_journal(str(run)), run_journal(str(run)).hold("p1"))))
            other.start()
            other.join()
            theirs, row = seen[0]  # type: ignore[misc]
            assert theirs is not mine and row is not None and row["hold_units"] == 100
            assert mine.hold("p1") is not None  # still usable by its own thread
        finally:
            writer.close()
