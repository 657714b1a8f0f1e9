"""Reading and writing traces (JSONL) and probe files (JSON), strictly.

A trace file is one ``TraceHeader`` line followed by ``Event`` lines; a probe file is
one ``ProbeFile`` object. Encoding is canonical (struct field order, no whitespace, one
``\\n`` after every line), so the bytes written are the bytes digested.
Every decoding failure (nesting too deep to decode included) becomes
``CorpusError(TRACE_SCHEMA_INVALID | PROBE_INVALID)``.
"""

from __future__ import annotations

import msgspec

from efold.corpus.errors import CorpusError
from efold.corpus.model import Event, ProbeFile, Trace, TraceHeader, TraceLine
from efold.errors import Code

_ENCODER = msgspec.json.Encoder()
_LINE_DECODER = msgspec.json.Decoder(TraceLine)
_PROBES_DECODER = msgspec.json.Decoder(ProbeFile)


def dump_trace(trace: Trace) -> bytes:
    """Canonical JSONL bytes of a trace: header line, then one line per event."""
    lines = [_ENCODER.encode(trace.header)]
    lines.extend(_ENCODER.encode(event) for event in trace.events)
    return b"\n".join(lines) + b"\n"


def load_trace(data: bytes) -> Trace:
    """Decode JSONL trace bytes. The first line must be the header and only the first."""
    if not data.endswith(b"\n"):
        raise CorpusError(Code.TRACE_SCHEMA_INVALID, "trace file must end with a newline")
    raw_lines = data[:-1].split(b"\n")
    header: TraceHeader | None = None
    events: list[Event] = []
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = _LINE_DECODER.decode(raw)
        # RecursionError: a value nested too deep for the decoder to skip while it looks
        # for the line's ``kind`` tag.
        except (msgspec.DecodeError, RecursionError) as exc:
            raise CorpusError(Code.TRACE_SCHEMA_INVALID, f"line {number}: {exc}") from exc
        if isinstance(line, TraceHeader):
            if number != 1:
                raise CorpusError(Code.TRACE_SCHEMA_INVALID, f"line {number}: second header")
            header = line
        elif header is None:
            raise CorpusError(Code.TRACE_SCHEMA_INVALID, "line 1: header missing")
        else:
            events.append(line)
    if header is None:  # pragma: no cover - an empty file fails decoding above
        raise CorpusError(Code.TRACE_SCHEMA_INVALID, "header missing")
    return Trace(header=header, events=events)


def dump_probes(probes: ProbeFile) -> bytes:
    """Canonical JSON bytes of a probe file (one line, newline-terminated)."""
    return _ENCODER.encode(probes) + b"\n"


def load_probes(data: bytes) -> ProbeFile:
    try:
        return _PROBES_DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise CorpusError(Code.PROBE_INVALID, f"probe file: {exc}") from exc
