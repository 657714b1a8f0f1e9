"""A probe slot's receipt, written with its syncs off the event loop
(``receipts.write_receipt_off_loop``): the same order as ever (the digest durable, then
the copy published, whole), the publish in a worker thread, and an interruption never
falling between the two."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from proc_harness import Run

from efold.controller.pilot import receipts
from efold.controller.pilot.receipts import encode_receipt, write_receipt_off_loop
from efold.controller.rundirs.receipt_copies import RECEIPTS_DIR
from efold.digests import sha256_hex
from efold.protocol.records import Receipt, SlotStatus
from efold.registry.journal import JournalReader

pytestmark = pytest.mark.anyio


def _receipt(slot: str) -> Receipt:
    return Receipt(slot=slot, role="native", arm="native", trace_id="t1", probe_id="p1",
                   category="recall", repeat=0, status=SlotStatus.SKIPPED,
                   code="inventory_infeasible")


@pytest.fixture
def run(run: Run) -> Run:
    """The run, with its ``receipts/`` directory (the probe phase makes it)."""
    (Path(run.run_dir) / RECEIPTS_DIR).mkdir(mode=0o700)
    return run


def _journaled(run: Run, slot: str) -> str | None:
    with JournalReader(Path(run.run_dir)) as reader:
        rows = reader.rows("receipts", "slot = ?", (slot,))
    return rows[0]["digest"] if rows else None


async def test_the_digest_is_durable_before_the_copy_is_published_off_the_loop(
        run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    publish = receipts.publish_exclusive

    def watched(*args: Any, **kwargs: Any) -> None:
        seen["synced"] = run.journal.synced >= seen["written"]
        seen["journaled"] = _journaled(run, "s0001")
        seen["main_thread"] = threading.current_thread() is threading.main_thread()
        publish(*args, **kwargs)

    monkeypatch.setattr(receipts, "publish_exclusive", watched)
    receipt = _receipt("s0001")
    seen["written"] = run.journal.written + 1  # the receipt's own commit
    digest = await write_receipt_off_loop(Path(run.run_dir), run.journal, receipt)
    assert digest == sha256_hex(encode_receipt(receipt))
    assert seen == {"written": seen["written"], "synced": True, "journaled": digest,
                    "main_thread": False}
    copy = Path(run.run_dir) / RECEIPTS_DIR / "s0001.json"
    assert copy.read_bytes() == encode_receipt(receipt)


async def test_an_interruption_never_leaves_a_journaled_receipt_unpublished(run: Run) -> None:
    receipt = _receipt("s0002")
    with anyio.CancelScope() as scope:
        scope.cancel()  # the operator's Ctrl-C, already there when the write begins
        await write_receipt_off_loop(Path(run.run_dir), run.journal, receipt)
        await anyio.sleep(0)  # where the cancellation lands: after the write
        raise AssertionError("not cancelled")
    assert scope.cancelled_caught
    assert _journaled(run, "s0002") == sha256_hex(encode_receipt(receipt))
    assert (Path(run.run_dir) / RECEIPTS_DIR / "s0002.json").read_bytes() \
        == encode_receipt(receipt)
    assert run.journal.synced == run.journal.written
