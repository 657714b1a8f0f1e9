"""A scripted reply of the faux provider (``FauxReply``), apart from the wire formats
that render it (``faux``: Chat Completions and Responses; ``faux_messages``: Messages) so
that both import it one way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

FauxTerminal = Literal["completed", "incomplete", "failed", "error", "cut"]


@dataclass(frozen=True)
class FauxReply:
    """A scripted reply. ``usage="computed"`` derives faux usage; ``None`` sends no
    usage (missing); a dict is sent verbatim as the raw ``usage`` object. ``tier=None``
    omits ``service_tier``. ``terminal="cut"`` ends the stream without a terminal event."""

    items: list[dict[str, Any]]
    usage: dict[str, Any] | Literal["computed"] | None = "computed"
    tier: str | None = "default"
    terminal: FauxTerminal = "completed"
