"""Write the contract corpus (``boundary/contract/``) and its lock from the tasks below.

    python scripts/build_contract_corpus.py [--out DIR]

Twenty small backend contract tasks, each a boundary case (docs/boundary.md, "The
contract corpus"): the comparison set ``efold-controller analyze --corpus contract``
reads. Every task's workspace holds

* ``contract.json``, the protected contract: the function to write and its test
  vectors, each vector's arguments and the sha256 of the canonical JSON of its expected
  result (the expected values are written out below, by hand, in ``Task.vectors``; the
  contract commits to them without showing them: the decided rule is not written in the
  workspace. A hash hides a value only as well as its range does: an output of few
  possible values (a boolean, a small integer) can be found by trying them, which an
  agent gaming the verifier could do);
* ``verify.py``, the executable verifier (one file, the same in every task): it runs
  the module in a child process, compares every vector's result and exits 0 only when
  every one matches; it holds no expected value of its own. Any implementation that
  meets the contract passes: the oracles are the verifier and the protected files,
  never the reference solution's bytes;
* ``<module>.py``, a stub that fails the verifier, and ``README.md``;

and ``workspace.expected/<module>.py`` holds the reference solution. The session is the
owner and the assistant deciding the task's particulars: an earlier choice, then the
decision that replaces it (the critical event), then ordinary work long enough that the
cold boundary loses what came before and the compaction arms fold. Where the decision
sits varies by task (``Task.carrier``): an owner message (kept whole by a compaction
summary), the middle of a fetched design document or the tail of a long assistant
proposal (both lost by a summary that keeps a result's head and tail and a reply's
head), or a recent owner message (in every arm's view). The faux agent's informed plan
keys on the decision's wording, which appears only in the critical event; its second
plan keys on the superseded choice and writes that variant; its fallback does what an
agent without the history does (runs the verifier on the stub, or writes a textbook
variant). Every variant other than the reference fails the verifier.

Deterministic: the same source writes byte-identical cases and lock. The ids use the
exploratory letter (``X21`` to ``X40``: the sidecar's id pattern admits B, X and R
only, and the letter fixes the tier), numbered after the bundled cases so that a short
id names one bundled case. Changing what this script writes for a case changes its
digest, which the lock refuses until the case's ``version`` is raised (docs/boundary.md
§3). Helpers of ``build_boundary_cases.py`` (the session writer, the sidecar skeleton,
the case writer) are imported, not copied.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from build_boundary_cases import CaseDef, Session, base, run_tests, write, write_case

from efold.boundary.case import load_cases
from efold.boundary.lock import write_lock
from efold.corpus.model import Trace, TraceHeader

ROOT = Path(__file__).resolve().parents[1]
VERIFY = ["python", "verify.py"]
FIRST_NUMBER = 21  # X21 .. X40
CONTRACT_SCHEMA = "efold-contract-v1"

Carrier = Literal["owner", "document", "proposal", "recent"]


def canonical(value: Any) -> str:
    """The canonical JSON the verifier hashes: sorted keys, no spaces, ASCII."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def raises(name: str) -> dict[str, str]:
    """The expected outcome of a vector whose call must raise ``name``."""
    return {"raises": name}


