"""Opaque provider context: items only the provider that made them can read.

A provider-compaction fold (``folds.provider_compact``) asks a provider to compact a
conversation; the provider answers with items efold cannot read (OpenAI's
``compaction`` item carries ``encrypted_content``). Such items are usable by one reader
only: the same provider, on the same wire API (Anthropic's signed ``compaction`` block
has readable ``content``, but it is signed for its provider and must go back byte-exact:
efold treats it as opaque too). ``OpaqueContext`` is how a checkpoint holds them:

* ``provider`` and ``api`` name the only reader that may consume them (a route's
  ``provider`` and ``api``, e.g. ``openai`` / ``openai-responses``); ``kind`` names the
  provider feature that made them (``openai-responses-compact``,
  ``anthropic-messages-compact``);
* ``items`` are the provider's items exactly as its reply carried them, in order;
* ``items_sha256`` binds them: the sha256 of their canonical JSON.

# Invariant: ``items_sha256 == items_digest(items)``. ``opaque_context`` computes it and
# ``verify_opaque`` checks it before anything reads the items (``fold_opaque_digest_mismatch``).

efold never looks inside an opaque item: availability cannot see into it and reports
must not print it (the items are content). Only counts, the digest and the names above
are content-free.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from efold.digests import digest_of
from efold.errors import Code
from efold.folds.errors import FoldError

OPENAI_COMPACT_KIND: Final = "openai-responses-compact"
ANTHROPIC_COMPACT_KIND: Final = "anthropic-messages-compact"


class OpaqueContext(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Provider items a checkpoint carries for one reader (see the module docstring)."""

    provider: str
    api: str
    kind: str
    items: list[dict[str, Any]]
    items_sha256: str


def items_digest(items: list[dict[str, Any]]) -> str:
    return digest_of(items)


def opaque_context(provider: str, api: str, kind: str, items: list[dict[str, Any]]
                   ) -> OpaqueContext:
    """The context for ``items``, digest-bound (a detached copy of ``items``)."""
    copied: list[dict[str, Any]] = msgspec.json.decode(msgspec.json.encode(items))
    return OpaqueContext(provider=provider, api=api, kind=kind, items=copied,
                         items_sha256=items_digest(copied))


def verify_opaque(context: OpaqueContext) -> OpaqueContext:
    """``context`` when its items still hash to its digest; else ``fold_opaque_digest_mismatch``."""
    if items_digest(context.items) != context.items_sha256:
        raise FoldError(Code.FOLD_OPAQUE_DIGEST_MISMATCH, "opaque items differ from their digest")
    return context


def readable_by(context: OpaqueContext, provider: str, api: str) -> bool:
    """Whether a reader on ``provider``/``api`` can consume ``context`` (exact names only:
    an allowlist of one, so a new provider or API is infeasible until someone adds it)."""
    return (context.provider, context.api) == (provider, api)
