"""Probe modes: whether the reader may look anything up, and which arms a mode admits.

A campaign's ``probe_mode`` is bound into its registration and printed in every report.

* ``recall-only`` (the default): no arm offers the history lookup, so the run compares
  what each checkpoint *holds*. Every checkpoint is published without a store and
  offers no tool (``without_lookup``, applied by the prep child to every fold, built-in
  or not). The arms that differ from another arm only by the offer (``native-lookup``,
  ``store``, ``store-compaction``) are not admitted: each would be a copy of
  ``native``, ``cold-rebuild`` or ``compaction``.
* ``lookup-allowed-v1``: the reference benchmark's lookup mechanics protocol. The
  reader is offered the metered lookup (8 calls, 126,976 bytes per probe) over the
  retained store. Admitted: the built-in arms that keep a store: ``native-lookup`` and
  ``pack`` (the reference's two), and ``store`` and ``store-compaction`` (the
  reference's (g) and (h), which offer the lookup by definition). Every other arm,
  and every plugin or command fold, is refused. Its checkpoints have keys of their own
  (``checkpoint_namespace``), so no checkpoint is ever shared between the modes.

A refusal is ``arm_not_in_probe_mode:<arm>``, at ``register``, before anything runs.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from efold.folds.checkpoint import Checkpoint

ProbeMode = Literal["recall-only", "lookup-allowed-v1"]
RECALL_ONLY: Final = "recall-only"
LOOKUP_ALLOWED: Final = "lookup-allowed-v1"
PROBE_MODES: Final = (RECALL_ONLY, LOOKUP_ALLOWED)

# The arms that are another arm plus the lookup offer: meaningless without it.
LOOKUP_ONLY_ARMS: Final = frozenset({"native-lookup", "store", "store-compaction"})
# The arms lookup-allowed-v1 admits: the built-ins that keep a retained store.
LOOKUP_MODE_ARMS: Final = LOOKUP_ONLY_ARMS | {"pack"}


def admission_refusal(arm: str, built_in: bool, mode: ProbeMode) -> str | None:
    """Why a role of ``arm`` (``built_in``: a built-in arm, not a plugin or command of
    that name) may not run under ``mode``, or None."""
    if mode == RECALL_ONLY:
        if built_in and arm in LOOKUP_ONLY_ARMS:
            return (f"the {arm} arm differs from another arm only by offering the history "
                    f"lookup, which {RECALL_ONLY} never offers (use probe_mode = "
                    f"{LOOKUP_ALLOWED!r})")
        return None
    if built_in and arm in LOOKUP_MODE_ARMS:
        return None
    return (f"{LOOKUP_ALLOWED} admits only the built-in arms that keep a retained store "
            f"({', '.join(sorted(LOOKUP_MODE_ARMS))})")


def checkpoint_namespace(mode: ProbeMode) -> str:
    """The prefix of a mode's checkpoint keys: none for recall-only (its keys are what
    they were before modes existed), ``lookup-allowed-v1.`` for the lookup mode."""
    return "" if mode == RECALL_ONLY else f"{LOOKUP_ALLOWED}."


def without_lookup(checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` as recall-only publishes it: no store, no tool offered, and a
    receipt that says so (what it holds, nothing it could fetch). Unchanged when it
    offers nothing."""
    if checkpoint.store is None and not checkpoint.tools:
        return checkpoint
    receipt = msgspec.structs.replace(checkpoint.receipt, tools_offered=[], store=None)
    return msgspec.structs.replace(checkpoint, tools=[], store=None, receipt=receipt)
