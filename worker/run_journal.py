"""A worker's one read-only view of its run's journal.

A worker confirms from disk what the controller told it over the pipe: its assignment
once, then each hold before it spends it. Each check used to open the journal anew
(check the file, connect, map its wal-index, read its version: about 0.5 ms, the most
of it page faults in a fresh worker); now the first opens it and the view stays open
until the worker exits. Each read is a statement of its own (autocommit), so it sees
every commit made before it, as a fresh connection would: a worker runs only while its
controller's writer has the journal open, so its view reads through the WAL
(``journal_file._reader_uri``). The fork-server template never opens it: a worker's
view is its own.
"""

from __future__ import annotations

from efold.registry.journal import JournalReader

# Invariant: at most one view per run directory, opened in this process.
_views: dict[str, JournalReader] = {}


def run_journal(run_dir: str) -> JournalReader:
    """The journal of ``run_dir``, read-only; opened at the first call (refusals as
    ``JournalReader``'s), the same view after."""
    view = _views.get(run_dir)
    if view is None:
        view = _views[run_dir] = JournalReader(run_dir)
    return view
