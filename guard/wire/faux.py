"""The faux transport: a scripted provider speaking Responses SSE, offline (and the
Messages API, through ``faux_messages``).

``FauxTransport(responder)`` decodes the exact body the guard sends, hands the payload
to ``responder(payload) -> list[output item]`` (or a ``FauxReply`` for fault scripts),
renders the reply as Responses SSE bytes (``response.created``, ``output_item.added``,
text/argument deltas, ``output_item.done``, a terminal event with usage) and returns
them split into small chunks, so the faux path runs through the *same* incremental
parser as the real adapter.

The faux provider also plays the Responses compaction endpoint (``POST
/responses/compact``, a JSON reply) when given a ``compactor``; ``faux_compaction`` is
the deterministic one: it keeps the owner messages verbatim, as the provider documents,
and replaces everything else by one ``compaction`` item whose ``encrypted_content`` is
``faux-compaction:`` and the sha256 of the canonical input items (a digest, no content:
nothing can read it, as nothing can read a real one). ``faux_block_compaction`` is its
Messages counterpart (Anthropic's on-demand compaction, called directly by the offline
``anthropic-compact`` arm: the faux provider serves no Messages route): one
``compaction`` block whose ``content`` and ``signature`` name the sha256 of the
canonical messages (a digest, no summary: valid for no provider).

Faux usage, when not scripted, is deterministic: ``input_tokens = max(1, ceil(body
bytes / 4))`` (so always ≤ U_k, which counts every body byte), ``output_tokens =
ceil(bytes of the JSON output items / 4)``, no cached or reasoning tokens, tier
``default``. Like a real provider, every response object reports the model: the
payload's ``model``. This module imports only the standard library and msgspec.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from efold.errors import Code
from efold.guard.contract import FAUX_BASE_URL
from efold.guard.errors import GuardError
from efold.guard.transport import SendTicket, WireRequest, WireResponse, require_ticket
from efold.guard.wire.faux_messages import as_items, messages_usage, render_messages
from efold.guard.wire.faux_reply import FauxReply as FauxReply
from efold.guard.wire.faux_reply import FauxTerminal as FauxTerminal

Responder = Callable[[dict[str, Any]], "list[dict[str, Any]] | FauxReply"]
# ``compactor(input items) -> output items`` of a compaction reply.
Compactor = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
FAUX_COMPACT_PATH = "/responses/compact"
FAUX_COMPACTION_PREFIX = "faux-compaction:"


def faux_compaction(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The deterministic compaction (module docstring): owner messages, then one item."""
    digest = hashlib.sha256(msgspec.json.encode(items, order="sorted")).hexdigest()
    kept = [item for item in items if item.get("type", "message") == "message"
            and item.get("role") == "user"]
    return [*kept, {"type": "compaction", "id": "cmp_faux",
                    "encrypted_content": FAUX_COMPACTION_PREFIX + digest}]


