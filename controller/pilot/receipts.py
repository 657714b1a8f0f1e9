"""Writing one content-free receipt per visited slot.

Order: the receipt is journaled first (its bytes and their digest), with the slot's
status in the same commit, then the file is published (exclusive, its data fsynced
before its name exists). A crash in between leaves a journaled receipt whose copy is
missing: ``recover`` names it and ``reap`` restores it from the journal
(``controller.rundirs.receipt_copies``); aggregation counts a copy still missing as
damage, never invents it. The ``receipts/`` directory
is fsynced once at the end of the probe phase (``receipts_durable``), not per receipt:
a power loss before that may lose the names of the copies published since, which then
count as missing copies exactly as above (each name is whole or absent). A receipt is
written once; a second one for the same slot refuses.

A probe slot's receipt is written in the same order with both syncs off the event loop
(``write_receipt_off_loop``): the commit's in a worker thread with any other commit
waiting (``durable``), then the publish in a worker thread, shielded from cancellation
so that an interruption never leaves a journaled receipt unpublished. The controller
serves the other children meanwhile; the slot's ``DoneAck`` follows both.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio

from efold.controller.processes.durable import durable
from efold.controller.rundirs.receipt_copies import RECEIPTS_DIR, receipt_name
from efold.digests import canonical_json, sha256_hex
from efold.protocol.records import Receipt
from efold.registry import publish_exclusive
from efold.registry.files import fsync_dir
from efold.registry.journal import JournalWriter


def encode_receipt(receipt: Receipt) -> bytes:
    return canonical_json(receipt) + b"\n"


def write_receipt(run_dir: Path, journal: JournalWriter, receipt: Receipt) -> str:
    """Journal the receipt's digest and the slot's status (one commit: the status orders
    nothing the digest does not), then publish the file."""
    data = encode_receipt(receipt)
    with journal.batched():
        digest = _record(journal, receipt, data)
    publish_exclusive(run_dir / RECEIPTS_DIR, receipt_name(receipt.slot), data, sync_dir=False)
    return digest


async def write_receipt_off_loop(run_dir: Path, journal: JournalWriter,
                                 receipt: Receipt) -> str:
    """``write_receipt``, its commit synced and its file published in worker threads
    (module docstring)."""
    data = encode_receipt(receipt)
    with journal.unsynced(), journal.batched():
        digest = _record(journal, receipt, data)
    with anyio.CancelScope(shield=True):
        await durable(journal)
        await anyio.to_thread.run_sync(partial(
            publish_exclusive, run_dir / RECEIPTS_DIR, receipt_name(receipt.slot), data,
            sync_dir=False))
    return digest


def _record(journal: JournalWriter, receipt: Receipt, data: bytes) -> str:
    digest = sha256_hex(data)
    journal.record_receipt(receipt.slot, digest, data)
    journal.record_slot_status(receipt.slot, receipt.status.value, receipt.code)
    return digest


def receipts_durable(run_dir: Path) -> None:
    """Make the names of every receipt published so far durable: one directory fsync."""
    fsync_dir(run_dir / RECEIPTS_DIR)
