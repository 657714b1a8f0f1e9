"""A worker's read-only views of its run's journal: one per thread that reads.

A worker confirms from disk what the controller told it over the pipe: its assignment
once, then each hold before it spends it. Each check used to open the journal anew
(check the file, connect, map its wal-index, read its version: about 0.5 ms, the most
of it page faults in a fresh worker); now the first opens it and the view stays open
until the worker exits. Each read is a statement of its own (autocommit), so it sees
every commit made before it, as a fresh connection would: a worker runs only while its
controller's writer has the journal open, so its view reads through the WAL
(``journal_file._reader_uri``). The fork-server template never opens it: a worker's
view is its own, one for each of its threads that reads.
"""

from __future__ import annotations

import threading

from efold.registry.journal import JournalReader


class _Views(threading.local):
    """Invariant: at most one view per run directory and thread, opened in this process
    by that thread. Per thread: an SQLite connection is used only by the thread that
    opened it (a compaction proxy's holds are verified on its server's threads)."""

    def __init__(self) -> None:
        self.by_run: dict[str, JournalReader] = {}


_VIEWS = _Views()


def run_journal(run_dir: str) -> JournalReader:
    """The journal of ``run_dir``, read-only; opened at this thread's first call
    (refusals as ``JournalReader``'s), the same view after."""
    views = _VIEWS.by_run
    view = views.get(run_dir)
    if view is None:
        view = views[run_dir] = JournalReader(run_dir)
    return view
