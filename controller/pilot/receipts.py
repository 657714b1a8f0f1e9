"""Writing one content-free receipt per visited slot.

Order: the receipt's digest is journaled first, with the slot's status in the same
commit, then the file is published (exclusive, its data fsynced before its name
exists). A crash in between leaves a journaled receipt whose copy is missing:
aggregation counts it as a missing copy, never invents it. The ``receipts/`` directory
is fsynced once at the end of the probe phase (``receipts_durable``), not per receipt:
a power loss before that may lose the names of the copies published since, which then
count as missing copies exactly as above (each name is whole or absent). A receipt is
written once; a second one for the same slot refuses.
"""

from __future__ import annotations

from pathlib import Path

from efold.controller.rundirs.aggregate import RECEIPTS_DIR, receipt_name
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
    digest = sha256_hex(data)
    with journal.batched():
        journal.record_receipt(receipt.slot, digest)
        journal.record_slot_status(receipt.slot, receipt.status.value, receipt.code)
    publish_exclusive(run_dir / RECEIPTS_DIR, receipt_name(receipt.slot), data, sync_dir=False)
    return digest


def receipts_durable(run_dir: Path) -> None:
    """Make the names of every receipt published so far durable: one directory fsync."""
    fsync_dir(run_dir / RECEIPTS_DIR)
