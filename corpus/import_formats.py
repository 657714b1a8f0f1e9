"""The transcript formats efold imports, by name: one reader each (``corpus import``,
and the sessions of boundary cases)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from efold.corpus.import_agents import read_claude_code, read_codex, read_pi
from efold.corpus.import_anthropic import read_anthropic
from efold.corpus.import_openai import read_openai_chat
from efold.corpus.imports import Transcript

# Format name (the trace's family) -> reader.
READERS: Final[dict[str, Callable[[bytes, str], Transcript]]] = {
    "openai-chat": read_openai_chat,
    "anthropic": read_anthropic,
    "claude-code": read_claude_code,
    "codex": read_codex,
    "pi": read_pi,
}