VERIFY_PY = '''\
"""Check the implementation against contract.json; exit 0 only if every vector matches.

contract.json names the module and the function, and lists the vectors: each one's
arguments and the sha256 of the canonical JSON (sorted keys, no spaces, ASCII) of its
expected result. A call that raises has the result {"raises": "<exception type>"}. This
script holds no expected value of its own: everything it checks is in contract.json.
The implementation runs in a child process of this script, so nothing it does decides
the exit status: only the outcomes it reports are compared, here.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MARK = "efold-contract-outcomes: "


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def outcome(function: Any, args: list[Any]) -> Any:
    try:
        result = function(*args)
    except Exception as exc:  # a vector may expect the call to raise
        return {"raises": type(exc).__name__}
    return json.loads(json.dumps(result))  # tuples become lists, as JSON holds them


def outcomes(contract: dict[str, Any]) -> list[str]:
    """Every vector's result, as canonical JSON (run in the child: ``--outcomes``)."""
    sys.path.insert(0, str(HERE))
    function = getattr(importlib.import_module(contract["module"]), contract["function"])
    found = []
    for vector in contract["vectors"]:
        try:
            found.append(canonical(outcome(function, vector["args"])))
        except (TypeError, ValueError) as exc:
            found.append(f"<not JSON: {exc}>")
    return found


def main() -> int:
    contract = json.loads((HERE / "contract.json").read_text(encoding="utf-8"))
    if sys.argv[1:] == ["--outcomes"]:
        print(MARK + json.dumps(outcomes(contract)))
        return 0
    # The implementation runs in a child process: whatever it does (exit early, exit 0
    # from inside a call), only the outcomes it printed are judged, here.
    child = subprocess.run([sys.executable, str(HERE / "verify.py"), "--outcomes"],
                           cwd=HERE, capture_output=True, text=True, check=False)
    lines = [line for line in child.stdout.splitlines() if line.startswith(MARK)]
    vectors = contract["vectors"]
    try:
        got = json.loads(lines[-1][len(MARK):]) if lines else None
    except ValueError:
        got = None
    if not isinstance(got, list) or len(got) != len(vectors):
        print(f"the implementation gave no outcomes (exit {child.returncode}): "
              f"{(child.stderr or child.stdout)[-300:]}")
        return 1
    matched = 0
    for vector, result in zip(vectors, got):
        ok = hashlib.sha256(str(result).encode("utf-8")).hexdigest() == vector["expect_sha256"]
        matched += ok
        call = f"{contract['function']}({canonical(vector['args'])[1:-1]})"
        print(f"{vector['id']} {'ok' if ok else 'MISMATCH'}  {call[:100]} -> {str(result)[:100]}")
    print(f"{matched} of {len(vectors)} vectors match")
    return 0 if vectors and matched == len(vectors) else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def module(doc: str, code: str, imports: tuple[str, ...] = ()) -> str:
    """A module's text: its docstring, the imports, then ``code``."""
    head = f'"""{doc}"""\n\nfrom __future__ import annotations\n'
    if imports:
        head += "\n" + "\n".join(imports) + "\n"
    body = code.strip("\n")
    gap = "\n\n" if body.startswith(("def ", "class ")) else "\n"  # as isort spaces it
    return f"{head}{gap}{body}\n"


@dataclass(frozen=True)
class Task:
    """One contract task (the module docstring). ``vectors`` are (arguments, expected
    outcome) written by hand; ``reference``, ``superseded`` and ``fallback`` are module
    texts (``fallback`` None: the agent without the history only runs the verifier)."""

    slug: str
    title: str
    module: str
    function: str
    signature: str  # the def line's parameters and return annotation
    about: str  # what contract.json says the function does (never the decided rule)
    vectors: tuple[tuple[list[Any], Any], ...]
    reference: str
    opening: str  # the owner's first message
    earlier: str  # the owner's earlier choice, superseded
    earlier_when: str  # the wording of ``earlier`` the superseded plan keys on
    superseded: str  # the module an agent following the earlier choice writes
    carrier: Carrier
    decision: str  # the decisive text (an owner message, a document, a proposal)
    when: str  # the wording of ``decision`` the informed plan keys on
    recall: str
    fallback: str | None = None
    preamble: str = ""  # module code shared by the stub and every variant (a table)
    imports: tuple[str, ...] = ()  # what the reference and the fallback import
    source: str = ""  # a document carrier: the URL fetched

    @property
    def typing(self) -> tuple[str, ...]:
        """The import the signature's annotations need (the stub has it too)."""
        return ("from typing import Any",) if "Any" in self.signature else ()

    @property
    def stub(self) -> str:
        code = (f"{self.preamble}\n\n\n" if self.preamble else "") + (
            f"def {self.function}{self.signature}:\n"
            f'    raise NotImplementedError("{self.function}: not written yet")\n')
        return module(self.doc, code, self.typing)

    @property
    def doc(self) -> str:
        return f"{self.title}: {self.function} (the contract: contract.json; python verify.py)."

    def variant(self, code: str, imports: tuple[str, ...] | None = None) -> str:
        """A module of the task: the stub's shared code and ``code``, with ``imports``
        (the task's own by default) before the signature's."""
        shared = f"{self.preamble}\n\n\n" if self.preamble else ""
        chosen = self.imports if imports is None else imports
        return module(self.doc, shared + code.strip("\n"), (*chosen, *self.typing))


# -- the twenty tasks -------------------------------------------------------------------


TASKS: tuple[Task, ...] = (
    Task(
        slug="retry-backoff", title="Retry backoff", module="retry", function="retry_delays",
        signature="(attempts: int) -> list[int]",
        about=("The delays in milliseconds before each retry of a failed upstream call, "
               "for `attempts` retries; a negative count is a ValueError."),
        vectors=(([0], []), ([1], [250]), ([3], [250, 750, 2250]),
                 ([4], [250, 750, 2250, 6000]), ([5], [250, 750, 2250, 6000, 6000]),
                 ([-1], raises("ValueError"))),
        reference="""
FIRST_DELAY_MS = 250
GROWTH = 3
MAX_DELAY_MS = 6000


def retry_delays(attempts: int) -> list[int]:
    if attempts < 0:
        raise ValueError("attempts must be >= 0")
    delays = []
    delay = FIRST_DELAY_MS
    for _ in range(attempts):
        delays.append(min(delay, MAX_DELAY_MS))
        delay *= GROWTH
    return delays
""",
        opening=("New small task: retry.py needs retry_delays, the waits between retries of "
                 "a failed upstream call. The contract and its verifier are in the repo."),
        earlier=("For the retry policy let's start simple: 100 ms, doubling each time, "
                 "capped at 10 seconds."),
        earlier_when="100 ms, doubling each time, capped at 10 seconds",
        superseded="""
def retry_delays(attempts: int) -> list[int]:
    if attempts < 0:
        raise ValueError("attempts must be >= 0")
    return [min(100 * 2**i, 10_000) for i in range(attempts)]
""",
        carrier="owner",
        decision=("Decision on retries, final: the first retry waits 250 ms, each later one "
                  "waits three times the previous, and no delay is ever longer than 6000 ms. "
                  "No jitter: the payments team wants reproducible delays."),
        when="each later one waits three times the previous",
        recall="retry delays decision"),
    Task(
        slug="rate-limit-window", title="Rate limit window", module="ratelimit",
        function="admit", signature="(history: list[float], now: float) -> bool",
        about=("Whether a client's request at `now` (seconds) is admitted, given the times "
               "of its earlier admitted requests (`history`)."),
        vectors=(([[], 0], True), ([[1, 2, 3, 4], 5], True), ([[1, 2, 3, 4, 5], 6], False),
                 ([[0, 1, 2, 3, 4], 10], True), ([[0, 1, 2, 3, 4], 9.5], False),
                 ([[0, 0, 0, 0, 0, 0], 30], True), ([[5, 6, 7, 8, 9], 14.999], False)),
        reference="""
WINDOW_SECONDS = 10
LIMIT = 5


def admit(history: list[float], now: float) -> bool:
    recent = [t for t in history if now - WINDOW_SECONDS < t <= now]
    return len(recent) < LIMIT
""",
        opening=("Next up: ratelimit.py needs admit(), the per-client limiter in front of "
                 "the search API. Contract and verifier are checked in."),
        earlier=("Rate limit idea: 100 requests per calendar minute, the counter resets at "
                 "the top of each minute."),
        earlier_when="the counter resets at the top of each minute",
        superseded="""
def admit(history: list[float], now: float) -> bool:
    minute = int(now // 60)
    return sum(1 for t in history if int(t // 60) == minute) < 100
""",
        carrier="owner",
        decision=("Final answer on the limiter: a sliding window, at most 5 requests in any "
                  "10 seconds, and a request exactly 10 seconds old no longer counts."),
        when="a request exactly 10 seconds old no longer counts",
        recall="limiter sliding window requests"),
    Task(
        slug="path-normaliser", title="Storage path normaliser", module="paths",
        function="normalize", signature="(path: str) -> str",
        about="The canonical form of a storage key path a client sends.",
        vectors=((["/a/b/"], "/a/b"), (["//a//b"], "/a/b"), (["/a/./b/../c"], "/a/c"),
                 (["a/b"], "/a/b"), (["/"], "/"), ([""], "/"), (["/a/b/.."], "/a"),
                 (["/../etc/passwd"], raises("ValueError")),
                 (["/a/../../b"], raises("ValueError"))),
        reference="""
def normalize(path: str) -> str:
    parts: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not parts:
                raise ValueError(f"{path!r} climbs above the root")
            parts.pop()
        else:
            parts.append(segment)
    return "/" + "/".join(parts)
""",
        opening=("paths.py needs normalize(): clients send storage key paths in every shape "
                 "imaginable and the bucket needs one canonical form."),
        earlier="Paths: just use posixpath.normpath and be done with it.",
        earlier_when="just use posixpath.normpath",
        superseded="""
def normalize(path: str) -> str:
    return posixpath.normpath(path)
""",
        carrier="proposal",
        decision=(
            "Here is the proposal, so we agree before I write anything. normpath is not "
            "enough for storage keys: it keeps a leading double slash on POSIX, it quietly "
            "turns an escape attempt into a valid path, and it returns relative paths as "
            "they came, so two spellings of one object would land on two keys and a client "
            "could address something outside its prefix without us noticing. The rules I "
            "propose, applied segment by segment from left to right: rule 1, repeated "
            "slashes collapse into one; rule 2, a `.` segment is dropped; rule 3, a `..` "
            "segment removes the segment before it; rule 4, a `..` that would climb above "
            "the root is rejected with ValueError, never clamped to the root; rule 5, the "
            "result always starts with a single `/` and never ends with one, except the "
            "root itself, and a relative input is read from the root."),
        when="never clamped to the root",
        recall="path normalisation rules proposal"),
    Task(
        slug="money-rounding", title="Tax rounding", module="money", function="tax_cents",
        signature="(amount_cents: int, rate_bp: int) -> int",
        about=("The tax on an amount in cents at a rate in basis points (hundredths of a "
               "percent), in whole cents; a negative amount or rate is a ValueError."),
        vectors=(([125, 1000], 12), ([135, 1000], 14), ([1000, 825], 82),
                 ([1999, 2000], 400), ([10001, 1], 1), ([50, 100], 0), ([150, 100], 2),
                 ([0, 2000], 0), ([-5, 100], raises("ValueError"))),
        reference="""
def tax_cents(amount_cents: int, rate_bp: int) -> int:
    if amount_cents < 0 or rate_bp < 0:
        raise ValueError("amount and rate must be >= 0")
    quotient, remainder = divmod(amount_cents * rate_bp, 10_000)
    twice = 2 * remainder
    if twice > 10_000 or (twice == 10_000 and quotient % 2 == 1):
        quotient += 1
    return quotient
""",
        opening=("money.py needs tax_cents() for the new invoicing service: amounts in "
                 "cents, rates in basis points."),
        earlier="Tax rounding: round half up, like the old invoicing system did.",
        earlier_when="round half up, like the old invoicing system",
        superseded="""
def tax_cents(amount_cents: int, rate_bp: int) -> int:
    if amount_cents < 0 or rate_bp < 0:
        raise ValueError("amount and rate must be >= 0")
    return (amount_cents * rate_bp + 5_000) // 10_000
""",
        carrier="owner",
        decision=("Finance signed off: tax is rounded half to even (banker's rounding) on the "
                  "exact value, integer arithmetic only, never floats."),
        when="rounded half to even (banker's rounding)",
        recall="tax rounding finance"),
    Task(
        slug="idempotency-replay", title="Idempotency keys", module="idempotency",
        function="replay_decision",
        signature="(stored: dict[str, Any] | None, body_sha256: str, now: int) -> str",
        about=("What the API does with a request carrying an idempotency key: `stored` is "
               "the earlier request under the same key ({\"at\": seconds, \"body_sha256\": "
               "hex}) or null, `now` the time in seconds; the answer is \"process\", "
               "\"replay\" or \"conflict\"."),
        vectors=(([None, "aa", 100], "process"),
                 ([{"at": 0, "body_sha256": "aa"}, "aa", 3600], "replay"),
                 ([{"at": 0, "body_sha256": "aa"}, "aa", 86399], "replay"),
                 ([{"at": 0, "body_sha256": "aa"}, "aa", 86400], "process"),
                 ([{"at": 100, "body_sha256": "aa"}, "bb", 200], "conflict"),
                 ([{"at": 100, "body_sha256": "aa"}, "bb", 90000], "process"),
                 ([{"at": 1000, "body_sha256": "aa"}, "aa", 7000], "replay")),
        reference="""
TTL_SECONDS = 86_400


def replay_decision(stored: dict[str, Any] | None, body_sha256: str, now: int) -> str:
    if stored is None or now - stored["at"] >= TTL_SECONDS:
        return "process"
    if stored["body_sha256"] != body_sha256:
        return "conflict"
    return "replay"
""",
        opening=("idempotency.py needs replay_decision() for the payments API: what to do "
                 "when a request comes in with an idempotency key we have seen."),
        earlier=("Idempotency keys: keep them for an hour; if the same key comes back with "
                 "a different body, just process it as a new request."),
        earlier_when="just process it as a new request",
        superseded="""
def replay_decision(stored: dict[str, Any] | None, body_sha256: str, now: int) -> str:
    if stored is None or now - stored["at"] >= 3600:
        return "process"
    return "replay" if stored["body_sha256"] == body_sha256 else "process"
""",
        carrier="document", source="https://wiki.payments.example/adr/0042",
        decision=("Decision: a stored key is honoured for 24 hours (86400 s) after its first "
                  "use; at exactly 86400 s it has expired and the request is processed anew. "
                  "Same key with a different body inside the window is answered 409, the "
                  "decision \"conflict\"; same key and same body is a \"replay\" of the "
                  "stored response."),
        when="Same key with a different body inside the window is answered 409",
        recall="ADR-0042 idempotency key decision"),
    Task(
        slug="pagination-cursor", title="Pagination cursor", module="pagination",
        function="page", signature="(ids: list[int], cursor: int | None, limit: int) -> "
                                   "dict[str, Any]",
        about=("One page of a listing ordered by id: `ids` every id (unsorted), `cursor` "
               "the previous page's cursor or null, `limit` the page size (at least 1, else "
               "ValueError); the answer is {\"items\": [...], \"next\": cursor or null}."),
        vectors=(([[5, 1, 3, 2, 4], None, 2], {"items": [1, 2], "next": 2}),
                 ([[5, 1, 3, 2, 4], 2, 2], {"items": [3, 4], "next": 4}),
                 ([[5, 1, 3, 2, 4], 4, 2], {"items": [5], "next": None}),
                 ([[1, 2, 3, 4], 2, 2], {"items": [3, 4], "next": 4}),
                 ([[1, 2, 3, 4], 4, 2], {"items": [], "next": None}),
                 ([[10, 20, 30], 15, 5], {"items": [20, 30], "next": None}),
                 ([[1], None, 0], raises("ValueError"))),
        reference="""
def page(ids: list[int], cursor: int | None, limit: int) -> dict[str, Any]:
    if limit < 1:
        raise ValueError("limit must be >= 1")
    after = sorted(i for i in ids if cursor is None or i > cursor)
    items = after[:limit]
    following = items[-1] if len(items) == limit else None
    return {"items": items, "next": following}
""",
        opening=("pagination.py needs page() for the listing endpoints. The contract is in "
                 "the repo, ids only to keep it small."),
        earlier=("Pagination: offset-based is fine, next is just the offset of the following "
                 "page."),
        earlier_when="next is just the offset of the following page",
        superseded="""
def page(ids: list[int], cursor: int | None, limit: int) -> dict[str, Any]:
    if limit < 1:
        raise ValueError("limit must be >= 1")
    offset = cursor or 0
    ordered = sorted(ids)
    following = offset + limit
    return {"items": ordered[offset:following],
            "next": following if following < len(ordered) else None}
""",
        carrier="owner",
        decision=("Settled: keyset pagination. The cursor is the last id of the page, items "
                  "are the ids greater than the cursor in ascending order, and next is null "
                  "only when the page holds fewer than limit items, so a full last page "
                  "still returns a cursor."),
        when="a full last page still returns a cursor",
        recall="keyset pagination cursor",
        fallback="""
def page(ids: list[int], cursor: int | None, limit: int) -> dict[str, Any]:
    if limit < 1:
        raise ValueError("limit must be >= 1")
    after = sorted(i for i in ids if cursor is None or i > cursor)
    items = after[:limit]
    return {"items": items, "next": items[-1] if len(after) > limit else None}
"""),
    Task(
        slug="config-precedence", title="Settings precedence", module="settings",
        function="resolve",
        signature=("(defaults: dict[str, Any], file: dict[str, Any], env: dict[str, Any], "
                   "cli: dict[str, Any]) -> dict[str, Any]"),
        about=("The effective settings from four layers: the built-in defaults, the config "
               "file, the environment and the command line."),
        vectors=(([{"port": 80, "debug": False}, {"port": 8080}, {"port": 9090}, {}],
                  {"port": 9090, "debug": False}),
                 ([{"port": 80, "debug": False}, {"port": 8080}, {}, {"port": 7070}],
                  {"port": 7070, "debug": False}),
                 ([{"port": 80}, {"port": 8080}, {"port": 9090}, {"port": None}],
                  {"port": 80}),
                 ([{"port": 80}, {"colour": "red"}, {"shell": "/bin/sh"}, {"x": 1}],
                  {"port": 80}),
                 ([{"port": 80, "debug": False}, {"debug": True}, {}, {}],
                  {"port": 80, "debug": True}),
                 ([{"level": "info"}, {}, {"level": "warn"}, {"level": None}],
                  {"level": "info"})),
        reference="""
def resolve(defaults: dict[str, Any], file: dict[str, Any], env: dict[str, Any],
            cli: dict[str, Any]) -> dict[str, Any]:
    settings = dict(defaults)
    for layer in (file, env):
        for key, value in layer.items():
            if key in defaults:
                settings[key] = value
    for key, value in cli.items():
        if key in defaults:
            settings[key] = defaults[key] if value is None else value
    return settings
""",
        opening=("settings.py needs resolve(): four layers of settings (defaults, config "
                 "file, environment, command line) into the effective ones."),
        earlier=("Config layering: the config file should win over environment variables, "
                 "people edit the file on purpose."),
        earlier_when="the config file should win over environment variables",
        superseded="""
def resolve(defaults: dict[str, Any], file: dict[str, Any], env: dict[str, Any],
            cli: dict[str, Any]) -> dict[str, Any]:
    return {**defaults, **env, **file, **cli}
""",
        carrier="document", source="https://wiki.platform.example/adr/0017",
        decision=("Decision: the order, lowest to highest, is defaults, file, environment, "
                  "command line. A key that is not in the defaults is ignored in every layer "
                  "(unknown keys never reach the service). A command-line value of null "
                  "resets the key to its default."),
        when="A command-line value of null resets the key to its default",
        recall="ADR-0017 settings precedence",
        fallback="""
def resolve(defaults: dict[str, Any], file: dict[str, Any], env: dict[str, Any],
            cli: dict[str, Any]) -> dict[str, Any]:
    return {**defaults, **file, **env, **cli}
"""),
    Task(
        slug="retention-cutoff", title="Retention cutoff", module="retention",
        function="should_delete", signature="(created: str, today: str) -> bool",
        about=("Whether the nightly purge, run on `today`, deletes a record created on "
               "`created` (both ISO dates); a record created after today is a ValueError."),
        vectors=((["2024-01-01", "2025-02-04"], False), (["2024-01-01", "2025-02-05"], True),
                 (["2024-06-01", "2025-06-01"], False), (["2023-01-01", "2025-01-01"], True),
                 (["2025-03-10", "2025-03-10"], False),
                 (["2025-03-11", "2025-03-10"], raises("ValueError"))),
        imports=("from datetime import date",),
        reference="""
RETENTION_DAYS = 400


def should_delete(created: str, today: str) -> bool:
    age = (date.fromisoformat(today) - date.fromisoformat(created)).days
    if age < 0:
        raise ValueError("created is after today")
    return age > RETENTION_DAYS
""",
        opening=("retention.py needs should_delete() for the nightly purge of the audit "
                 "records."),
        earlier="Retention: one year, so anything older than 365 days goes.",
        earlier_when="anything older than 365 days goes",
        superseded="""
def should_delete(created: str, today: str) -> bool:
    age = (date.fromisoformat(today) - date.fromisoformat(created)).days
    if age < 0:
        raise ValueError("created is after today")
    return age > 365
""",
        carrier="owner",
        decision=("Legal came back: we keep records for 400 days, counted in calendar days, "
                  "and a record that is exactly 400 days old is still kept."),
        when="exactly 400 days old is still kept",
        recall="retention legal days"),
    Task(
        slug="routing-table", title="Request routing", module="routing", function="route",
        signature="(path: str) -> str",
        about="The backend that serves a request path, from the table ROUTES in routing.py.",
        vectors=((["/api/orders/v2/17"], "orders-v2"), (["/api/orders/17"], "orders-v1"),
                 (["/api/orders2"], "gateway"), (["/api"], "gateway"),
                 (["/apix"], "not-found"), (["/static/app.js"], "cdn"),
                 (["/"], "not-found"), (["/api/orders/v2"], "orders-v2")),
        preamble=('ROUTES = {\n    "/api": "gateway",\n    "/api/orders": "orders-v1",\n'
                  '    "/api/orders/v2": "orders-v2",\n    "/static": "cdn",\n}'),
        reference="""
def route(path: str) -> str:
    best = None
    for prefix in ROUTES:
        if path == prefix or path.startswith(prefix + "/"):
            if best is None or len(prefix) > len(best):
                best = prefix
    return "not-found" if best is None else ROUTES[best]
""",
        opening=("routing.py needs route(): the edge proxy's table is in the module already, "
                 "the lookup is missing."),
        earlier="Routing: first match in table order with str.startswith is good enough.",
        earlier_when="first match in table order with str.startswith",
        superseded="""
def route(path: str) -> str:
    for prefix, backend in ROUTES.items():
        if path.startswith(prefix):
            return backend
    return "not-found"
""",
        carrier="recent",
        decision=("Before you finish routing.py, the rule, final: the longest matching "
                  "prefix wins, prefixes match whole path segments only (so /api/orders2 is "
                  "not under /api/orders), and a path nothing matches goes to \"not-found\"."),
        when="prefixes match whole path segments only",
        recall="routing longest prefix segments"),
    Task(
        slug="business-hours", title="Support desk hours", module="hours", function="is_open",
        signature="(timestamp: str) -> bool",
        about=("Whether the support desk is open at `timestamp`, an ISO 8601 UTC time such "
               "as 2025-03-14T09:30:00Z."),
        vectors=((["2025-03-14T06:00:00Z"], True), (["2025-03-14T05:59:00Z"], False),
                 (["2025-03-14T16:00:00Z"], False), (["2025-03-14T15:59:59Z"], True),
                 (["2025-03-15T10:00:00Z"], True), (["2025-03-16T10:00:00Z"], False),
                 (["2025-03-16T22:30:00Z"], False), (["2025-03-17T06:30:00Z"], True)),
        imports=("from datetime import datetime, timedelta, timezone",),
        reference="""
DESK = timezone(timedelta(hours=2))


def is_open(timestamp: str) -> bool:
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone(DESK)
    return moment.weekday() < 6 and 8 <= moment.hour < 18
""",
        opening="hours.py needs is_open() so the chat widget can say whether anyone is there.",
        earlier="Support hours: 9 to 17 UTC, Monday to Friday.",
        earlier_when="9 to 17 UTC, Monday to Friday",
        superseded="""
def is_open(timestamp: str) -> bool:
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00")).astimezone(timezone.utc)
    return moment.weekday() < 5 and 9 <= moment.hour < 17
""",
        carrier="owner",
        decision=("Correction from the support lead: the desk is in Athens on a fixed UTC+2 "
                  "(ignore summer time), open 08:00 to 18:00 local, Monday to Saturday; "
                  "18:00 itself is closed."),
        when="08:00 to 18:00 local, Monday to Saturday",
        recall="support desk hours Athens"),
    Task(
        slug="username-rules", title="Username rules", module="usernames",
        function="valid_username", signature="(name: str) -> bool",
        about="Whether `name` is accepted as a new account's username.",
        vectors=((["alice"], True), (["al"], False), (["abcd"], True), (["a_b_c"], True),
                 (["a__b"], False), (["abc_"], False), (["1abc"], False), (["Alice"], False),
                 (["bob.smith"], False), (["abcdefghijklmnopqrst"], True),
                 (["abcdefghijklmnopqrstu"], False), (["ab_1"], True)),
        imports=("import re",),
        reference="""
_USERNAME = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")


def valid_username(name: str) -> bool:
    return 4 <= len(name) <= 20 and _USERNAME.fullmatch(name) is not None
""",
        opening="usernames.py needs valid_username() for the sign-up form and the API.",
        earlier="Usernames: letters, digits, dots and underscores, 3 to 30 characters.",
        earlier_when="letters, digits, dots and underscores, 3 to 30 characters",
        superseded="""
def valid_username(name: str) -> bool:
    return re.fullmatch(r"[A-Za-z0-9._]{3,30}", name) is not None
""",
        carrier="owner",
        decision=("Final username rule: 4 to 20 characters, lowercase ascii letters, digits "
                  "and single underscores only, starting with a letter, and never ending "
                  "with an underscore."),
        when="digits and single underscores only, starting with a letter",
        recall="username rule",
        fallback="""
def valid_username(name: str) -> bool:
    return re.fullmatch(r"\\w{3,20}", name) is not None
"""),
    Task(
        slug="order-sorting", title="Picking queue order", module="ordering",
        function="sort_orders", signature="(orders: list[dict[str, Any]]) -> list[str]",
        about=("The ids of `orders` (each {\"id\", \"priority\", \"created\"}) in the order "
               "the picking queue serves them."),
        vectors=(([[{"id": "b", "priority": 1, "created": 5},
                    {"id": "a", "priority": 2, "created": 9}]], ["a", "b"]),
                 ([[{"id": "c", "priority": 1, "created": 3},
                    {"id": "a", "priority": 1, "created": 3},
                    {"id": "b", "priority": 1, "created": 1}]], ["b", "a", "c"]),
                 ([[]], []),
                 ([[{"id": "x", "priority": 0, "created": 1},
                    {"id": "y", "priority": 3, "created": 7},
                    {"id": "z", "priority": 3, "created": 2}]], ["z", "y", "x"])),
        reference="""
def sort_orders(orders: list[dict[str, Any]]) -> list[str]:
    ranked = sorted(orders, key=lambda o: (-o["priority"], o["created"], o["id"]))
    return [o["id"] for o in ranked]
""",
        opening="ordering.py needs sort_orders() for the warehouse picking queue.",
        earlier="Queue order: oldest first, that's all.",
        earlier_when="oldest first, that's all",
        superseded="""
def sort_orders(orders: list[dict[str, Any]]) -> list[str]:
    return [o["id"] for o in sorted(orders, key=lambda o: o["created"])]
""",
        carrier="owner",
        decision=("Queue order, final: higher priority first; within a priority the oldest "
                  "created first; ties after that by id ascending, so the order never "
                  "depends on the input order."),
        when="ties after that by id ascending",
        recall="picking queue order priority",
        fallback="""
def sort_orders(orders: list[dict[str, Any]]) -> list[str]:
    return [o["id"] for o in sorted(orders, key=lambda o: -o["priority"])]
"""),
    Task(
        slug="error-status-map", title="Error statuses", module="statuses",
        function="status_for", signature="(error: str) -> int",
        about="The HTTP status the API answers for an internal error kind.",
        vectors=((["not_found"], 404), (["conflict"], 409), (["validation"], 422),
                 (["rate_limited"], 429), (["unavailable"], 503), (["teapot"], 500),
                 ([""], 500), (["NOT_FOUND"], 500)),
        reference="""
STATUS = {"not_found": 404, "conflict": 409, "validation": 422, "rate_limited": 429,
          "unavailable": 503}


def status_for(error: str) -> int:
    return STATUS.get(error, 500)
""",
        opening="statuses.py needs status_for(): one place that maps our error kinds to HTTP.",
        earlier="Errors: validation problems are a plain 400 Bad Request.",
        earlier_when="validation problems are a plain 400",
        superseded="""
STATUS = {"not_found": 404, "conflict": 409, "validation": 400, "rate_limited": 429,
          "unavailable": 503}


def status_for(error: str) -> int:
    return STATUS.get(error, 500)
""",
        carrier="owner",
        decision=("Status mapping, final: not_found is 404, conflict 409, validation 422, "
                  "rate_limited 429, unavailable 503, and any kind we do not recognise is "
                  "500."),
        when="validation 422, rate_limited 429",
        recall="status mapping error kinds"),
    Task(
        slug="version-compare", title="Version ordering", module="versions",
        function="compare", signature="(a: str, b: str) -> int",
        about=("-1, 0 or 1 as release version `a` sorts before, equal to or after `b` "
               "(MAJOR.MINOR.PATCH, an optional -pre-release and +build; anything else is "
               "a ValueError)."),
        vectors=((["1.2.3", "1.2.3"], 0), (["1.2.3", "1.10.0"], -1), (["2.0.0", "1.99.99"], 1),
                 (["1.0.0-alpha", "1.0.0"], -1), (["1.0.0", "1.0.0-rc.1"], 1),
                 (["1.0.0-alpha.2", "1.0.0-alpha.10"], -1),
                 (["1.0.0-alpha", "1.0.0-alpha.1"], -1), (["1.0.0-1", "1.0.0-alpha"], -1),
                 (["1.0.0-beta", "1.0.0-alpha.5"], 1), (["1.0.0+build.7", "1.0.0"], 0),
                 (["1.0", "1.0.0"], raises("ValueError"))),
        reference="""
def _parse(version: str) -> tuple[tuple[int, ...], list[str]]:
    core, dash, pre = version.split("+", 1)[0].partition("-")
    numbers = tuple(int(part) for part in core.split("."))
    if len(numbers) != 3:
        raise ValueError(f"{version!r} is not MAJOR.MINOR.PATCH")
    return numbers, pre.split(".") if dash else []


def _pre_key(identifiers: list[str]) -> list[tuple[int, int, str]]:
    return [(0, int(i), "") if i.isdigit() else (1, 0, i) for i in identifiers]


def compare(a: str, b: str) -> int:
    (core_a, pre_a), (core_b, pre_b) = _parse(a), _parse(b)
    if core_a != core_b:
        return -1 if core_a < core_b else 1
    if not pre_a or not pre_b:
        return (not pre_a) - (not pre_b)
    key_a, key_b = _pre_key(pre_a), _pre_key(pre_b)
    return (key_a > key_b) - (key_a < key_b)
""",
        opening=("versions.py needs compare() for the update checker; clients send their "
                 "version and we decide whether to offer an update."),
        earlier=("Version ordering: split on dots and compare the numbers, ignore anything "
                 "after a dash."),
        earlier_when="ignore anything after a dash",
        superseded="""
def compare(a: str, b: str) -> int:
    def numbers(version: str) -> tuple[int, ...]:
        parts = tuple(int(p) for p in version.split("+")[0].split("-")[0].split("."))
        if len(parts) != 3:
            raise ValueError(f"{version!r} is not MAJOR.MINOR.PATCH")
        return parts

    x, y = numbers(a), numbers(b)
    return (x > y) - (x < y)
""",
        carrier="proposal",
        decision=(
            "Proposal for the ordering, since the update checker will talk to clients we "
            "cannot patch later and a wrong answer offers someone a downgrade. I looked at "
            "what the mobile and desktop clients actually send: both use three numeric "
            "parts, release candidates carry a suffix like -rc.1 or -beta, and the nightly "
            "builds append +build metadata with the CI run. Comparing only the numbers would "
            "treat 2.0.0-rc.1 and 2.0.0 as equal, so people on the candidate would never be "
            "offered the release. The rules: (a) parse MAJOR.MINOR.PATCH as integers, "
            "anything else is a ValueError; (b) compare those numerically first; (c) a "
            "version with a pre-release sorts before the same version without one; (d) "
            "pre-release identifiers compare left to right, numeric ones as numbers and "
            "below any alphanumeric one, alphanumeric ones as text, and a shorter list "
            "sorts first when all shared identifiers are equal; (e) build metadata after + "
            "is ignored entirely."),
        when="numeric ones as numbers and below any alphanumeric one",
        recall="version ordering proposal pre-release"),
    Task(
        slug="cache-key", title="Response cache key", module="cachekey", function="cache_key",
        signature="(path: str, query: list[list[str]]) -> str",
        about=("The key the response cache stores a GET under: `path` and its `query` "
               "parameters, a list of [name, value] pairs in request order."),
        vectors=((["/items", []], "/items"),
                 (["/items", [["b", "2"], ["a", "1"]]], "/items?a=1&b=2"),
                 (["/items", [["Page", "3"]]], "/items?page=3"),
                 (["/items", [["utm_source", "mail"], ["q", "shoes"]]], "/items?q=shoes"),
                 (["/items", [["UTM_Campaign", "x"]]], "/items"),
                 (["/items", [["tag", "red"], ["tag", "blue"]]], "/items?tag=blue&tag=red"),
                 (["/items", [["q", ""]]], "/items?q=")),
        reference="""
def cache_key(path: str, query: list[list[str]]) -> str:
    pairs = sorted((name.lower(), value) for name, value in query
                   if not name.lower().startswith("utm_"))
    if not pairs:
        return path
    return path + "?" + "&".join(f"{name}={value}" for name, value in pairs)
""",
        opening=("cachekey.py needs cache_key() for the CDN-side response cache; the hit "
                 "rate is poor and we think the keys are why."),
        earlier="Cache keys: path plus the raw query string as the client sent it.",
        earlier_when="the raw query string as the client sent it",
        superseded="""
def cache_key(path: str, query: list[list[str]]) -> str:
    if not query:
        return path
    return path + "?" + "&".join(f"{name}={value}" for name, value in query)
""",
        carrier="document", source="https://tracker.example/browse/PERF-311",
        decision=("Agreed normalisation: parameter names lowercased; utm_* parameters "
                  "dropped; pairs sorted by name then value; empty values kept; the key is "
                  "the path, then '?' and the name=value pairs joined with '&', or just the "
                  "path when no pair is left."),
        when="utm_* parameters dropped; pairs sorted by name then value",
        recall="PERF-311 cache key normalisation",
        fallback="""
def cache_key(path: str, query: list[list[str]]) -> str:
    pairs = sorted((name, value) for name, value in query)
    if not pairs:
        return path
    return path + "?" + "&".join(f"{name}={value}" for name, value in pairs)
"""),
    Task(
        slug="csv-export", title="Finance export line", module="export", function="csv_line",
        signature="(fields: list[str]) -> str",
        about="One line of the finance export for `fields`, without the line ending.",
        vectors=(([["a", "b"]], "a;b"), ([["x;y", "z"]], '"x;y";z'),
                 ([['say "hi"']], '"say ""hi"""'), ([["=SUM(A1)", "3"]], "'=SUM(A1);3"),
                 ([["-5"]], "'-5"), ([["a,b"]], "a,b"), ([["line1\nline2"]], '"line1\nline2"'),
                 ([[]], ""), ([["@x;y"]], "\"'@x;y\"")),
        reference="""
def _field(value: str) -> str:
    if value[:1] in ("=", "+", "-", "@"):
        value = "'" + value
    if any(c in value for c in ';"\\n'):
        value = '"' + value.replace('"', '""') + '"'
    return value


def csv_line(fields: list[str]) -> str:
    return ";".join(_field(f) for f in fields)
""",
        opening="export.py needs csv_line() for the monthly finance export.",
        earlier="CSV export: plain commas, Python's csv module defaults.",
        earlier_when="plain commas, Python's csv module defaults",
        superseded="""
def csv_line(fields: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow(fields)
    return out.getvalue()
""",
        carrier="owner",
        decision=("Export format, final (the finance tool is German Excel): fields separated "
                  "by semicolons; a field containing a semicolon, a double quote or a newline "
                  "is wrapped in double quotes with inner quotes doubled; and a field "
                  "starting with =, +, - or @ gets a leading apostrophe first, against "
                  "formula injection."),
        when="gets a leading apostrophe first, against formula injection",
        recall="finance export format"),
    Task(
        slug="deadline-budget", title="Downstream deadline", module="deadline",
        function="child_timeout", signature="(remaining_ms: int) -> int",
        about=("The timeout in milliseconds a downstream call gets when the request has "
               "`remaining_ms` of its deadline left; 0 means do not call."),
        vectors=(([1000], 750), ([5000], 2000), ([187], 0), ([188], 100), ([0], 0),
                 ([2563], 2000), ([333], 216), ([-20], 0)),
        reference="""
def child_timeout(remaining_ms: int) -> int:
    budget = remaining_ms * 4 // 5 - 50
    if budget < 100:
        return 0
    return min(budget, 2000)
""",
        opening=("deadline.py needs child_timeout(): how much of the request's deadline a "
                 "downstream call may use."),
        earlier="Downstream timeouts: pass on whatever is left of the deadline.",
        earlier_when="pass on whatever is left of the deadline",
        superseded="""
def child_timeout(remaining_ms: int) -> int:
    return max(remaining_ms, 0)
""",
        carrier="recent",
        decision=("Deadline rule, final: a downstream call gets 80% of what is left minus "
                  "50 ms for our own overhead, rounded down, at most 2000 ms; if that comes "
                  "to less than 100 ms, do not call at all (0)."),
        when="80% of what is left minus 50 ms",
        recall="deadline rule downstream"),
    Task(
        slug="log-redaction", title="Log redaction", module="redact", function="redact",
        signature="(line: str) -> str",
        about="A log line with its personal data masked before it leaves the service.",
        vectors=((["user alice@example.com logged in"], "user ***@example.com logged in"),
                 (["card 4111111111111111 charged"], "card ************1111 charged"),
                 (["order 123456789012 shipped"], "order 123456789012 shipped"),
                 (["a.b+tag@mail.example.org and c@d.io"], "***@mail.example.org and ***@d.io"),
                 (["no personal data here"], "no personal data here"),
                 (["ids 12345678901234567890"], "ids 12345678901234567890"),
                 (["pan 5500000000000004"], "pan ************0004")),
        imports=("import re",),
        reference="""
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@([A-Za-z0-9.-]+\\.[A-Za-z]{2,})")
_CARD = re.compile(r"(?<![0-9])[0-9]{13,19}(?![0-9])")


def redact(line: str) -> str:
    line = _EMAIL.sub(lambda m: "***@" + m.group(1), line)
    return _CARD.sub(lambda m: "*" * (len(m.group(0)) - 4) + m.group(0)[-4:], line)
""",
        opening=("redact.py needs redact(): the log shipper must mask personal data before "
                 "lines leave the service."),
        earlier="Redaction: replace every email address with [redacted].",
        earlier_when="replace every email address with [redacted]",
        superseded="""
def redact(line: str) -> str:
    return re.sub(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}", "[redacted]", line)
""",
        carrier="document", source="https://security.example/reviews/SEC-88",
        decision=("Masking rule (approved): an email address keeps its domain and has its "
                  "local part replaced by three asterisks (***@example.com); a run of 13 to "
                  "19 digits (a card number; no spaces or dashes inside) keeps only its last "
                  "4 digits, each other digit replaced by *."),
        when="keeps its domain and has its local part replaced by three asterisks",
        recall="SEC-88 masking rule"),
    Task(
        slug="circuit-breaker", title="Circuit breaker", module="breaker", function="state_at",
        signature="(outcomes: list[list[Any]], now: float) -> str",
        about=("The breaker's state at `now` (seconds), given the calls' outcomes so far as "
               "[time, \"ok\" | \"fail\"] pairs in time order: \"closed\", \"open\" or "
               "\"half-open\"."),
        vectors=(([[], 0], "closed"),
                 ([[[1, "fail"], [2, "fail"]], 3], "closed"),
                 ([[[1, "fail"], [2, "fail"], [3, "fail"]], 4], "open"),
                 ([[[1, "fail"], [2, "ok"], [3, "fail"], [4, "fail"]], 5], "closed"),
                 ([[[1, "fail"], [2, "fail"], [3, "fail"]], 33], "half-open"),
                 ([[[1, "fail"], [2, "fail"], [3, "fail"]], 32.5], "open"),
                 ([[[1, "fail"], [2, "fail"], [3, "fail"], [40, "ok"]], 41], "closed"),
                 ([[[1, "fail"], [2, "fail"], [3, "fail"], [40, "fail"]], 41], "open"),
                 ([[[1, "fail"], [2, "fail"], [3, "fail"], [40, "fail"]], 70], "half-open")),
        reference="""
THRESHOLD = 3
COOL_DOWN_SECONDS = 30


def state_at(outcomes: list[list[Any]], now: float) -> str:
    state, streak, opened = "closed", 0, 0.0
    for at, outcome in outcomes:
        if state == "open" and at - opened >= COOL_DOWN_SECONDS:
            state = "half-open"
        if state == "open":
            continue  # calls are rejected while open: they have no outcome
        if outcome == "ok":
            state, streak = "closed", 0
        elif state == "half-open":
            state, opened = "open", at
        else:
            streak += 1
            if streak >= THRESHOLD:
                state, streak, opened = "open", 0, at
    if state == "open" and now - opened >= COOL_DOWN_SECONDS:
        return "half-open"
    return state
""",
        opening=("breaker.py needs state_at() for the inventory client's circuit breaker; "
                 "the outcomes are replayed from the call log."),
        earlier="Breaker: open after 10 failures in total, close again after a minute.",
        earlier_when="open after 10 failures in total",
        superseded="""
def state_at(outcomes: list[list[Any]], now: float) -> str:
    failures = [at for at, outcome in outcomes if outcome == "fail"]
    if len(failures) >= 10 and now - failures[9] < 60:
        return "open"
    return "closed"
""",
        carrier="owner",
        decision=("Breaker rule, final: it opens on the 3rd consecutive failure (a success "
                  "resets the count), stays open for 30 seconds from that failure, and is "
                  "half-open from then until the next outcome, which closes it on success "
                  "and opens it again on failure."),
        when="opens on the 3rd consecutive failure",
        recall="breaker rule consecutive failures",
        fallback="""
def state_at(outcomes: list[list[Any]], now: float) -> str:
    streak, opened = 0, None
    for at, outcome in outcomes:
        streak = streak + 1 if outcome == "fail" else 0
        if streak >= 5:
            opened = at
    if opened is None:
        return "closed"
    return "open" if now - opened < 60 else "half-open"
"""),
    Task(
        slug="batch-split", title="Import batches", module="batching", function="split",
        signature="(total: int, max_batch: int) -> list[int]",
        about=("The batch sizes the importer uses for `total` rows, each batch at most "
               "`max_batch`; a negative total or a max_batch below 1 is a ValueError."),
        vectors=(([10, 4], [4, 3, 3]), ([8, 4], [4, 4]), ([9, 4], [3, 3, 3]), ([1, 5], [1]),
                 ([0, 5], []), ([7, 3], [3, 2, 2]), ([5, 0], raises("ValueError"))),
        reference="""
def split(total: int, max_batch: int) -> list[int]:
    if total < 0 or max_batch < 1:
        raise ValueError("total must be >= 0 and max_batch >= 1")
    if total == 0:
        return []
    count = -(-total // max_batch)
    size, extra = divmod(total, count)
    return [size + 1] * extra + [size] * (count - extra)
""",
        opening="batching.py needs split() for the CSV importer's database batches.",
        earlier="Batches: fill each batch to max_batch, the remainder goes last.",
        earlier_when="fill each batch to max_batch, the remainder goes last",
        superseded="""
def split(total: int, max_batch: int) -> list[int]:
    if total < 0 or max_batch < 1:
        raise ValueError("total must be >= 0 and max_batch >= 1")
    full, rest = divmod(total, max_batch)
    return [max_batch] * full + ([rest] if rest else [])
""",
        carrier="owner",
        decision=("Batching, final: use the fewest batches possible, make their sizes "
                  "differ by at most one, and put the larger batches first."),
        when="make their sizes differ by at most one",
        recall="batching sizes"),
)

# What a superseded variant imports instead of the task's own imports.
SUPERSEDED_IMPORTS: dict[str, tuple[str, ...]] = {
    "path-normaliser": ("import posixpath",),
    "csv-export": ("import csv", "import io"),
}


def case_id(index: int, task: Task) -> str:
    return f"X{FIRST_NUMBER + index:02d}-contract-{task.slug}"


# -- the workspace ----------------------------------------------------------------------


def contract_json(task: Task) -> str:
    vectors = [{"id": f"v{n:02d}", "args": args,
                "expect_sha256": hashlib.sha256(canonical(expected).encode()).hexdigest()}
               for n, (args, expected) in enumerate(task.vectors, start=1)]
    contract = {
        "schema": CONTRACT_SCHEMA, "module": task.module, "function": task.function,
        "about": task.about,
        "expected": ("each vector's expect_sha256 is the sha256 of the canonical JSON (sorted "
                     "keys, no spaces, ASCII) of the call's result; a call that raises has "
                     "the result {\"raises\": \"<exception type>\"}"),
        "vectors": vectors,
    }
    return json.dumps(contract, indent=1, ensure_ascii=True) + "\n"


def readme(task: Task) -> str:
    return (f"# {task.title}\n\n`{task.module}.py` holds `{task.function}`, still a stub. "
            f"`python verify.py` checks it\nagainst `contract.json`, the protected contract "
            "(do not edit either file).\n\n"
            f"{task.about}\n")


def stub_output(task: Task) -> str:
    """What ``python verify.py`` prints on the stub (verify.py's own format; the tests
    check it against a real run)."""
    lines = []
    for n, (args, _) in enumerate(task.vectors, start=1):
        call = f"{task.function}({canonical(args)[1:-1]})"
        got = canonical(raises("NotImplementedError"))
        lines.append(f"v{n:02d} MISMATCH  {call[:100]} -> {got[:100]}")
    lines.append(f"0 of {len(task.vectors)} vectors match")
    return "\n".join(lines) + "\n"


def workspace(task: Task) -> dict[str, str]:
    return {"README.md": readme(task), "contract.json": contract_json(task),
            "verify.py": VERIFY_PY, f"{task.module}.py": task.stub}


# -- the session ------------------------------------------------------------------------


class ContractSession(Session):
    """An efold trace of one contract task (``Session``, under the family ``contract``)."""

    def trace(self) -> Trace:
        header = TraceHeader(trace_id=self.case_id.lower(), suite="boundary",
                             family="contract", fictional=True, title=self.title,
                             sessions=self.session)
        return Trace(header=header, events=self.events)


CHATTER = (
    ("Is CI green on main?",
     "Yes. The last main build passed all four jobs; only the docs job was slow, about six "
     "minutes, because the link checker retried two external sites that were timing out. "
     "Nothing to do with this module: it is not imported anywhere yet, so no other test "
     "can break because of it."),
    ("Who reviews this change?",
     "Priya is on the review rotation this week. I will open the pull request as a draft "
     "with the verifier output in the description, so she can see the contract pass "
     "before she reads the code, and mark it ready once the module is in."),
    ("Should the function log anything?",
     "I would keep it pure: no logging, no clock, no globals beyond its constants. The "
     "caller already logs one structured line per request with the request id, and it "
     "can add the result there; logging inside a helper like this only doubles the "
     "volume and makes the output harder to correlate."),
    ("Does this need a feature flag?",
     "Not for the helper itself. The call site is already behind the rollout flag the "
     "service uses for this release, so turning the flag off takes the whole path out. "
     "A second flag inside the function would only add a state nobody tests."),
    ("Do we need a changelog entry?",
     "One line under Unreleased once it is implemented, naming the module and the "
     "function. The release notes are generated from that file, so the wording should "
     "say what changes for callers, not how it is written."),
    ("What Python version does the service run?",
     "3.11 in production, the same as the CI image, so the standard library is all we "
     "need here: no new dependency, nothing to add to the lock file, and the verifier "
     "runs the module on the same interpreter CI uses."),
    ("Is the staging deploy still frozen?",
     "Until Thursday. The platform team is moving the staging cluster to the new node "
     "pool, so this lands on main and ships with the next train; there is no rush to "
     "deploy it by hand, and nothing depends on it before then."),
    ("Did the flaky integration test come back?",
     "Not since last week's fix. It was a shared temporary directory between two test "
     "workers; each worker gets its own now, and the test has been green twenty runs in "
     "a row on CI and locally."),
    ("Keep it in one module?",
     "Yes, one small module with one public function and its constants. Nothing else "
     "imports it yet, and if another service needs it later we can move it into the "
     "shared package then, with the contract and the verifier going along."),
    ("How long is the review queue right now?",
     "Three small pull requests, all under a hundred lines, so a day at most. This one "
     "will be small too: the module, and nothing else, since the contract and the "
     "verifier are already merged."),
    ("Does the on-call runbook need an update?",
     "Only a link to the module once it is merged. The runbook describes the behaviour "
     "callers see, and the contract file is the precise version of that, so the link is "
     "more useful than a paragraph that would drift."),
    ("Any performance concern here?",
     "No. It runs once per request on inputs of a few items, so clarity matters far more "
     "than speed; if profiling ever points at it, the contract lets us rewrite it with "
     "confidence that the behaviour stays the same."),
)
_ASKS = ("Open {path} again.", "Show me {path}.", "What's in {path} right now?",
         "Let me see {path} once more.")
_RUNS = ("Run the verifier.", "Run python verify.py once more.", "Verifier again, please.")


def stretch(s: Session, task: Task, seed: int, rounds: int) -> None:
    """Ordinary work: reading the workspace, running the verifier on the stub, small
    talk. Every round is one tool record and two text messages (every third round adds
    an exchange without a tool), so 38 rounds put anything before them outside the cold
    boundary's 64 text messages and 32 newest tool records."""
    files = workspace(task)
    reads = (f"{task.module}.py", "README.md")
    for i in range(rounds):
        if (seed + i) % 3 == 2:
            s.owner(_RUNS[(seed + i) % len(_RUNS)])
            s.tool("workspace_test", {"command": VERIFY}, stub_output(task))
            s.reply(f"Still red: 0 of {len(task.vectors)} vectors match. Every call raises "
                    f"NotImplementedError from the stub, as expected until {task.function} "
                    "is written; the verifier itself runs cleanly.")
        else:
            path = "verify.py" if i == rounds // 2 else reads[(seed + i) % len(reads)]
            s.owner(_ASKS[(seed * 3 + i) % len(_ASKS)].format(path=path))
            s.tool("workspace_read", {"path": path}, files[path])
            s.reply(f"{path} is unchanged since this morning; nobody has touched it.")
        if i % 3 == 1:
            question, answer = CHATTER[(seed + i) % len(CHATTER)]
            s.owner(question)
            s.reply(answer)


def document(task: Task) -> str:
    """A design document of several paragraphs with the decision in its middle: past the
    head and before the tail a compaction summary keeps of a tool result."""
    *_, kind, number = task.source.split("/")  # .../adr/0042 is ADR-0042
    name = f"{kind.upper()}-{number}" if number.isdigit() else number.upper()
    before = [
        f"{name}: {task.title} - design record",
        "Status: accepted. Owners: platform architecture group. Reviewed by the service "
        "owners and the on-call leads.",
        f"Context: {task.about} Several services implement this today, each a little "
        "differently, and the differences have caused incidents that were hard to trace "
        "because every implementation looked reasonable on its own.",
        "Options considered: keeping each service's behaviour and documenting it; a shared "
        "library owned by the platform team; a written rule every implementation follows "
        "and a contract with test vectors that checks it. The group chose the written rule "
        "and the contract: it costs least and it can be checked.",
    ]
    after = [
        "Consequences: every implementation is checked against the contract before release; "
        "a change to this rule needs a new record, not an edit of this one.",
        "Migration: services adopt the rule at their next release; no data migration.",
        "Links: the contract and its verifier live next to the implementation.",
    ]
    return "\n".join([*before, task.decision, *after])


def session_for(cid: str, task: Task, seed: int) -> tuple[Session, str]:
    """The task's session and the id of its critical event."""
    s = ContractSession(cid, task.title)
    s.owner(task.opening)
    s.reply("I will read the contract and the verifier first.")
    files = workspace(task)
    s.tool("workspace_read", {"path": "contract.json"}, files["contract.json"])
    s.reply(f"The contract has {len(task.vectors)} vectors, stored as hashes of the expected "
            "results, so the rule itself has to come from us.")
    s.tool("workspace_read", {"path": "verify.py"}, VERIFY_PY)
    s.reply("The verifier imports the module and checks every vector; it exits 0 only when "
            "all of them match.")
    s.owner(task.earlier)
    s.reply("Noted. I will wait for the go before writing it.")
    stretch(s, task, seed, 4)
    critical = ""
    if task.carrier == "owner":
        critical = s.owner(task.decision)
        s.reply("Understood; that replaces the earlier choice.")
    elif task.carrier == "document":
        s.owner(f"The decision is written up; fetch {task.source}.")
        critical = s.tool("web_fetch", {"url": task.source}, document(task))
        s.reply("Fetched the record.")
        s.owner("That record is what we implement; it replaces what I said before.")
        s.reply("Understood.")
    elif task.carrier == "proposal":
        s.owner("Before you write anything, propose the exact rules.")
        critical = s.reply(task.decision)
        s.owner("Agreed, go with your proposal exactly; it replaces what I said before.")
        s.reply("Good, I will implement it as proposed.")
    stretch(s, task, seed + 1, 38)
    if task.carrier == "recent":
        critical = s.owner(task.decision)
        s.reply("Understood; that replaces the earlier choice.")
        stretch(s, task, seed + 2, 2)
    s.owner("Let's stop here for today.")
    s.reply(f"Fine. {task.module}.py is still the stub, so the verifier stays red until we "
            "implement it.")
    return s, critical


# -- the case ---------------------------------------------------------------------------


def build(index: int, task: Task) -> CaseDef:
    cid = case_id(index, task)
    s, critical = session_for(cid, task, index + 1)
    target = f"{task.module}.py"
    reference = task.variant(task.reference)
    superseded = task.variant(task.superseded, SUPERSEDED_IMPORTS.get(task.slug))
    fallback = ([write(target, task.variant(task.fallback)), run_tests(VERIFY)]
                if task.fallback is not None else [run_tests(VERIFY)])
    capability = (["exact-recoverability"] if task.carrier in ("document", "proposal")
                  else ["current-state"])
    sidecar = base(
        cid, "exploratory", capability,
        ["contract-violated", "superseded-choice-used", "decision-lost"],
        [f"Finish {target}: implement {task.function} the way we settled it, then run "
         "python verify.py."],
        [{"type": "tests-pass", "command": VERIFY},
         {"type": "forbidden-path-unchanged", "path": "contract.json"},
         {"type": "forbidden-path-unchanged", "path": "verify.py"}],
        {"recall": task.recall,
         "plans": [{"when": task.when, "actions": [write(target, reference), run_tests(VERIFY)]},
                   {"when": task.earlier_when,
                    "actions": [write(target, superseded), run_tests(VERIFY)]},
                   {"actions": fallback}]},
        max_actions=4, commands=[VERIFY], critical=[critical])
    return CaseDef(sidecar, s, expected={target: reference}, workspace=workspace(task))


def write_corpus(out: Path) -> list[Path]:
    """Write every case under ``out`` and lock them (``boundary.lock``)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [write_case(build(index, task), out) for index, task in enumerate(TASKS)]
    write_lock(out, load_cases(out))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "boundary" / "contract")
    args = parser.parse_args()
    for path in write_corpus(args.out):
        print(path)


if __name__ == "__main__":
    main()
