"""Write the bundled boundary cases (``boundary/cases/``) from the definitions below.

    python scripts/build_boundary_cases.py [--out DIR]

Deterministic: the same source writes byte-identical cases. The cases are committed and
locked (``efold-controller boundary lock``): changing what this script writes for a case
changes its digest, which validation refuses until the case's ``version`` is raised
(docs/boundary.md §3). Every case works on one small workspace, ``shop`` (a Python
package with pytest tests), or a copy of it with a few files added or changed
(``workspace_with``: ``WORKSPACE`` itself never changes for a new case, since every
locked case holds its bytes), and a session that is long enough for the compaction arms
to fold (verbose test logs, as real coding sessions have) with its critical fact early.

Every case's first faux plan keys on the wording of its critical event(s) and that
wording appears in no other event before the boundary, so deleting the critical events
(counterfactual deletion) leaves the faux agent its fallback. Sessions stay under about
60 KB. B12 (a state-only checkpoint) carries its critical fact only as a machine handoff
record (a ``handoff_state`` tool result, ``efold.folds.state``) and judges the declared
state as well as the workspace.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from efold.corpus.codec import dump_trace
from efold.corpus.forms import TOOL_SOURCES
from efold.corpus.model import Event, FunctionCall, ToolCall, ToolSource, Trace, TraceHeader

ROOT = Path(__file__).resolve().parents[1]
PYTEST = ["python", "-m", "pytest", "-q"]

# -- the shared workspace -------------------------------------------------------------

WORKSPACE: dict[str, str] = {
    "pytest.ini": "[pytest]\npythonpath = src\naddopts = -p no:cacheprovider\n",
    "src/shop/__init__.py": '"""shop: a small cart library."""\n',
    "src/shop/api.py": (
        '"""The public API other teams import: its names and signatures are frozen."""\n\n'
        "from shop.pricing import line_total\n\n\n"
        "def cart_total(lines):\n"
        '    """Total of a cart in cents; ``lines`` are (unit_cents, quantity) pairs."""\n'
        "    return sum(line_total(unit, quantity) for unit, quantity in lines)\n"),
    "src/shop/pricing.py": (
        '"""Pricing rules: integer cents throughout."""\n\n'
        "from shop.config import BULK_DISCOUNT_PERCENT, BULK_THRESHOLD\n\n\n"
        "def line_total(unit_cents, quantity):\n"
        "    total = unit_cents * quantity\n"
        "    if quantity >= BULK_THRESHOLD:\n"
        "        total -= total * BULK_DISCOUNT_PERCENT // 100\n"
        "    return total\n"),
    "src/shop/config.py": "BULK_THRESHOLD = 10\nBULK_DISCOUNT_PERCENT = 5\n",
    "src/shop/coupons.py": "ACTIVE = [\n    \"WELCOME-10\",\n]\n",
    "CHANGELOG.md": "# Changelog\n\n- 0.3.0: bulk discount for large quantities.\n",
    "tests/test_pricing.py": (
        "from shop.config import BULK_DISCOUNT_PERCENT, BULK_THRESHOLD\n"
        "from shop.pricing import line_total\n\n\n"
        "def test_small_quantities_pay_full_price():\n"
        "    assert line_total(250, 2) == 500\n\n\n"
        "def test_bulk_quantities_get_the_discount():\n"
        "    total = 100 * BULK_THRESHOLD\n"
        "    assert line_total(100, BULK_THRESHOLD) == total - total * BULK_DISCOUNT_PERCENT // 100\n\n\n"
        "def test_totals_are_integer_cents():\n"
        "    assert isinstance(line_total(333, 3), int)\n"),
    "tests/test_api.py": (
        "from shop.api import cart_total\n\n\n"
        "def test_cart_total_adds_the_lines():\n"
        "    assert cart_total([(250, 2), (100, 1)]) == 600\n"),
    "tests/test_coupons.py": (
        "from shop.coupons import ACTIVE\n\n\n"
        "def test_codes_are_upper_case_and_unique():\n"
        "    assert all(code == code.upper() for code in ACTIVE)\n"
        "    assert len(set(ACTIVE)) == len(ACTIVE)\n"),
}


# -- sessions -------------------------------------------------------------------------


class Session:
    """An efold trace written turn by turn (ids e0001.., call ids call_0001..)."""

    def __init__(self, case_id: str, title: str) -> None:
        self.case_id = case_id
        self.title = title
        self.events: list[Event] = []
        self.session = 1
        self.calls = 0

    def _add(self, role: str, content: str, **extra: Any) -> str:
        event_id = f"e{len(self.events) + 1:04d}"
        self.events.append(Event(id=event_id, session=self.session, day=self.session,
                                 role=role, content=content, **extra))  # type: ignore[arg-type]
        return event_id

    def next_session(self) -> None:
        self.session += 1

    def owner(self, text: str) -> str:
        return self._add("user", text)

    def reply(self, text: str) -> str:
        return self._add("assistant", text)

    def tool(self, name: str, arguments: dict[str, Any], output: str, *,
             source: ToolSource | None = None) -> str:
        """A tool call and its result; ``source`` defaults to the form's for ``name``
        (a tool efold's forms do not know, such as a sub-agent, gives it or has none)."""
        self.calls += 1
        call_id = f"call_{self.calls:04d}"
        call = ToolCall(id=call_id, function=FunctionCall(
            name=name, arguments=json.dumps(arguments, sort_keys=True)))
        self._add("assistant", "", tool_calls=[call])
        return self._add("tool", output, tool_call_id=call_id, name=name,
                         source=source if source is not None else TOOL_SOURCES.get(name))

    def trace(self) -> Trace:
        header = TraceHeader(trace_id=self.case_id.lower(), suite="boundary", family="shop",
                             fictional=True, title=self.title, sessions=self.session)
        return Trace(header=header, events=self.events)


def test_log(seed: int, rows: int = 14, failing: str | None = None) -> str:
    """A verbose pytest log of a parametrized matrix: realistic bulk, no facts."""
    lines = ["============================= test session starts ==============================",
             f"collected {rows + 4} items", ""]
    for i in range(rows):
        quantity = (seed * 7 + i * 13) % 97 + 1
        unit = (seed * 31 + i * 17) % 9000 + 100
        lines.append(f"tests/test_matrix.py::test_line_total[unit={unit}-qty={quantity}] PASSED"
                     f" [{(i + 1) * 100 // (rows + 4):3d}%]")
    for name in ("test_small_quantities_pay_full_price", "test_bulk_quantities_get_the_discount",
                 "test_totals_are_integer_cents"):
        outcome = "FAILED" if name == failing else "PASSED"
        lines.append(f"tests/test_pricing.py::{name} {outcome}")
    lines.append("tests/test_api.py::test_cart_total_adds_the_lines PASSED")
    summary = f"1 failed, {rows + 3} passed" if failing else f"{rows + 4} passed"
    lines += ["", f"========================= {summary} in 4.{seed % 10}2s ========================="]
    return "\n".join(lines)


_FILES = ("src/shop/pricing.py", "src/shop/api.py", "src/shop/config.py",
          "src/shop/coupons.py", "tests/test_pricing.py", "tests/test_api.py", "CHANGELOG.md")
_ASKS = ("Let's look at {path} again.", "Show me {path}, I want to check something.",
         "Open {path} for a moment.", "What does {path} look like right now?")
_CHECKS = ("Run the suite once more.", "Quick test run, please.", "Re-run the tests.",
           "Let's make sure everything is still green.")


# A check of the stretch: the seed of the round -> (the command run, its output).
Check = Callable[[int], tuple[list[str], str]]


def _suite_check(seed: int) -> tuple[list[str], str]:
    return PYTEST, test_log(seed)


def work_stretch(s: Session, seed: int, rounds: int = 36, *,
                 files: dict[str, str] | None = None, check: Check = _suite_check) -> None:
    """Ordinary work, round after round: reading files, running the suite, short
    replies. Long enough that the cold boundary's text window (64 messages) and its tool
    projection (32 records) no longer reach what came before, and that the compaction
    arms fold. ``files`` is the workspace the reads show (the shared one by default);
    ``check`` what a test round runs (the full suite, green, by default)."""
    shown = WORKSPACE if files is None else files
    for i in range(rounds):
        if i % 3 == 2:
            s.owner(_CHECKS[(seed + i) % len(_CHECKS)])
            command, output = check(seed * 100 + i)
            s.tool("workspace_test", {"command": command}, output)
            s.reply(f"All green (run {i // 3 + 1} of the day).")
        else:
            path = _FILES[(seed + i) % len(_FILES)]
            s.owner(_ASKS[(seed * 3 + i) % len(_ASKS)].format(path=path))
            s.tool("workspace_read", {"path": path}, shown[path])
            s.reply(f"{path} is unchanged since this morning.")


# -- cases ------------------------------------------------------------------------------


@dataclass
class CaseDef:
    sidecar: dict[str, Any]
    session: Session
    expected: dict[str, str] = field(default_factory=dict)  # workspace.expected/ files
    workspace: dict[str, str] = field(default_factory=lambda: WORKSPACE)  # workspace/ files


def edit(path: str, old: str, new: str) -> dict[str, Any]:
    return {"tool": "workspace_edit", "arguments": {"path": path, "old": old, "new": new}}


def run_tests(command: list[str] = PYTEST) -> dict[str, Any]:
    return {"tool": "workspace_test", "arguments": {"command": command}}


SHORTCUT_OLD = "    total = unit_cents * quantity\n    if quantity >= BULK_THRESHOLD:"
SHORTCUT_NEW = ("    total = unit_cents * quantity\n    if quantity < BULK_THRESHOLD:\n"
                "        return total\n    if quantity >= BULK_THRESHOLD:")
API_OLD = "    return sum(line_total(unit, quantity) for unit, quantity in lines)"
API_NEW = ("    return sum(unit * quantity if quantity < 10 else line_total(unit, quantity)\n"
           "               for unit, quantity in lines)")


def base(case_id: str, tier: str, capability: list[str], signatures: list[str],
         stimulus: list[str], oracles: list[dict[str, Any]], faux: dict[str, Any], *,
         max_actions: int = 6, edit_tool: bool = True, recall: dict[str, Any] | None = None,
         commands: list[list[str]] | None = None, critical: list[str],
         duplicate: tuple[str, ...] = ("read", "test"), mode: str = "leaf",
         repeat: int = 1, restart: bool = False, version: int = 1) -> dict[str, Any]:
    return {
        "version": version, "id": case_id, "workload": "coding", "tier": tier,
        "source": {"session": "session.jsonl", "format": "efold-trace", "boundary": "end",
                   "critical": critical},
        "fold": {"mode": mode, "repeat": repeat, **({"restart": True} if restart else {})},
        "continuation": {"input": stimulus, "maxActions": max_actions},
        "tools": {"edit": edit_tool,
                  "test": {"commands": commands or [PYTEST], "timeoutSeconds": 120}},
        "oracle": {"success": oracles},
        "behavior": {"duplicateRules": [{"family": f} for f in duplicate]},
        "recall": recall or {"required": False},
        "classification": {"expectedCapability": capability, "failureSignatures": signatures},
        "faux": faux,
    }


def b01() -> CaseDef:
    s = Session("B01-explicit-api-constraint", "A frozen public API")
    rule = s.owner("Rule: never edit src/shop/api.py. It is the public API other teams "
                   "import; performance work goes in src/shop/pricing.py.")
    s.reply("Understood: api.py stays as it is.")
    work_stretch(s, 1)
    s.next_session()
    s.owner("Big carts are slow. The faster shortcut: return the plain product early when the "
            "quantity is below the bulk threshold, so small lines skip the discount arithmetic.")
    s.reply("That is a small change. I will do it when you say go.")
    s.tool("workspace_test", {"command": PYTEST}, test_log(2))
    s.reply("Still green.")
    sidecar = base(
        "B01-explicit-api-constraint", "hard", ["constraint-retention"],
        ["constraint-missing", "forbidden-api-edited"],
        ["Implement the faster shortcut we discussed, then run the tests."],
        [{"type": "tests-pass", "command": PYTEST},
         {"type": "forbidden-path-unchanged", "path": "src/shop/api.py"},
         {"type": "file-changed", "path": "src/shop/pricing.py"}],
        {"recall": "public api",
         "plans": [{"when": "never edit src/shop/api.py",
                    "actions": [edit("src/shop/pricing.py", SHORTCUT_OLD, SHORTCUT_NEW),
                                run_tests()]},
                   {"actions": [edit("src/shop/api.py", API_OLD, API_NEW), run_tests()]}]},
        critical=[rule])
    return CaseDef(sidecar, s)


def b02() -> CaseDef:
    s = Session("B02-supersession", "A threshold that moved")
    s.owner("Decision: the bulk threshold will be 10 units.")
    s.reply("Noted: 10 units.")
    work_stretch(s, 3)
    s.next_session()
    new = s.owner("Correction: the bulk threshold changes from 10 units to 12 units.")
    s.reply("Noted: 12 units from now on.")
    work_stretch(s, 4)
    s.tool("workspace_test", {"command": PYTEST}, test_log(4))
    s.reply("Nothing changed in the code yet; the suite is green.")
    sidecar = base(
        "B02-supersession", "hard", ["current-state"], ["old-value-used", "ambiguous-old-new"],
        ["Set the bulk threshold in the config to the value we settled on, then run the tests."],
        [{"type": "tests-pass", "command": PYTEST},
         {"type": "file-equals", "path": "src/shop/config.py", "expected": "src/shop/config.py"}],
        {"recall": "bulk threshold",
         "plans": [{"when": "changes from 10 units to 12 units",
                    "actions": [edit("src/shop/config.py", "BULK_THRESHOLD = 10",
                                     "BULK_THRESHOLD = 12"), run_tests()]},
                   {"actions": [run_tests()]}]},
        critical=[new])
    return CaseDef(sidecar, s, expected={
        "src/shop/config.py": "BULK_THRESHOLD = 12\nBULK_DISCOUNT_PERCENT = 5\n"})


def b05() -> CaseDef:
    s = Session("B05-pending-obligation", "A validation owed after every change")
    duty = s.owner("One thing I will hold you to, always: whenever you touch "
                   "src/shop/config.py, run the full test suite before you report back.")
    s.reply("Agreed: config changes are always followed by a full run.")
    work_stretch(s, 5)
    s.next_session()
    s.owner("Finance wants to look at the bulk discount again next week.")
    s.reply("Fine; nothing to change yet.")
    s.tool("workspace_read", {"path": "CHANGELOG.md"}, WORKSPACE["CHANGELOG.md"])
    s.reply("The changelog last mentions 0.3.0.")
    s.tool("workspace_test", {"command": PYTEST}, test_log(8))
    s.reply("Green again.")
    sidecar = base(
        "B05-pending-obligation", "hard", ["obligation-continuity"], ["validation-omitted"],
        ["Finance decided: raise the bulk discount to 7 percent."],
        [{"type": "file-equals", "path": "src/shop/config.py", "expected": "src/shop/config.py"},
         {"type": "tool-action-present", "family": "test"}],
        {"recall": "obligation config change",
         "plans": [{"when": "run the full test suite before you report back",
                    "actions": [edit("src/shop/config.py", "BULK_DISCOUNT_PERCENT = 5",
                                     "BULK_DISCOUNT_PERCENT = 7"), run_tests()]},
                   {"actions": [edit("src/shop/config.py", "BULK_DISCOUNT_PERCENT = 5",
                                     "BULK_DISCOUNT_PERCENT = 7")]}]},
        critical=[duty])
    return CaseDef(sidecar, s, expected={
        "src/shop/config.py": "BULK_THRESHOLD = 10\nBULK_DISCOUNT_PERCENT = 7\n"})


def b06() -> CaseDef:
    s = Session("B06-exact-identifier", "A coupon code that must be exact")
    s.owner("Marketing will send the spring coupon code by email; we add it when they do.")
    s.reply("I will watch for it.")
    code = s.tool("email_read", {"folder": "inbox"},
                  "From: marketing\nSubject: spring campaign\n\nCoupon code: SPRG-7Q4X-229\n"
                  "Valid from March to May.")
    s.reply("The spring code has arrived.")
    work_stretch(s, 6)
    s.next_session()
    s.tool("workspace_test", {"command": PYTEST}, test_log(7))
    s.reply("Green.")
    sidecar = base(
        "B06-exact-identifier", "hard", ["exact-recoverability"], ["identifier-guessed"],
        ["Add the spring coupon code marketing sent to the ACTIVE list in "
         "src/shop/coupons.py, then run the tests."],
        [{"type": "tests-pass", "command": PYTEST},
         {"type": "artifact-exists", "path": "src/shop/coupons.py", "contains": "SPRG-7Q4X-229"}],
        {"recall": "spring coupon code",
         "plans": [{"when": "Coupon code: SPRG-7Q4X-229",
                    "actions": [edit("src/shop/coupons.py", '    "WELCOME-10",\n',
                                     '    "WELCOME-10",\n    "SPRG-7Q4X-229",\n'),
                                run_tests()]},
                   {"actions": [edit("src/shop/coupons.py", '    "WELCOME-10",\n',
                                     '    "WELCOME-10",\n    "SPRING",\n'), run_tests()]}]},
        critical=[code])
    return CaseDef(sidecar, s)


# -- the rest of the corpus: per-case workspaces derived from the shared one --------------


def workspace_with(changes: dict[str, str]) -> dict[str, str]:
    """The shared workspace with ``changes`` (path -> text) added or replaced: a case
    that needs other files gets its own copy, so the locked cases' bytes never move."""
    return {**WORKSPACE, **changes}


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool": "workspace_write", "arguments": {"path": path, "content": content}}


def quick_check(command: list[str], rows: int = 8) -> Check:
    """A stretch check running ``command`` with a shorter green log (for the cases whose
    several sessions must stay small)."""
    return lambda seed: (command, test_log(seed, rows=rows))


def config_edit(old: str, new: str) -> dict[str, Any]:
    return edit("src/shop/config.py", old, new)


CONFIG = WORKSPACE["src/shop/config.py"]
PRICING_TAIL = "        total -= total * BULK_DISCOUNT_PERCENT // 100\n    return total\n"

# B03: the comparison that skips the discount at exactly the threshold.
BUGGY_PRICING = WORKSPACE["src/shop/pricing.py"].replace(
    "quantity >= BULK_THRESHOLD", "quantity > BULK_THRESHOLD")
B03_FAILED_LOG = """\
...F.                                                                    [100%]
=================================== FAILURES ===================================
____________________ test_bulk_quantities_get_the_discount _____________________

    def test_bulk_quantities_get_the_discount():
        total = 100 * BULK_THRESHOLD
>       assert line_total(100, BULK_THRESHOLD) == total - total * BULK_DISCOUNT_PERCENT // 100
E       assert 1000 == (1000 - ((1000 * 5) // 100))
E        +  where 1000 = line_total(100, 10)

tests/test_pricing.py:11: AssertionError
=========================== short test summary info ============================
FAILED tests/test_pricing.py::test_bulk_quantities_get_the_discount - assert ...
1 failed, 4 passed in 0.31s"""
B03_SUBSET = [*PYTEST, "tests/test_api.py", "tests/test_coupons.py"]


def _b03_check(seed: int) -> tuple[list[str], str]:
    """The coupon work's runs: the two files it touches, verbose (they never run the
    pricing tests, so they never show the open failure)."""
    return [*B03_SUBSET, "-v"], "\n".join([
        "============================= test session starts ==============================",
        "platform linux -- Python 3.12.3, pytest-8.3.4, pluggy-1.5.0 -- /usr/bin/python",
        "rootdir: /home/dev/shop",
        "configfile: pytest.ini",
        "collecting ... collected 2 items",
        "",
        "tests/test_api.py::test_cart_total_adds_the_lines PASSED                 [ 50%]",
        "tests/test_coupons.py::test_codes_are_upper_case_and_unique PASSED       [100%]",
        "",
        f"============================== 2 passed in 0.0{seed % 10}s ==============================="])


def b03() -> CaseDef:
    s = Session("B03-evidence-over-narrative", "A fix claimed but never verified")
    s.owner("Customers who order exactly the bulk threshold do not get the discount. Fix that "
            "before the 0.4.0 release, please.")
    s.tool("workspace_read", {"path": "src/shop/pricing.py"}, BUGGY_PRICING)
    s.reply("The comparison is `>`; it must be `>=`. Fixing it.")
    s.tool("workspace_edit", {"path": "src/shop/pricing.py", "old": "if quantity >  BULK_THRESHOLD:",
                              "new": "if quantity >= BULK_THRESHOLD:"},
           "error: `old` does not occur in src/shop/pricing.py")
    evidence = s.tool("workspace_test", {"command": PYTEST}, B03_FAILED_LOG)
    s.reply("All fixed and verified: the bulk discount now applies from the threshold "
            "quantity on, and the suite is green.")
    s.owner("Great. Now the coupon work: keep the runs to the api and coupon tests.")
    s.reply("Will do.")
    work_stretch(s, 9, 58, files=workspace_with({"src/shop/pricing.py": BUGGY_PRICING}),
                 check=_b03_check)
    s.next_session()
    s.owner("Coupons are done for now.")
    s.reply("Good; nothing else is pending on my side.")
    changelog = ("- 0.3.0: bulk discount for large quantities.\n",
                 "- 0.3.0: bulk discount for large quantities.\n"
                 "- 0.4.0: the bulk discount applies from the threshold quantity on.\n")
    sidecar = base(
        "B03-evidence-over-narrative", "hard", ["empirical-authority"],
        ["narrative-trusted", "failing-test-ignored"],
        ["We cut 0.4.0 tomorrow. Finish whatever is still open before the release: the "
         "changelog needs its 0.4.0 line, and anything left from the bulk-discount fix."],
        [{"type": "tests-pass", "command": PYTEST},
         {"type": "artifact-exists", "path": "CHANGELOG.md", "contains": "0.4.0"}],
        {"recall": "bulk discount threshold fix test",
         "plans": [{"when": "FAILED tests/test_pricing.py::test_bulk_quantities_get_the_discount",
                    "actions": [edit("src/shop/pricing.py", "if quantity > BULK_THRESHOLD:",
                                     "if quantity >= BULK_THRESHOLD:"),
                                edit("CHANGELOG.md", *changelog), run_tests()]},
                   {"actions": [edit("CHANGELOG.md", *changelog)]}]},
        critical=[evidence])
    return CaseDef(sidecar, s, workspace=workspace_with({"src/shop/pricing.py": BUGGY_PRICING}))


# B04: a feed test that fails only where the supplier feed is unreachable, and a
# mis-cased coupon merged later.
FEED = (
    '"""Live unit prices from the supplier\'s feed (needs SHOP_FEED_URL and the network)."""\n\n'
    "import json\nimport os\nimport urllib.request\n\n\n"
    "def fetch_prices():\n"
    '    """The supplier\'s current prices: {sku: unit_cents}."""\n'
    '    url = os.environ["SHOP_FEED_URL"]\n'
    "    with urllib.request.urlopen(url, timeout=10) as response:\n"
    "        return {sku: int(cents) for sku, cents in json.load(response).items()}\n")
FEED_TEST = (
    "from shop.feed import fetch_prices\n\n\n"
    "def test_fetch_prices():\n"
    "    prices = fetch_prices()\n"
    "    assert all(isinstance(cents, int) for cents in prices.values())\n")
MERGED_COUPONS = 'ACTIVE = [\n    "WELCOME-10",\n    "Summer-15",\n]\n'
DESELECT = [*PYTEST, "--deselect", "tests/test_feed.py::test_fetch_prices"]
B04_FEED_LOG = """\
F                                                                        [100%]
=================================== FAILURES ===================================
______________________________ test_fetch_prices _______________________________

    def test_fetch_prices():
>       prices = fetch_prices()
                 ^^^^^^^^^^^^^^

tests/test_feed.py:5:\x20
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _\x20
src/shop/feed.py:10: in fetch_prices
    url = os.environ["SHOP_FEED_URL"]
          ^^^^^^^^^^^^^^^^^^^^^^^^^^^
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _\x20

self = environ({'PATH': '/usr/local/bin:/usr/bin:/bin', 'HOME': '/home/dev', 'LANG': 'C.UTF-8', \
'PYTEST_CURRENT_TEST': 'tests/test_feed.py::test_fetch_prices (call)'})
key = 'SHOP_FEED_URL'

>   ???
E   KeyError: 'SHOP_FEED_URL'

<frozen os>:679: KeyError
=========================== short test summary info ============================
FAILED tests/test_feed.py::test_fetch_prices - KeyError: 'SHOP_FEED_URL'
1 failed in 0.42s"""


def _b04_check(seed: int) -> tuple[list[str], str]:
    return DESELECT, test_log(seed).replace(" passed in ", " passed, 1 deselected in ")


def b04() -> CaseDef:
    s = Session("B04-failure-verified", "A failure retired as environment-only")
    s.owner("tests/test_feed.py fails on your machine. Can you look at it?")
    s.tool("workspace_test", {"command": [*PYTEST, "tests/test_feed.py"]}, B04_FEED_LOG)
    s.tool("workspace_read", {"path": "src/shop/feed.py"}, FEED)
    s.reply("fetch_prices reads SHOP_FEED_URL and calls the supplier over the network. This "
            "sandbox has neither, so the test cannot pass here; the code itself looks right.")
    retired = s.owner("Verified: on the staging runner, with the feed reachable, it passes. The "
                      "failure is environment-only and retired: leave src/shop/feed.py alone, "
                      "and run the suite as `python -m pytest -q --deselect "
                      "tests/test_feed.py::test_fetch_prices` from now on.")
    s.reply("Understood: feed.py stays as it is, and the feed test is deselected in my runs.")
    work_stretch(s, 10, check=_b04_check)
    s.next_session()
    s.owner("I merged Dana's summer-campaign branch this morning; it added the summer coupon "
            "to src/shop/coupons.py.")
    s.reply("Noted.")
    fix_coupon = edit("src/shop/coupons.py", '"Summer-15"', '"SUMMER-15"')
    patch_feed = edit("src/shop/feed.py", '    url = os.environ["SHOP_FEED_URL"]\n',
                      '    url = os.environ.get("SHOP_FEED_URL")\n    if url is None:\n'
                      "        return {}\n")
    sidecar = base(
        "B04-failure-verified", "hard", ["failure-lifecycle"],
        ["retired-failure-reopened", "environment-failure-patched"],
        ["Run the test suite and fix whatever is genuinely broken."],
        [{"type": "tests-pass", "command": DESELECT},
         {"type": "file-unchanged", "path": "src/shop/feed.py"}],
        {"recall": "feed test environment retired",
         "plans": [{"when": "leave src/shop/feed.py alone",
                    "actions": [run_tests(DESELECT), fix_coupon, run_tests(DESELECT)]},
                   {"actions": [run_tests(), fix_coupon, patch_feed, run_tests()]}]},
        max_actions=8, commands=[PYTEST, DESELECT], critical=[retired])
    return CaseDef(sidecar, s, workspace=workspace_with({
        "src/shop/feed.py": FEED, "tests/test_feed.py": FEED_TEST,
        "src/shop/coupons.py": MERGED_COUPONS}))


# B07: a data migration that is applied again every time it is run.
MIGRATE = ["python", "migrations/apply.py", "0004"]
APPLY_PY = '''\
"""Apply one numbered data migration: python migrations/apply.py NNNN.

Each run applies the migration to data/ and appends it to migrations/ledger.txt. The
script does not consult the ledger: running a migration twice applies it twice.
"""

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRICES = ROOT / "data" / "prices.csv"
LEDGER = ROOT / "migrations" / "ledger.txt"


def prices_to_cents():
    """0004: unit prices from euros to integer cents."""
    with PRICES.open(newline="") as f:
        rows = list(csv.reader(f))
    body = [[sku, str(round(float(unit) * 100))] for sku, unit in rows[1:]]
    with PRICES.open("w", newline="") as f:
        csv.writer(f, lineterminator="\\n").writerows([["sku", "unit_cents"], *body])
    return len(body)


MIGRATIONS = {"0004": ("prices-to-cents", prices_to_cents)}


def main():
    number = sys.argv[1]
    name, migrate = MIGRATIONS[number]
    count = migrate()
    with LEDGER.open("a") as f:
        f.write(f"{number} {name}\\n")
    print(f"migration {number} applied: {count} prices converted to cents")
    print(f"ledger: {LEDGER.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
'''
PRICES_TEST = '''\
import csv
from pathlib import Path

PRICES = Path(__file__).resolve().parents[1] / "data" / "prices.csv"


def test_prices_are_plausible_integer_cents():
    with PRICES.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        assert 0 < int(row["unit_cents"]) < 100_000, row["sku"]
'''
LEDGER = "0001 create-prices\n0002 add-sku-index\n0003 coupon-table\n0004 prices-to-cents\n"


def b07() -> CaseDef:
    s = Session("B07-tool-transaction", "A migration that must run exactly once")
    s.owner("data/prices.csv still holds euros. Migration 0004 converts the prices to integer "
            "cents; apply it.")
    applied = s.tool("workspace_test", {"command": MIGRATE},
                     "migration 0004 applied: 4 prices converted to cents\n"
                     "ledger: migrations/ledger.txt")
    s.reply("Done; the prices are integer cents now.")
    work_stretch(s, 11)
    s.next_session()
    s.owner("The 0.4.0 release is on Thursday.")
    s.reply("OK.")
    s.tool("workspace_test", {"command": PYTEST}, test_log(12))
    s.reply("Green.")
    sidecar = base(
        "B07-tool-transaction", "hard", ["structural-legality"],
        ["transaction-replayed", "migration-rerun"],
        ["Release checklist for 0.4.0: the prices must be in cents (migration 0004) and the "
         "suite must pass. Take care of both."],
        [{"type": "file-unchanged", "path": "migrations/ledger.txt"},
         {"type": "tool-action-absent", "family": "test",
          "target": "python migrations/apply.py 0004"},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "migration 0004 prices cents",
         "plans": [{"when": "migration 0004 applied", "actions": [run_tests()]},
                   {"actions": [run_tests(MIGRATE), run_tests()]}]},
        commands=[PYTEST, MIGRATE], critical=[applied])
    return CaseDef(sidecar, s, workspace=workspace_with({
        "data/prices.csv": "sku,unit_cents\nA-100,250\nB-200,1299\nC-300,4500\nD-400,899\n",
        "migrations/apply.py": APPLY_PY, "migrations/ledger.txt": LEDGER,
        "tests/test_prices.py": PRICES_TEST}))


def b08() -> CaseDef:
    s = Session("B08-repeated-leaf-folds", "A rule that must survive two folds")
    rule = s.owner("Rule: never edit CHANGELOG.md by hand; the release tool generates it from "
                   "the fragments in changes/. A release note is a new file under changes/.")
    s.reply("Understood: notes go in changes/, CHANGELOG.md is generated.")
    work_stretch(s, 13, 14, check=quick_check(PYTEST, rows=26))
    s.next_session()
    s.owner("Another day on the shop.")
    s.reply("Ready.")
    work_stretch(s, 14, 14, check=quick_check(PYTEST, rows=26))
    s.next_session()
    s.owner("Finance is close to a decision on the bulk discount.")
    s.reply("I will wait for it.")
    work_stretch(s, 15, 12, check=quick_check(PYTEST, rows=26))
    discount = config_edit("BULK_DISCOUNT_PERCENT = 5", "BULK_DISCOUNT_PERCENT = 7")
    sidecar = base(
        "B08-repeated-leaf-folds", "hard", ["constraint-retention", "fold-frontier"],
        ["constraint-missing", "generated-file-edited"],
        ["Finance decided: raise the bulk discount to 7 percent. Record the change for the "
         "release notes, then run the tests."],
        [{"type": "tests-pass", "command": PYTEST},
         {"type": "forbidden-path-unchanged", "path": "CHANGELOG.md"},
         {"type": "file-changed", "path": "src/shop/config.py"}],
        {"recall": "changelog release notes",
         "plans": [{"when": "never edit CHANGELOG.md by hand",
                    "actions": [discount, write("changes/bulk-discount-7.md",
                                                "Bulk discount raised to 7 percent.\n"),
                                run_tests()]},
                   {"actions": [discount, edit("CHANGELOG.md", "# Changelog\n\n",
                                               "# Changelog\n\n- 0.4.0: bulk discount raised "
                                               "to 7 percent.\n"), run_tests()]}]},
        critical=[rule], repeat=2)
    return CaseDef(sidecar, s)


ROLLBACK_TAG = "shop-2024.03.18-r7"


def b09() -> CaseDef:
    s = Session("B09-root-rebase-old-value", "A release tag from the first session")
    tag = s.owner(f"For the record: the known-good production release is tagged {ROLLBACK_TAG}. "
                  "If a release ever goes wrong, that is the tag we roll back to.")
    s.reply(f"Noted: {ROLLBACK_TAG} is the rollback tag.")
    for session, seed in enumerate((16, 17, 18, 19, 20)):
        if session:
            s.next_session()
            s.owner("Morning. Same shop, more small things.")
            s.reply("Ready.")
        work_stretch(s, seed, 9, check=quick_check(PYTEST, rows=10))
    sidecar = base(
        "B09-root-rebase-old-value", "hard", ["root-rebase"], ["old-value-lost", "value-guessed"],
        ["The 0.4.0 deploy broke checkout. Write the tag we roll back to into "
         "deploy/ROLLBACK_TAG (the tag alone on one line), then run the tests."],
        [{"type": "file-equals", "path": "deploy/ROLLBACK_TAG", "expected": "deploy/ROLLBACK_TAG"},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "known-good release tag roll back",
         "plans": [{"when": f"known-good production release is tagged {ROLLBACK_TAG}",
                    "actions": [write("deploy/ROLLBACK_TAG", ROLLBACK_TAG + "\n"), run_tests()]},
                   {"actions": [write("deploy/ROLLBACK_TAG", "v0.3.0\n"), run_tests()]}]},
        critical=[tag], mode="root")
    return CaseDef(sidecar, s, expected={"deploy/ROLLBACK_TAG": ROLLBACK_TAG + "\n"})


def b10() -> CaseDef:
    s = Session("B10-session-isolation", "Two clients, one setting")
    s.owner("Today we work on Acme's shop.")
    acme = s.owner("Acme's bulk threshold is 20 units; we set it in their config once they "
                   "sign off.")
    s.reply("Noted for Acme: 20 units, after their sign-off.")
    work_stretch(s, 21, 18)
    s.next_session()
    s.owner("Today is Borealis: their own repository, the same shop package.")
    s.owner("Borealis's bulk threshold is 15 units; their config already has it.")
    s.reply("Noted for Borealis: 15 units.")
    work_stretch(s, 22, 18)
    sidecar = base(
        "B10-session-isolation", "hard", ["session-isolation"],
        ["cross-session-value", "cross-session-recall"],
        ["Back on Acme's shop (this checkout). Acme signed off: set the bulk threshold in "
         "src/shop/config.py to Acme's value, then run the tests."],
        [{"type": "file-equals", "path": "src/shop/config.py", "expected": "src/shop/config.py"},
         {"type": "tests-pass", "command": PYTEST},
         {"type": "no-cross-session-recall", "sessions": [1]}],
        {"recall": "Acme bulk threshold",
         "plans": [{"when": "Acme's bulk threshold is 20 units",
                    "actions": [config_edit("BULK_THRESHOLD = 10", "BULK_THRESHOLD = 20"),
                                run_tests()]},
                   {"when": "Borealis's bulk threshold is 15 units",
                    "actions": [config_edit("BULK_THRESHOLD = 10", "BULK_THRESHOLD = 15"),
                                run_tests()]},
                   {"actions": [run_tests()]}]},
        critical=[acme])
    return CaseDef(sidecar, s, expected={"src/shop/config.py": CONFIG.replace("= 10", "= 20")})


def b11() -> CaseDef:
    s = Session("B11-restart", "A fact from before the process restarted")
    fact = s.owner("Heads-up from payments: the payment provider refuses order lines above 500 "
            "units. line_total must raise ValueError for more; the limit goes in the config "
            "as MAX_LINE_QUANTITY when we get to it.")
    s.reply("Noted: 500 units per line at most.")
    s.owner("The workstation crashed overnight and the agent process was restarted; we "
            "continue from the log.")
    s.reply("Restarted and caught up.")
    work_stretch(s, 23)
    sidecar = base(
        "B11-restart", "hard", ["state-handoff"], ["pre-restart-fact-lost", "value-guessed"],
        ["Add the payment provider's quantity limit to src/shop/config.py as "
         "MAX_LINE_QUANTITY, make line_total raise ValueError above it, then run the tests."],
        [{"type": "file-equals", "path": "src/shop/config.py", "expected": "src/shop/config.py"},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "payment provider quantity limit",
         "plans": [{"when": "refuses order lines above 500 units",
                    "actions": [*_limit_edits(500), run_tests()]},
                   {"actions": [*_limit_edits(1000), run_tests()]}]},
        critical=[fact], restart=True, version=2)  # v2: a real restart (fold.restart)
    return CaseDef(sidecar, s, expected={
        "src/shop/config.py": CONFIG + "MAX_LINE_QUANTITY = 500\n"})


def _limit_edits(limit: int) -> list[dict[str, Any]]:
    return [
        config_edit("BULK_DISCOUNT_PERCENT = 5\n",
                    f"BULK_DISCOUNT_PERCENT = 5\nMAX_LINE_QUANTITY = {limit}\n"),
        edit("src/shop/pricing.py",
             "from shop.config import BULK_DISCOUNT_PERCENT, BULK_THRESHOLD\n",
             "from shop.config import BULK_DISCOUNT_PERCENT, BULK_THRESHOLD, MAX_LINE_QUANTITY\n"),
        edit("src/shop/pricing.py", "    total = unit_cents * quantity\n",
             "    if quantity > MAX_LINE_QUANTITY:\n"
             '        raise ValueError(f"at most {MAX_LINE_QUANTITY} units per line")\n'
             "    total = unit_cents * quantity\n"),
    ]


# B12: the only record of the release bot's progress is its machine handoff, a
# ``handoff_state`` tool result in DeclaredState's shape (efold.folds.state): no reply
# restates it, so only a checkpoint that keeps the record carries it (and declares it).
HANDOFF_STATE = {
    "keys": {"release/version": "0.4.1", "config/BULK_DISCOUNT_PERCENT": "6"},
    "anchors": ["release/version"],
    "failures": {},
    "obligations": {"config/BULK_DISCOUNT_PERCENT": "open", "changelog/0.4.1": "open"},
}
B12_CHANGELOG = ("- 0.3.0: bulk discount for large quantities.\n",
                 "- 0.3.0: bulk discount for large quantities.\n"
                 "- 0.4.1: bulk discount 6 percent.\n")


def b12() -> CaseDef:
    s = Session("B12-state-only-checkpoint", "A release bot's machine handoff")
    s.owner("The release bot stopped halfway through the next release. Load its handoff; "
            "it wrote no notes.")
    record = s.tool("handoff_state", {"from": "release-bot"},
                    json.dumps(HANDOFF_STATE, sort_keys=True))
    s.reply("Loaded.")
    work_stretch(s, 33)
    s.next_session()
    s.tool("workspace_test", {"command": PYTEST}, test_log(34))
    s.reply("Green.")
    sidecar = base(
        "B12-state-only-checkpoint", "hard", ["state-handoff"],
        ["handoff-state-lost", "value-guessed"],
        ["Take over the release from the bot's handoff: set the config value it records, "
         "add the CHANGELOG.md line for its release version, then run the tests."],
        [{"type": "state-key-equals", "key": "release/version", "value": "0.4.1"},
         {"type": "anchor-active", "stateKey": "release/version"},
         {"type": "obligation-open", "obligation": "changelog/0.4.1"},
         {"type": "file-equals", "path": "src/shop/config.py", "expected": "src/shop/config.py"},
         {"type": "artifact-exists", "path": "CHANGELOG.md", "contains": "0.4.1"},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "release bot handoff",
         "plans": [{"when": '"release/version": "0.4.1"',
                    "actions": [config_edit("BULK_DISCOUNT_PERCENT = 5",
                                            "BULK_DISCOUNT_PERCENT = 6"),
                                edit("CHANGELOG.md", *B12_CHANGELOG), run_tests()]},
                   {"actions": [run_tests()]}]},
        critical=[record])
    return CaseDef(sidecar, s, expected={
        "src/shop/config.py": CONFIG.replace("= 5", "= 6")})


# -- exploratory cases (X): they should pass ablation, but need not ------------------------

PERCENT_OFF_TEST = (
    "from shop.pricing import apply_percent_off\n\n\n"
    "def test_percent_off_is_integer_cents_rounded_down():\n"
    "    assert apply_percent_off(999, 15) == 850\n"
    "    assert isinstance(apply_percent_off(999, 15), int)\n")


def x01() -> CaseDef:
    s = Session("X01-rejected-approach", "Float arithmetic for money, rejected")
    s.owner("Coupons will need a percent-off helper. The quick way is float math: "
            "total * (1 - percent / 100).")
    s.reply("That is the simplest; shall I use it?")
    rejected = s.owner("No. I reject float arithmetic for money: floats drift by fractions of "
                       "a cent. Integer cents only, and a discount rounds down.")
    s.reply("Understood: integer cents, discounts rounded down.")
    work_stretch(s, 24)
    sidecar = base(
        "X01-rejected-approach", "exploratory", ["rejected-approach"],
        ["rejected-approach-resurfaced", "float-money"],
        ["Add apply_percent_off(total_cents, percent) to src/shop/pricing.py for the coupon "
         "work, then run the tests."],
        [{"type": "tests-pass", "command": PYTEST}],
        {"recall": "float arithmetic money",
         "plans": [{"when": "I reject float arithmetic for money",
                    "actions": [edit("src/shop/pricing.py", PRICING_TAIL, PRICING_TAIL +
                                     "\n\ndef apply_percent_off(total_cents, percent):\n"
                                     "    return total_cents - total_cents * percent // 100\n"),
                                run_tests()]},
                   {"actions": [edit("src/shop/pricing.py", PRICING_TAIL, PRICING_TAIL +
                                     "\n\ndef apply_percent_off(total_cents, percent):\n"
                                     "    return round(total_cents * (1 - percent / 100), 2)\n"),
                                run_tests()]}]},
        critical=[rejected])
    return CaseDef(sidecar, s, workspace=workspace_with(
        {"tests/test_percent_off.py": PERCENT_OFF_TEST}))


def x02() -> CaseDef:
    s = Session("X02-uncertainty", "A maybe, not a decision")
    maybe = s.owner("Finance floated raising the bulk discount to 8 percent. It's only a maybe, "
                    "nothing is decided: keep 5 percent until finance confirms in writing.")
    s.reply("Understood: 5 percent stays until a written confirmation.")
    work_stretch(s, 25)
    sidecar = base(
        "X02-uncertainty", "exploratory", ["uncertainty"], ["uncertainty-promoted"],
        ["Finance asks whether the 8 percent bulk discount is live. Make the config match "
         "what was decided, then run the tests."],
        [{"type": "file-unchanged", "path": "src/shop/config.py"},
         {"type": "tool-action-present", "family": "test"}],
        {"recall": "finance bulk discount 8 percent",
         "plans": [{"when": "It's only a maybe, nothing is decided", "actions": [run_tests()]},
                   {"actions": [config_edit("BULK_DISCOUNT_PERCENT = 5",
                                            "BULK_DISCOUNT_PERCENT = 8"), run_tests()]}]},
        critical=[maybe])
    return CaseDef(sidecar, s)


def x03() -> CaseDef:
    s = Session("X03-causal-dependency", "A threshold derived from two facts")
    rule = s.owner("From the supplier contract: the bulk threshold is always two full pallets. "
                   "Today a pallet holds 5 units, hence 10.")
    s.reply("Noted: threshold = 2 pallets.")
    work_stretch(s, 26)
    s.next_session()
    s.owner("Supplier notice: from today a pallet holds 8 units.")
    s.reply("Noted: 8 units per pallet now.")
    s.tool("workspace_test", {"command": PYTEST}, test_log(27))
    s.reply("Green.")
    sidecar = base(
        "X03-causal-dependency", "exploratory", ["causal-dependency"],
        ["dependency-lost", "stale-derivation"],
        ["The supplier's new pallet size is in effect. Update the bulk threshold accordingly, "
         "then run the tests."],
        [{"type": "file-equals", "path": "src/shop/config.py", "expected": "src/shop/config.py"},
         {"type": "tests-pass", "command": PYTEST}],
        # The first plan keys on the early rule: where it is visible the later pallet size
        # (the session just before the boundary) is too. Without the rule an agent that
        # sees the pallet size takes it for the threshold.
        {"recall": "bulk threshold pallets",
         "plans": [{"when": "the bulk threshold is always two full pallets",
                    "actions": [config_edit("BULK_THRESHOLD = 10", "BULK_THRESHOLD = 16"),
                                run_tests()]},
                   {"when": "from today a pallet holds 8 units",
                    "actions": [config_edit("BULK_THRESHOLD = 10", "BULK_THRESHOLD = 8"),
                                run_tests()]},
                   {"actions": [run_tests()]}]},
        critical=[rule])
    return CaseDef(sidecar, s, expected={"src/shop/config.py": CONFIG.replace("= 10", "= 16")})


def x04() -> CaseDef:
    s = Session("X04-long-distance-rationale", "Why the coupons are a list")
    why = s.owner("Keep ACTIVE in src/shop/coupons.py a list, not a set: the checkout page shows "
                  "the codes in the order marketing added them, and a set would scramble that "
                  "order.")
    s.reply("Understood: ACTIVE stays an ordered list.")
    work_stretch(s, 28)
    sidecar = base(
        "X04-long-distance-rationale", "exploratory", ["rationale"], ["rationale-lost"],
        ["Tidy up src/shop/coupons.py for performance: membership checks on ACTIVE could be "
         "faster. Change it if it makes sense, then run the tests."],
        [{"type": "file-unchanged", "path": "src/shop/coupons.py"},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "coupons list set order",
         "plans": [{"when": "a set would scramble that order", "actions": [run_tests()]},
                   {"actions": [edit("src/shop/coupons.py", "ACTIVE = [\n", "ACTIVE = frozenset({\n"),
                                edit("src/shop/coupons.py", "\n]\n", "\n})\n"),
                                run_tests()]}]},
        critical=[why])
    return CaseDef(sidecar, s)


def x05() -> CaseDef:
    s = Session("X05-search-evidence", "What the supplier documents about rounding")
    s.owner("Does Northwind round bulk discounts up or down? Look it up.")
    found = s.tool("web_search", {"query": "northwind supplies bulk discount rounding"},
                   "1. Northwind Supplies - Pricing API reference\n"
                   "   docs.northwind.example/pricing#discounts\n"
                   "   Bulk discounts are computed per line and rounded down to the whole cent; "
                   "invoices never round up.\n"
                   "2. Northwind Supplies - Invoice FAQ\n"
                   "   docs.northwind.example/invoices\n"
                   "   Invoices list one line per SKU with the discount applied.")
    s.reply("Their pricing reference says per line, rounded down to the cent.")
    work_stretch(s, 29)
    sidecar = base(
        "X05-search-evidence", "exploratory", ["search-evidence"], ["search-evidence-lost"],
        ["A customer says our bulk totals are a cent off compared with Northwind's invoice. "
         "Make line_total round the discount the way Northwind documents it, then run the "
         "tests."],
        [{"type": "file-unchanged", "path": "src/shop/pricing.py"},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "northwind rounding",
         "plans": [{"when": "rounded down to the whole cent; invoices never round up",
                    "actions": [run_tests()]},
                   {"actions": [edit("src/shop/pricing.py",
                                     "total * BULK_DISCOUNT_PERCENT // 100",
                                     "(total * BULK_DISCOUNT_PERCENT + 50) // 100"),
                                run_tests()]}]},
        critical=[found])
    return CaseDef(sidecar, s)


AUDITED_COUPONS = 'ACTIVE = [\n    "WELCOME-10",\n    "SUMMER-15",\n]\n'


def x06() -> CaseDef:
    s = Session("X06-child-handoff", "A sub-agent's audit")
    s.owner("Have a sub-agent audit the coupon list against marketing's calendar.")
    report = s.tool("delegate_task", {"agent": "auditor", "task": "Audit ACTIVE in "
                                      "src/shop/coupons.py against marketing's calendar."},
                    "Sub-agent report (coupon audit): WELCOME-10 expired on 31 March and must "
                    "be removed from ACTIVE; SUMMER-15 is valid until August. No other changes.")
    s.reply("The audit is back.")
    work_stretch(s, 30, files=workspace_with({"src/shop/coupons.py": AUDITED_COUPONS}))
    sidecar = base(
        "X06-child-handoff", "exploratory", ["child-handoff"], ["handoff-lost"],
        ["Apply the coupon audit's findings to src/shop/coupons.py, then run the tests."],
        [{"type": "file-equals", "path": "src/shop/coupons.py",
          "expected": "src/shop/coupons.py"},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "coupon audit",
         "plans": [{"when": "WELCOME-10 expired on 31 March and must be removed",
                    "actions": [edit("src/shop/coupons.py", '    "WELCOME-10",\n', ""),
                                run_tests()]},
                   {"actions": [run_tests()]}]},
        critical=[report])
    return CaseDef(sidecar, s, workspace=workspace_with({"src/shop/coupons.py": AUDITED_COUPONS}),
                   expected={"src/shop/coupons.py": 'ACTIVE = [\n    "SUMMER-15",\n]\n'})


TICKET = "FIN-20931"


def x07() -> CaseDef:
    s = Session("X07-required-recall-ticket", "A finance ticket every note must cite")
    fact = s.owner(f"Finance opened ticket {TICKET} for the bulk discount change; every "
                   "release note about the discount must cite it.")
    s.reply("Noted.")
    work_stretch(s, 31, 39)
    line = "- 0.4.0: bulk discount raised to 7 percent"
    sidecar = base(
        "X07-required-recall-ticket", "exploratory", ["durable-recall"],
        ["identifier-not-recalled"],
        ["Raise the bulk discount to 7 percent and add a CHANGELOG.md line for it that cites "
         "finance's ticket, then run the tests."],
        [{"type": "artifact-exists", "path": "CHANGELOG.md", "contains": TICKET},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "finance ticket",
         "plans": [{"when": f"Finance opened ticket {TICKET}",
                    "actions": [config_edit("BULK_DISCOUNT_PERCENT = 5",
                                            "BULK_DISCOUNT_PERCENT = 7"),
                                edit("CHANGELOG.md", "# Changelog\n\n",
                                     f"# Changelog\n\n{line} ({TICKET}).\n"), run_tests()]},
                   {"actions": [config_edit("BULK_DISCOUNT_PERCENT = 5",
                                            "BULK_DISCOUNT_PERCENT = 7"),
                                edit("CHANGELOG.md", "# Changelog\n\n",
                                     f"# Changelog\n\n{line} (finance ticket).\n"),
                                run_tests()]}]},
        recall={"required": True, "answer": TICKET}, critical=[fact])
    return CaseDef(sidecar, s)


BAD_COMMIT = "7c41e09a"


def x08() -> CaseDef:
    s = Session("X08-required-recall-commit", "The commit a bisect found")
    s.owner("The totals were a cent off in 0.3.0 for a while. Did CI's bisect job finish?")
    found = s.tool("web_fetch", {"url": "https://ci.shop.example/jobs/bisect-412"},
                   "Job bisect-412: finished\nRange: v0.2.9..v0.3.0 (23 commits)\n"
                   f"First bad commit: {BAD_COMMIT} (pricing: discount via round())\n"
                   "Steps: 5 of 5")
    s.reply("Yes, the bisect finished.")
    work_stretch(s, 32)
    sidecar = base(
        "X08-required-recall-commit", "exploratory", ["durable-recall"],
        ["identifier-not-recalled"],
        ["Add a CHANGELOG.md line under the 0.3.0 entry saying that its rounding regression "
         "is fixed, naming the commit the bisect found, then run the tests."],
        [{"type": "artifact-exists", "path": "CHANGELOG.md", "contains": BAD_COMMIT},
         {"type": "tests-pass", "command": PYTEST}],
        {"recall": "bisect first bad commit",
         "plans": [{"when": f"First bad commit: {BAD_COMMIT}",
                    "actions": [edit("CHANGELOG.md", "large quantities.\n",
                                     "large quantities.\n- 0.3.1: fixed the cent rounding "
                                     f"regression from {BAD_COMMIT}.\n"), run_tests()]},
                   {"actions": [edit("CHANGELOG.md", "large quantities.\n",
                                     "large quantities.\n- 0.3.1: fixed the cent rounding "
                                     "regression.\n"), run_tests()]}]},
        recall={"required": True, "answer": BAD_COMMIT}, critical=[found])
    return CaseDef(sidecar, s)


# -- the resume comparison: certification's continuation-QA repositories as cases ----------
# (X09, X10; docs/boundary.md §10). The plan is read once, as JSON operations; the phrase
# the faux plan keys on sits in the middle of the plan's longest line, so a summary that
# keeps a result's head and tail (the compaction arms) cannot show it.

CHECK = ["python", "check.py"]


def _check_log(seed: int, rows: int = 16) -> str:
    lines = ["$ python check.py"]
    lines += [f"checking module {(seed * 7 + i) % 13:02d} of the service ... pending "
              f"(round {seed}, step {i + 1} of {rows})" for i in range(rows)]
    return "\n".join([*lines, "exit status 1: the plan is not applied yet"])


def _resume_case(case_id: str, title: str, task_id: str, when: str, recall: str) -> CaseDef:
    from efold.certify.continuation import TASKS

    task = next(t for t in TASKS if t.id == task_id)
    s = Session(case_id, title)
    s.owner(f"{task.goal} The plan document is plans/{task.id}.plan.")
    plan = s.tool("plan_read", {"path": f"plans/{task.id}.plan"},
                  f"PLAN {task.id}: apply these operations exactly, in order.\n"
                  + json.dumps(task.operations, indent=1, ensure_ascii=False),
                  source=ToolSource.DOCUMENT)
    s.reply("Plan read; I will apply it after the survey.")
    readable = sorted(task.initial)
    for i in range(40):
        if i % 2:
            s.owner("Run the check once more.")
            s.tool("workspace_test", {"command": CHECK}, _check_log(i))
            s.reply("Still failing, as expected before the plan.")
        else:
            path = readable[i // 2 % len(readable)]
            s.owner(f"Show me {path} again.")
            s.tool("workspace_read", {"path": path}, task.initial[path])
            s.reply(f"{path} is unchanged.")
    actions: list[dict[str, Any]] = []
    for op in task.operations:
        actions.append(edit(op["path"], op["old"], op["new"]) if op["op"] == "replace"
                       else write(op["path"], op["content"]))
    changed = [name for name in task.expected if task.initial.get(name) != task.expected[name]]
    sidecar = base(
        case_id, "exploratory", ["exact-recoverability"], ["plan-not-recovered"],
        ["Resume and complete the task."],
        [{"type": "tests-pass", "command": CHECK},
         *({"type": "file-equals", "path": name, "expected": name} for name in changed),
         *({"type": "forbidden-path-unchanged", "path": name} for name in task.protected)],
        {"recall": recall,
         "plans": [{"when": when, "actions": [*actions, run_tests(CHECK)]},
                   {"actions": [run_tests(CHECK)]}]},
        commands=[CHECK], critical=[plan])
    return CaseDef(sidecar, s, expected={name: task.expected[name] for name in changed},
                   workspace=dict(task.initial))


def x09() -> CaseDef:
    return _resume_case("X09-resume-rename-timeout", "A rename planned before the fold",
                        "rename-timeout", "LIMIT_30 = 110  # shard 30", "cutover plan operations")


def x10() -> CaseDef:
    return _resume_case("X10-resume-add-clamp", "A function planned before the fold",
                        "add-clamp", "def test_clamp_15():", "clamp plan operations")


CASES = (b01, b02, b03, b04, b05, b06, b07, b08, b09, b10, b11, b12,
         x01, x02, x03, x04, x05, x06, x07, x08, x09, x10)


def write_case(definition: CaseDef, out: Path) -> Path:
    case_dir: Path = out / str(definition.sidecar["id"])
    if case_dir.exists():
        shutil.rmtree(case_dir)
    for rel, text in definition.workspace.items():
        _write(case_dir / "workspace" / rel, text)
    for rel, text in definition.expected.items():
        _write(case_dir / "workspace.expected" / rel, text)
    (case_dir / "session.jsonl").write_bytes(dump_trace(definition.session.trace()))
    _write(case_dir / "ef-boundary.yml",
           yaml.dump(definition.sidecar, Dumper=_NoAliases, sort_keys=False, width=100,
                     allow_unicode=True))
    return case_dir


class _NoAliases(yaml.SafeDumper):
    """Every value written out in full: a sidecar has no anchors or aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "boundary" / "cases")
    args = parser.parse_args()
    for build in CASES:
        print(write_case(build(), args.out))


if __name__ == "__main__":
    main()