def faux_block_compaction(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The deterministic Messages compaction (module docstring): one block."""
    digest = hashlib.sha256(msgspec.json.encode(messages, order="sorted")).hexdigest()
    return [{"type": "compaction", "content": FAUX_COMPACTION_PREFIX + digest,
             "signature": "faux-signature:" + digest}]


def render_compaction(output: list[dict[str, Any]], usage: dict[str, Any] | None, *,
                      model: str | None) -> bytes:
    """A compaction reply as the endpoint's JSON body (``usage`` None: no usage sent)."""
    reply: dict[str, Any] = {"id": "resp_faux", "object": "response.compaction",
                             "created_at": 0, "output": output}
    if model is not None:
        reply["model"] = model
    if usage is not None:
        reply["usage"] = usage
    return msgspec.json.encode(reply)


def faux_usage(body: bytes, items: list[dict[str, Any]]) -> dict[str, Any]:
    output_bytes = len(msgspec.json.encode(items))
    return {
        "input_tokens": max(1, -(-len(body) // 4)),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": -(-output_bytes // 4),
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def _event(kind: str, seq: int, **fields: Any) -> bytes:
    data = msgspec.json.encode({"type": kind, "sequence_number": seq, **fields})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _halves(text: str) -> list[str]:
    mid = len(text) // 2
    return [part for part in (text[:mid], text[mid:]) if part]


def render_responses_sse(reply: FauxReply, usage: dict[str, Any] | None, *,
                         model: str | None = None) -> bytes:
    """A reply as a Responses event stream; ``model`` (if given) in every response
    object, as a real provider reports it."""
    out: list[bytes] = []
    seq = iter(range(1 << 30))
    reported = {} if model is None else {"model": model}
    created = {"id": "resp_faux", "object": "response", "status": "in_progress",
               "output": [], "service_tier": "auto",  # the *requested* tier: never billed
               **reported}
    out.append(_event("response.created", next(seq), response=created))
    for index, item in enumerate(reply.items):
        kind = item.get("type")
        skeleton = {**item, "content": []} if kind == "message" else item
        out.append(_event("response.output_item.added", next(seq), output_index=index,
                          item=skeleton))
        if kind == "message":
            for part in item.get("content", []):
                for piece in _halves(str(part.get("text", ""))):
                    out.append(_event("response.output_text.delta", next(seq),
                                      output_index=index, content_index=0, delta=piece))
        elif kind == "function_call":
            for piece in _halves(str(item.get("arguments", ""))):
                out.append(_event("response.function_call_arguments.delta", next(seq),
                                  output_index=index, delta=piece))
        out.append(_event("response.output_item.done", next(seq), output_index=index,
                          item=item))
    if reply.terminal == "cut":
        return b"".join(out)
    if reply.terminal == "error":
        out.append(_event("error", next(seq), code="server_error", message="faux error"))
        return b"".join(out)
    final: dict[str, Any] = {"id": "resp_faux", "object": "response",
                             "status": reply.terminal, "output": reply.items, **reported}
    if usage is not None:
        final["usage"] = usage
    if reply.tier is not None:
        final["service_tier"] = reply.tier
    out.append(_event(f"response.{reply.terminal}", next(seq), response=final))
    return b"".join(out)


class BufferedResponse:
    """A complete body handed out in fixed-size chunks (splitting UTF-8 sequences
    and line ends wherever they fall)."""

    def __init__(self, status: int, body: bytes, chunk_size: int) -> None:
        self.status = status
        self._body = body
        self._chunk_size = chunk_size

    def chunks(self) -> Iterator[bytes]:
        body, size = self._body, self._chunk_size
        for start in range(0, len(body), size):
            yield body[start:start + size]

    def close(self) -> None:
        self._body = b""


class FauxTransport:
    """Offline scripted provider for the route ``faux://local``: streaming Responses,
    and the Messages API (``faux_messages``)."""

    route = FAUX_BASE_URL

    def __init__(self, responder: Responder, *, chunk_size: int = 61,
                 compactor: Compactor | None = None) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        self._responder = responder
        self._compactor = compactor  # None: the compaction endpoint is not served
        self._chunk_size = chunk_size
        self.sends = 0  # how many requests reached the responder

    def open(self, ticket: SendTicket, request: WireRequest) -> WireResponse:
        require_ticket(ticket)
        if request.path == FAUX_COMPACT_PATH and self._compactor is not None:
            return self._compact(self._compactor, request)
        if request.path == "/messages":
            return self._messages(request)
        if request.path != "/responses" or not request.stream:
            raise GuardError(Code.LOOKUP_ROUTE_MISMATCH,
                             "faux speaks streaming Responses and Messages only")
        self.sends += 1
        payload = msgspec.json.decode(request.body)
        reply = self._responder(payload)
        if not isinstance(reply, FauxReply):
            reply = FauxReply(items=list(reply))
        usage = (faux_usage(request.body, reply.items) if isinstance(reply.usage, str)
                 else reply.usage)
        model = payload.get("model") if isinstance(payload, dict) else None
        rendered = render_responses_sse(reply, usage,
                                        model=model if isinstance(model, str) else None)
        return BufferedResponse(200, rendered, self._chunk_size)

    def _messages(self, request: WireRequest) -> WireResponse:
        """The same responder on the Messages API (``faux_messages``)."""
        self.sends += 1
        payload = msgspec.json.decode(request.body)
        reply = self._responder(as_items(payload))
        if not isinstance(reply, FauxReply):
            reply = FauxReply(items=list(reply))
        usage = (messages_usage(request.body, reply.items) if isinstance(reply.usage, str)
                 else reply.usage)
        model = payload.get("model")
        rendered = render_messages(reply, usage, model=model if isinstance(model, str) else None,
                                   stream=request.stream)
        return BufferedResponse(200, rendered, self._chunk_size)

    def _compact(self, compactor: Compactor, request: WireRequest) -> WireResponse:
        self.sends += 1
        payload = msgspec.json.decode(request.body)
        items = payload.get("input") if isinstance(payload, dict) else None
        output = compactor(items if isinstance(items, list) else [])
        model = payload.get("model") if isinstance(payload, dict) else None
        body = render_compaction(output, faux_usage(request.body, output),
                                 model=model if isinstance(model, str) else None)
        return BufferedResponse(200, body, self._chunk_size)
