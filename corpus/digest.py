"""Canonical SHA-256 digests of traces, probe files, suite items and whole corpora.

A digest is over the canonical bytes of ``corpus.codec`` (never over a file as found on
disk), so two equal traces always have the same digest whatever their origin. The
corpus digest binds every trace *and* its probes, in trace-id order, so a registration
that binds it notices any change to a rubric as well as to the text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from efold.corpus.codec import dump_probes, dump_trace
from efold.corpus.errors import CorpusError
from efold.corpus.model import ProbeFile, SuiteItem, Trace
from efold.errors import Code

CORPUS_DIGEST_DOMAIN = b"efold-corpus-v1\n"


def trace_digest(trace: Trace) -> str:
    return hashlib.sha256(dump_trace(trace)).hexdigest()


def probes_digest(probes: ProbeFile) -> str:
    return hashlib.sha256(dump_probes(probes)).hexdigest()


def item_digest(item: SuiteItem) -> str:
    """Digest of one trace together with its probes."""
    body = f"{trace_digest(item.trace)} {probes_digest(item.probes)}\n".encode()
    return hashlib.sha256(CORPUS_DIGEST_DOMAIN + body).hexdigest()


def corpus_digest(items: Sequence[SuiteItem]) -> str:
    """Order-independent digest of a set of suite items (sorted by suite, trace id).

    Two items with the same (suite, trace id) make the corpus ambiguous: refused."""
    keyed = sorted(
        ((i.trace.header.suite, i.trace.header.trace_id), item_digest(i)) for i in items
    )
    keys = [key for key, _ in keyed]
    if len(set(keys)) != len(keys):
        raise CorpusError(Code.TRACE_SCHEMA_INVALID, "duplicate trace id in corpus")
    body = "".join(f"{suite} {trace_id} {digest}\n" for (suite, trace_id), digest in keyed)
    return hashlib.sha256(CORPUS_DIGEST_DOMAIN + body.encode()).hexdigest()
