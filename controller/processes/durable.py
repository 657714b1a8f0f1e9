"""Awaiting the journal's unsynced commits durable, off the event loop.

A row the controller acts on must be on disk first (a hold before its ``Granted``, a
consumption before its ``Consumed``, a launch before its child's ``Hello`` is
answered: docs/architecture.md, "Orderings"). Syncing each commit where it is made
blocks the one controller thread for the disk's flush, and every child in flight
waits on it. So the hot path commits inside ``JournalWriter.unsynced`` and awaits
``durable`` before it acts: the fdatasync runs in a worker thread while the controller
serves other children, and one fdatasync covers every commit made before it started
(a group commit). The order each rule names is unchanged: the act still follows its
row's sync.

Here, not in ``registry``: the journal module is imported by every child, which
imports no event loop.
"""

from __future__ import annotations

import weakref

import anyio
import anyio.lowlevel

from efold.registry.journal import JournalWriter

__all__ = ["durable"]


class _GroupSync:
    """One journal's sync in flight, if any. Invariant: at most one at a time (each
    fdatasync covers every commit made before it started; a waiter whose commit came
    later waits for it to end, then starts the next)."""

    def __init__(self) -> None:
        self.in_flight: anyio.Event | None = None


_SYNCS: weakref.WeakKeyDictionary[JournalWriter, _GroupSync] = weakref.WeakKeyDictionary()


async def durable(journal: JournalWriter) -> None:
    """Until every commit ``journal`` made so far is on disk (at once when none waits).
    A failed sync raises ``journal_write_failed`` here, and to every waiter after."""
    target = journal.written
    group = _SYNCS.setdefault(journal, _GroupSync())
    while journal.synced < target:
        if group.in_flight is not None:
            await group.in_flight.wait()
            continue
        upto, fd = journal.written, journal.wal_descriptor()
        group.in_flight = done = anyio.Event()
        try:
            # Not abandoned when the waiter is cancelled: the descriptor stays in use
            # (and open: the writer closes it only at the run's end) until it returns.
            await anyio.to_thread.run_sync(journal.flush_wal, fd)
            journal.note_synced(upto)
        finally:
            group.in_flight = None
            done.set()
    # A waiter cancelled while the thread synced goes no further (the wait above could
    # not be interrupted): its caller must not act as if nothing happened.
    await anyio.lowlevel.checkpoint_if_cancelled()
