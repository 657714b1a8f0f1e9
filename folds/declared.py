"""Reading a checkpoint's declared state (``folds.state`` has the rules and the type):
the one the fold returned, else the last visible handoff record of its messages.

Apart from ``folds.state`` so that the state's type and the checkpoint that carries it
import one way: ``checkpoint`` imports ``state``, and this module both.
"""

from __future__ import annotations

from collections.abc import Sequence

from efold.folds.checkpoint import Checkpoint, ReaderMessage
from efold.folds.state import HANDOFF_TOOL, DeclaredState, decode_state


def handoff_record(messages: Sequence[ReaderMessage]) -> ReaderMessage | None:
    """The last visible handoff record of ``messages`` (module docstring, rule 2)."""
    handoff_calls: set[str] = set()
    last: ReaderMessage | None = None
    for message in messages:
        if message.role == "tool":
            if message.tool_call_id is not None and message.tool_call_id in handoff_calls:
                last = message
            continue
        for call in message.tool_calls or ():
            if call.function.name == HANDOFF_TOOL:
                handoff_calls.add(call.id)
    return last


def state_from_messages(messages: Sequence[ReaderMessage]) -> DeclaredState | None:
    """The state the last visible handoff record declares, or None (rule 2)."""
    record = handoff_record(messages)
    return None if record is None else decode_state(record.content)


def declared_state(checkpoint: Checkpoint) -> DeclaredState | None:
    """The checkpoint's declared state: the one the fold returned, else the one its
    visible messages carry, else None (module docstring)."""
    if isinstance(checkpoint.state, DeclaredState):
        return checkpoint.state
    return state_from_messages(checkpoint.messages)
