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

A registration made before probe modes has none (``UNSET``): it ran every arm it named
and offered the lookup wherever a checkpoint kept a store, and its reports say the mode
is unknown. ``register`` always writes a mode.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec
from msgspec import UnsetType

from efold.folds.checkpoint import Checkpoint

ProbeMode = Literal["recall-only", "lookup-allowed-v1"]
RECALL_ONLY: Final = "recall-only"
LOOKUP_ALLOWED: Final = "lookup-allowed-v1"
PROBE_MODES: Final = (RECALL_ONLY, LOOKUP_ALLOWED)

# The arms that are another arm plus the lookup offer: meaningless without it.
LOOKUP_ONLY_ARMS: Final = frozenset({"native-lookup", "store", "store-compaction"})
# The arms lookup-allowed-v1 admits: the built-ins that keep a retained store.
LOOKUP_MODE_ARMS: Final = LOOKUP_ONLY_ARMS | {"pack"}
# The full transcript, without and with the lookup: each mode's reference arm, the one
# the reports compare every other role against ("versus native").
NATIVE_ARMS: Final = frozenset({"native", "native-lookup"})


_LOOKUP_ARMS_TEXT = ", ".join(sorted(LOOKUP_MODE_ARMS))


def admission_refusal(arm: str, built_in: bool, mode: ProbeMode | UnsetType) -> str | None:
    """Why a role of ``arm`` (``built_in``: a built-in arm, not a plugin or command of
    that name) may not run under ``mode``, or None; the text says what to do."""
    if mode == RECALL_ONLY:
        if built_in and arm in LOOKUP_ONLY_ARMS:
            return (f"the {arm} arm differs from another arm only by offering the history "
                    f"lookup, which {RECALL_ONLY} (the default) never offers: drop it, or "
                    f"run it in a campaign of its own with probe_mode = {LOOKUP_ALLOWED!r}, "
                    f"whose arms are {_LOOKUP_ARMS_TEXT}")
        return None
    if mode != LOOKUP_ALLOWED or (built_in and arm in LOOKUP_MODE_ARMS):
        return None  # UNSET: registered before modes, when every arm ran
    return (f"{LOOKUP_ALLOWED} admits only the built-in arms that keep a retained store "
            f"({_LOOKUP_ARMS_TEXT}; native-lookup is its native): drop it, or run it in "
            f"a {RECALL_ONLY} campaign")


def lookup_offered(mode: ProbeMode | UnsetType) -> bool:
    """Whether checkpoints keep their store and tools: under lookup-allowed-v1, and in a
    registration made before modes (UNSET), which offered them wherever a store was."""
    return mode != RECALL_ONLY


def checkpoint_namespace(mode: ProbeMode | UnsetType) -> str:
    """The prefix of a mode's checkpoint keys: none for recall-only (its keys are what
    they were before modes existed), ``lookup-allowed-v1.`` for the lookup mode."""
    return f"{LOOKUP_ALLOWED}." if mode == LOOKUP_ALLOWED else ""


def without_lookup(checkpoint: Checkpoint) -> Checkpoint:
    """``checkpoint`` as recall-only publishes it: no store, no tool offered, and a
    receipt that says so (what it holds, nothing it could fetch). Unchanged when it
    offers nothing."""
    if checkpoint.store is None and not checkpoint.tools:
        return checkpoint
    receipt = msgspec.structs.replace(checkpoint.receipt, tools_offered=[], store=None)
    return msgspec.structs.replace(checkpoint, tools=[], store=None, receipt=receipt)
