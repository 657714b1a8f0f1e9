"""Evaluator-side evidence: what the controller knows about a slot that no child told it.

Computed from the checkpoint a prep child built and the controller verified, read as
data (no fold code runs here): for every probe asked of it, whether the expected value
is available to the reader (model-free, ``efold.folds.probe_availability``), and the
exclusion its fold receipt shows (an unverified boundary, missing pressure on a long
trace, a degraded store). Judging copies it into the slot's receipt.
"""

from __future__ import annotations

from dataclasses import dataclass

from efold.corpus.model import Availability, Probe
from efold.folds import probe_availability
from efold.folds.snapshot import RestoredCheckpoint
from efold.protocol.records import Exclusion

# Pressure is required on long traces only (reference: "On long traces, each sample
# must also show the pressure its arm is designed to test").
_PRESSURE_SUITES = frozenset({"hard", "hard-distractors"})


@dataclass(frozen=True)
class Evidence:
    """Evaluator-side facts about a slot, computed by the controller, never the child."""

    availability: Availability | None
    excluded: Exclusion | None
    checkpoint_sha256: str | None


def checkpoint_evidence(suite: str, restored: RestoredCheckpoint,
                        probes: list[Probe]) -> dict[str, Evidence]:
    """Evidence per probe id for one checkpoint: availability (model-free) and the
    exclusions its fold receipt shows."""
    cp = restored.checkpoint
    receipt = cp.receipt
    excluded: Exclusion | None = None
    if receipt.boundary.unsupported_calls:
        excluded = Exclusion.PROXY_UNSUPPORTED_CALL
    elif not receipt.boundary.verified:
        excluded = Exclusion.BOUNDARY_UNVERIFIED
    elif suite in _PRESSURE_SUITES and not all(p.met for p in receipt.pressure):
        excluded = Exclusion.PRESSURE_UNVERIFIED
    elif cp.store is not None and (receipt.store is None or receipt.store.records == 0):
        excluded = Exclusion.STORE_DEGRADED
    store = restored.open_store()
    out: dict[str, Evidence] = {}
    try:
        for probe in probes:
            result = probe_availability(cp, probe, store=store)
            out[probe.id] = Evidence(Availability(result.availability.value), excluded,
                                     restored.manifest.content_digest)
    finally:
        if store is not None:
            store.close()
    return out
