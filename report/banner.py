"""The status banner both reports open with, as plain data.

``report.status.status_banner`` owns the verdict's sentences; this module adds what a
reader needs beside them at a glance: the verdict as a word (the HTML page also colours
it, never relying on colour alone), the meaning of the stop code (``report.terms``), the
run's identity in one line (campaign, reader, faux or not, registration sha256 short),
and what ran when in a second line (``run_facts``: efold version, start and end in UTC,
duration, reader model, summariser models by role, and the run's spend from its
journal: settled and retained against the cap). Fixed sentences, codes, ids, model
ids, times and counts only: never a host name or a path.
"""

from __future__ import annotations

import msgspec

from efold.report.numbers import FAUX_MONEY, duration_text, spend_line, utc_text
from efold.report.results import reader_label, stand_in_lines
from efold.report.schema import Results
from efold.report.status import status_banner
from efold.report.terms import stop_meaning

__all__ = ["SHORT_SHA", "Banner", "banner", "run_facts"]

SHORT_SHA = 12  # hex digits of the registration sha256 shown in the banner

# The verdict as one word, and the class the page colours it by. ``unknown``: results
# built without the run's journal.
_WORDS = {
    "complete": "COMPLETE", "stopped": "STOPPED", "running": "RUNNING",
    "interrupted": "INTERRUPTED", "crashed": "CRASHED", "unreconciled": "UNRECONCILED",
    "damaged": "DAMAGED", "partial": "PARTIAL",
    "unknown": "STATUS UNKNOWN",
}


class Banner(msgspec.Struct, frozen=True):
    verdict: str  # a RunStatus verdict, or "unknown"
    word: str  # the verdict as one word, in capitals
    headline: str  # backticks mark commands and codes
    stop_line: str | None  # the stop code's meaning, when the headline does not carry it
    facts: list[tuple[str, str]]  # the run's identity: (name, value), values plain text
    details: list[str]  # report.status.status_banner's detail lines
    run: list[tuple[str, str]]  # what ran when (run_facts): (name, value), plain text


def banner(results: Results) -> Banner:
    status = results.status
    headline, details = status_banner(status)
    details = [*details, *stand_in_lines(results)]
    verdict = status.verdict if status is not None else "unknown"
    stop = status.stop if status is not None else None
    meaning = stop_meaning(stop)
    stop_line = None
    if meaning is not None:
        if verdict == "stopped":
            headline = f"{headline} ({meaning})"
        elif verdict != "interrupted":  # an interruption's headline says it all
            stop_line = f"Stop code `{stop}`: {meaning}"
    facts = [
        ("campaign", results.campaign),
        ("reader", reader_label(results)),
        ("faux", _money_kind(results)),
        ("registration", results.registration_sha256[:SHORT_SHA]),
    ]
    return Banner(verdict=verdict, word=_WORDS.get(verdict, verdict.upper()),
                  headline=headline, stop_line=stop_line, facts=facts, details=details,
                  run=run_facts(results))


def _money_kind(results: Results) -> str:
    """What the run's money is: faux units, nothing billed (a local route), or real."""
    if results.reader_faux and (results.run is None or results.run.route != "local"):
        return f"yes ({FAUX_MONEY})"
    if results.run is not None and results.run.route == "local":
        return "no (a local route: models on loopback, nothing billed)"
    return "no (real money)"


_PROBE_MODE_TEXT = {
    "recall-only": "recall-only (no arm offered the history lookup)",
    "lookup-allowed-v1": "lookup-allowed-v1 (the history lookup offered where a store is kept)",
}


def run_facts(results: Results) -> list[tuple[str, str]]:
    """What ran and when: the efold version, start and end (UTC, to the second), the
    duration (``so far`` while a controller still runs it), the reader's model id and
    each summariser model with the roles that ask it. The campaign is the identity
    line's. Empty for a document written before ``run`` existed; an unknown time is an
    em dash."""
    info = results.run
    if info is None:
        return []
    running = results.status is not None and results.status.verdict == "running"
    duration = duration_text(info.duration_seconds)
    if running and info.duration_seconds is not None:
        duration += " so far"
    facts = [
        ("efold", info.efold_version),
        ("started", utc_text(info.started_at)),
        ("ended", utc_text(info.ended_at)),
        ("duration", duration),
        ("reader model", info.reader or "\u2014"),
    ]
    if info.probe_mode is not None:
        facts.append(("probe mode", _PROBE_MODE_TEXT[info.probe_mode]))
    roles_of: dict[str, list[str]] = {}
    ordered = [*results.roles, *sorted(set(info.summarisers) - set(results.roles))]
    for role in ordered:  # plan order
        if role in info.summarisers:
            roles_of.setdefault(info.summarisers[role], []).append(role)
    facts += [("summariser", f"{model} ({', '.join(roles)})")
              for model, roles in roles_of.items()]
    if results.money is not None:  # every caller's, from the journal
        facts.append(("spend", spend_line(results.money, results.cap, results.reader_faux)))
    return facts
