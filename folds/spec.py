"""What names a fold (``FoldSpec``): read by the fold registry (which fold to build) and
by pinning (which code that fold is), so it sits below both."""

from __future__ import annotations

from typing import Protocol


class FoldSpec(Protocol):
    """What names a fold: a campaign ``Role`` or a ``PrepTask`` (``command`` set: an
    external command named ``arm``; otherwise a built-in or entry-point arm)."""

    @property
    def arm(self) -> str: ...

    @property
    def command(self) -> list[str] | None: ...

    @property
    def proxy(self) -> object | None: ...  # set: ``command`` starts a proxy fold

    @property
    def cwd(self) -> str | None: ...  # a command's working directory (None: inherited)

    @property
    def build(self) -> str | None: ...  # a command's source tree, pinned whole (None: none)
