"""``results.json``: the canonical encoding of ``Results`` (and its strict decoder)."""

from __future__ import annotations

import msgspec

from efold.errors import Code
from efold.report.errors import ReportError
from efold.report.schema import Results

__all__ = ["decode_results", "render_json"]

_DECODER = msgspec.json.Decoder(Results)


def render_json(results: Results) -> bytes:
    """Canonical JSON: keys sorted at every level, no insignificant whitespace, UTF-8.
    The same results always encode to the same bytes, so the file can be hashed."""
    return msgspec.json.encode(results, order="sorted")


def decode_results(data: bytes) -> Results:
    """Strictly decode ``results.json`` (unknown fields and other schemas refuse)."""
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise ReportError(Code.REPORT_INPUT_INVALID, "not a results-v1 document") from exc
