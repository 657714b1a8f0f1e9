"""The state a fold declares, and the one rule that derives it from visible messages.

A fold's **declared state** (``DeclaredState``) is structured, machine-readable state
the checkpoint hands the resumed agent: ``keys`` (state key -> value), ``anchors`` (the
active state keys), ``failures`` (id -> ``open`` or ``retired``) and ``obligations``
(id -> ``open`` or ``done``). The boundary oracles read it (``efold.boundary.oracles``:
``state-key-equals``, ``anchor-active``, ``failure-open``, ``failure-retired``,
``obligation-open``); a checkpoint that declares none makes them ``not_applicable``.

Where it comes from (``folds.declared.declared_state``), first rule that applies:

1. **Returned**: the checkpoint's ``state`` (``Checkpoint.state``), when the fold set
   one: an entry-point plugin builds it, an external command returns it in its output
   (``efold.folds.external``). It is taken as returned.
2. **Derived** (every other checkpoint, the built-in arms' included): the **last visible
   handoff record** of the checkpoint's messages. A handoff record is a ``tool`` message
   answering a tool call, visible in an earlier message of the same checkpoint, whose
   function name is ``HANDOFF_TOOL`` (``handoff_state``). Its content must be one JSON
   object in ``DeclaredState``'s shape (closed: unknown keys or wrong types make it no
   state). The last record decides alone: records are whole snapshots, never merged,
   and a last record that does not decode declares no state (it never falls back to an
   earlier, staler one).
3. Otherwise the checkpoint declares no state (``None``).

The rule reads only what the checkpoint keeps reader-visible, structurally: ``native``
(the whole transcript) declares the session's last record; ``cold-rebuild``, ``store``
and ``pack`` (text messages, records only as cited text) declare none; a compaction arm
declares one only when its kept tail holds the record as a tool call and result. A
summary that quotes or paraphrases the record does not declare it: declared state is
never read from prose a summariser (possibly a model) wrote.

Invariants: ``DeclaredState`` validates its own field types (on decode and on
construction), so a declared state is always well-formed; deriving never raises.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

HANDOFF_TOOL: Final = "handoff_state"

FailureStatus = Literal["open", "retired"]
ObligationStatus = Literal["open", "done"]
_FAILURE_STATUSES: Final = frozenset({"open", "retired"})
_OBLIGATION_STATUSES: Final = frozenset({"open", "done"})


def _str_map(value: object, allowed: frozenset[str] | None, field: str) -> None:
    if not isinstance(value, dict):
        raise TypeError(f"{field} must be an object")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{field} maps strings to strings")
        if allowed is not None and item not in allowed:
            raise ValueError(f"{field}[{key!r}] must be one of {sorted(allowed)}")


class DeclaredState(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The state a fold declares in its checkpoint (docs/boundary.md §5).

    Closed: decoding refuses unknown keys and wrong types; ``__post_init__`` applies
    the same rules to a state built in Python (a plugin's), where msgspec checks none.
    """

    keys: dict[str, str] = msgspec.field(default_factory=dict)  # state key -> value
    anchors: list[str] = msgspec.field(default_factory=list)  # the active state keys
    failures: dict[str, FailureStatus] = msgspec.field(default_factory=dict)
    obligations: dict[str, ObligationStatus] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        _str_map(self.keys, None, "keys")
        if not isinstance(self.anchors, list) or not all(isinstance(a, str) for a in self.anchors):
            raise TypeError("anchors must be a list of strings")
        _str_map(self.failures, _FAILURE_STATUSES, "failures")
        _str_map(self.obligations, _OBLIGATION_STATUSES, "obligations")


def decode_state(text: str | bytes) -> DeclaredState | None:
    """``text`` as a ``DeclaredState`` (one closed JSON object), or None if it is not one."""
    try:
        return msgspec.json.decode(text, type=DeclaredState)
    except msgspec.DecodeError:  # ValidationError included
        return None
