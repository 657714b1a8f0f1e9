"""report.html in a real headless Chromium: it renders, logs nothing, requests nothing.

The browser is driven over the DevTools protocol on ``--remote-debugging-pipe`` (fd 3
in, fd 4 out, NUL-separated JSON), so the test sees exactly what the page did: every
console message, uncaught exception, log entry and network request of the page's own
target. Chromium's own background traffic is made impossible, not just ignored: every
host name resolves to nothing and every connection goes to a dead loopback proxy.

A control page with a console error, an exception and a request proves the harness
detects all three, so a clean result for the report means something.

Layout at 1,400 px: a report of a large run (over a thousand slots, long ids, several
roles and categories) must not make the page scroll sideways, nothing but a table's own
scroll box may reach past the right edge, and the status banner must be the body's first
element. Control pages with a 2,000 px element prove the overflow check detects one, and
that the same element inside a scroll box is the one exemption.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skips without it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest

from efold.corpus.model import Category
from efold.errors import Code
from efold.protocol.records import Plan, Receipt
from efold.report import RunFacts, StopFact, build_results, render_html
from efold.report.failures import failure_kind

CHROMIUM = next((path for name in ("chromium", "chromium-browser", "google-chrome")
                 if (path := shutil.which(name))), None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium not installed (apt-get install -y chromium)",
)
TIMEOUT = 45.0


class DevTools:
    """A minimal DevTools client over the inherited pipe pair."""

    def __init__(self, command_fd: int, event_fd: int) -> None:
        self._out = command_fd
        self._in = event_fd
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def _read_message(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no DevTools message before the deadline")
            ready, _, _ = select.select([self._in], [], [], remaining)
            if ready:
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    raise EOFError("Chromium closed the DevTools pipe")
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        request: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if session is not None:
            request["sessionId"] = session
        os.write(self._out, json.dumps(request).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            message = self._read_message(deadline)
            if message.get("id") == self._next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message["result"]
                return result
            self.events.append(message)

    def wait_for(self, method: str, session: str) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not any(e.get("method") == method and e.get("sessionId") == session
                      for e in self.events):
            self.events.append(self._read_message(deadline))

    def session_events(self, session: str, *methods: str) -> list[dict[str, Any]]:
        return [e for e in self.events
                if e.get("sessionId") == session and e.get("method") in methods]


class PageVisit:
    """What one page did while it loaded and was screenshotted."""

    def __init__(self, events: list[dict[str, Any]], probe: dict[str, Any],
                 layout: dict[str, Any], screenshot: bytes, steps: list[Any]) -> None:
        self.console = [e["params"] for e in events if e["method"] == "Runtime.consoleAPICalled"]
        self.exceptions = [e["params"] for e in events
                           if e["method"] == "Runtime.exceptionThrown"]
        self.log = [e["params"]["entry"] for e in events if e["method"] == "Log.entryAdded"]
        self.requests = [e["params"]["request"]["url"] for e in events
                         if e["method"] == "Network.requestWillBeSent"]
        self.probe = probe
        self.layout = layout  # _LAYOUT, folded sections closed ("closed") and open ("open")
        self.screenshot = screenshot
        self.steps = steps  # what each of the visit's steps evaluated to, in order


_PROBE = """JSON.stringify({
  title: document.title,
  scripts: document.scripts.length,
  svgs: Array.from(document.querySelectorAll('svg')).map(s => {
    const box = s.getBoundingClientRect(); return [box.width, box.height]; }),
  bars: Array.from(document.querySelectorAll('svg rect')).filter(
    r => r.getBBox().width > 0).length,
  tables: document.querySelectorAll('table').length,
  resources: performance.getEntriesByType('resource').length,
  height: document.documentElement.scrollHeight,
})"""


# What sticks out at the right edge. An element past the viewport is allowed only inside
# an intended scroll box (a ``div.scroll`` that itself ends within the viewport): its
# content scrolls there, the page does not.
_OVERFLOW = """(() => {
  const edge = window.innerWidth + 0.5;
  const box = el => {  // the nearest intended scroll box that really scrolls
    const found = el.closest('div.scroll');
    return found && ['auto', 'scroll'].includes(getComputedStyle(found).overflowX)
      ? found : null;
  };
  const describe = el => el.tagName.toLowerCase() + (el.className && el.className.baseVal
    === undefined ? '.' + el.className : '') + ' right=' +
    Math.round(el.getBoundingClientRect().right);
  const out = [];
  for (const el of document.body.querySelectorAll('*')) {
    if (el.getBoundingClientRect().right <= edge) continue;
    if (!el.checkVisibility()) continue;  // inside a closed <details>: not rendered
    const scroller = el.parentElement && box(el.parentElement);
    if (scroller && scroller.getBoundingClientRect().right <= edge) continue;
    out.push(describe(el));
  }
  return {
    viewport: window.innerWidth,
    scrollWidth: document.documentElement.scrollWidth,
    bodyScrollWidth: document.body.scrollWidth,
    offenders: out.slice(0, 20),
    offenderCount: out.length,
    scrolling: Array.from(document.querySelectorAll('div.scroll')).filter(
      s => s.scrollWidth > s.clientWidth + 0.5).length,
    scrollingIn: Array.from(document.querySelectorAll('div.scroll')).filter(
      s => s.scrollWidth > s.clientWidth + 0.5).map(s => {
        const h = s.closest('details, section'); const t = h && h.querySelector('h2');
        return t ? t.textContent : ''; }),
  };
})()"""

_LAYOUT = f"""JSON.stringify((() => {{
  const first = document.body.firstElementChild;
  const closed = {_OVERFLOW};
  const folded = document.querySelectorAll('details:not([open])').length;
  document.querySelectorAll('details').forEach(d => {{ d.open = true; }});
  const open = {_OVERFLOW};
  return {{
    first: first ? {{tag: first.tagName.toLowerCase(), id: first.id,
                     cls: first.className, text: first.innerText}} : null,
    banners: document.querySelectorAll('#status').length,
    folded: folded, closed: closed, open: open,
  }};
}})())"""


def _launch(user_data: Path) -> tuple[subprocess.Popen[bytes], DevTools, Callable[[], None]]:
    assert CHROMIUM is not None
    to_browser_read, to_browser_write = os.pipe()
    from_browser_read, from_browser_write = os.pipe()

    def wire_pipes() -> None:  # in the child: commands on fd 3, replies on fd 4
        command = fcntl.fcntl(to_browser_read, fcntl.F_DUPFD, 10)
        reply = fcntl.fcntl(from_browser_write, fcntl.F_DUPFD, 10)
        os.dup2(command, 3)
        os.dup2(reply, 4)

    stderr = (user_data.parent / "chromium.stderr").open("wb")
    process = subprocess.Popen(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--disable-default-apps", "--disable-quic", "--disable-breakpad",
         "--mute-audio", "--hide-scrollbars",
         # Nothing leaves the machine: no name resolves, every connection is proxied to a
         # closed loopback port, loopback included.
         "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=socks5://127.0.0.1:9",
         "--proxy-bypass-list=<-loopback>",
         f"--user-data-dir={user_data}", "--remote-debugging-pipe", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
        preexec_fn=wire_pipes, close_fds=False,  # fds 3 and 4 must survive exec
        start_new_session=True,  # its renderer and zygote children share our new group
    )
    stderr.close()
    os.close(to_browser_read)
    os.close(from_browser_write)

    def close() -> None:
        os.close(to_browser_write)
        os.close(from_browser_read)
        try:
            process.wait(timeout=10)  # Browser.close makes it exit on its own
        except subprocess.TimeoutExpired:
            # Still unreaped, so the group id is still ours: end the whole group.
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    return process, DevTools(to_browser_write, from_browser_read), close


@pytest.fixture
def visit(tmp_path: Path) -> Iterator[Callable[..., PageVisit]]:
    closers: list[Callable[[], None]] = []

    def open_page(page: Path, steps: Sequence[str] = ()) -> PageVisit:
        """Load ``page``, evaluate each of ``steps`` (JSON-valued expressions: what a
        reader's clicks do), probe it, screenshot it, then measure its layout."""
        _, tools, close = _launch(tmp_path / f"profile-{len(closers)}")
        closers.append(close)
        target = tools.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = tools.call("Target.attachToTarget",
                             {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            tools.call(f"{domain}.enable", session=session)
        tools.call("Emulation.setDeviceMetricsOverride",
                   {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
                   session=session)
        tools.call("Page.navigate", {"url": page.as_uri()}, session=session)
        tools.wait_for("Page.loadEventFired", session)
        done = [json.loads(tools.call("Runtime.evaluate",
                                      {"expression": step, "returnByValue": True},
                                      session=session)["result"]["value"])
                for step in steps]
        probe = json.loads(tools.call("Runtime.evaluate",
                                      {"expression": _PROBE, "returnByValue": True},
                                      session=session)["result"]["value"])
        shot = base64.b64decode(tools.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
            session=session)["data"])
        # Measured from the test's side of the DevTools pipe (the page runs no script);
        # after the screenshot, since it opens every folded section.
        layout = json.loads(tools.call("Runtime.evaluate",
                                       {"expression": _LAYOUT, "returnByValue": True},
                                       session=session)["result"]["value"])
        events = tools.session_events(
            session, "Runtime.consoleAPICalled", "Runtime.exceptionThrown",
            "Log.entryAdded", "Network.requestWillBeSent")
        tools.call("Browser.close")
        return PageVisit(events, probe, layout, shot, done)

    yield open_page
    for close in closers:
        close()


def test_harness_detects_console_errors_exceptions_and_requests(
        tmp_path: Path, visit: Callable[[Path], PageVisit]) -> None:
    control = tmp_path / "control.html"
    control.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>control</title></head>"
        "<body><p>control</p><img src='http://127.0.0.1:9/pixel.png' alt=''>"
        "<script>console.error('control error'); missing_function();</script>"
        "</body></html>"
    )
    seen = visit(control)
    assert [m["type"] for m in seen.console] == ["error"]
    assert len(seen.exceptions) == 1
    assert "http://127.0.0.1:9/pixel.png" in seen.requests
    assert seen.probe["scripts"] == 1


def test_report_renders_offline_without_errors_or_requests(
        tmp_path: Path, visit: Callable[[Path], PageVisit],
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    plan, receipts = synthetic_run
    sized = [msgspec.structs.replace(r, checkpoint_tokens=1_000 + 100 * len(r.role),
                                     checkpoint_bytes=4_000 + 400 * len(r.role))
             if r.checkpoint_sha256 is not None else r for r in receipts]
    results = build_results(plan, sized, faux=True)
    page = tmp_path / "report.html"
    html = render_html(results)
    page.write_text(html, encoding="utf-8")
    seen = visit(page, [_FIRST_SCREEN])

    # The first screen (1,400 x 1,000) holds the answer: both scatters and the heatmap.
    (first,) = seen.steps
    assert first["scatters"] == 2 and first["heatmapRows"] == len(results.roles)
    assert all(bottom <= 1000 for bottom in first["bottoms"]), first
    assert seen.console == []
    assert seen.exceptions == []
    assert seen.log == []
    assert seen.requests == [page.as_uri()]  # the document itself, nothing else
    assert seen.probe["resources"] == 0
    assert seen.probe["scripts"] == 0
    assert seen.probe["title"] == "efold results: synthetic"
    # Every chart laid out with a real size (the first screen's scatters: size, and cost
    # where a cost per correct answer exists; the paired deltas), every table present.
    assert len(seen.probe["svgs"]) == html.count("<svg")
    assert len(seen.probe["svgs"]) >= 2
    assert all(width > 100 and height > 40 for width, height in seen.probe["svgs"])
    assert seen.probe["bars"] >= len(results.contrasts) - 1  # a zero delta draws no bar
    # The heatmap, the failures, fourteen summary tables (per repeat, versus native,
    # paired contrasts overall and per category, compression, tool use and latency
    # included: two repeats, a native role, a lookup role and sizes) and the per-slot one.
    assert seen.probe["tables"] == 17
    assert seen.screenshot.startswith(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "report.png").write_bytes(seen.screenshot)
    if shot_dir := os.environ.get("EFOLD_REPORT_SCREENSHOT_DIR"):
        Path(shot_dir, "report.png").write_bytes(seen.screenshot)


_FIRST_SCREEN = """JSON.stringify((() => {
  const parts = [...document.querySelectorAll('svg.scatter'),
                 document.querySelector('table.heatmap')];
  return {scatters: document.querySelectorAll('svg.scatter').length,
          heatmapRows: document.querySelectorAll('table.heatmap tbody tr').length,
          bottoms: parts.map(p => p.getBoundingClientRect().bottom)};
})())"""

_VISIBLE_ROWS = """JSON.stringify(Array.from(document.querySelectorAll(
  '#failures tbody tr')).filter(r => r.checkVisibility()).map(r => r.dataset.role))"""


def test_the_failures_filter_and_open_in_chromium_without_a_script(
        tmp_path: Path, visit: Callable[..., PageVisit],
        synthetic_run: tuple[Plan, list[Receipt]]) -> None:
    """A reader picks a role, then a kind, then opens a slot: the rows narrow by CSS alone
    (the page runs no script) and the slot's details say whether its answer was in view."""
    results = build_results(*synthetic_run, faux=True)
    failed = [s for s in results.slots if failure_kind(s) is not None]
    role = next(s.role for s in failed if s.status == "completed")
    key = role.encode().hex()
    wrong = b"wrong".hex()
    page = tmp_path / "report.html"
    page.write_text(render_html(results), encoding="utf-8")
    seen = visit(page, [
        _VISIBLE_ROWS,
        f"(document.querySelector('label[for=ff-role-{key}]').click(), {_VISIBLE_ROWS})",
        f"(document.querySelector('label[for=ff-kind-{wrong}]').click(), {_VISIBLE_ROWS})",
        """(() => { const row = Array.from(document.querySelectorAll('#failures tbody tr'))
             .find(r => r.checkVisibility());
           row.querySelector('summary').click();
           const open = row.querySelector('details').open;
           const box = row.querySelector('dl').getBoundingClientRect();
           return JSON.stringify({open, text: row.querySelector('dl').innerText,
                                  height: box.height}); })()""",
    ])
    assert seen.console == [] and seen.exceptions == [] and seen.probe["scripts"] == 0
    everything, by_role, by_role_and_kind, opened = seen.steps
    assert len(everything) == len(failed) > 0
    assert by_role == [key] * sum(s.role == role for s in failed)
    wrong_here = [s for s in failed if s.role == role and failure_kind(s) == "wrong"]
    assert by_role_and_kind == [key] * len(wrong_here) and 0 < len(wrong_here) < len(everything)
    assert opened["open"] is True and opened["height"] > 20
    assert "answer in the checkpoint" in opened["text"] and "outcome" in opened["text"]
    (tmp_path / "failures.png").write_bytes(seen.screenshot)
    assert seen.screenshot.startswith(b"\x89PNG\r\n\x1a\n")


def _fits(layout: dict[str, Any]) -> bool:
    return all(layout[state]["scrollWidth"] <= 1400 and layout[state]["offenderCount"] == 0
               for state in ("closed", "open"))


def test_harness_detects_horizontal_overflow(
        tmp_path: Path, visit: Callable[[Path], PageVisit]) -> None:
    wide = "<div style='width:2000px;height:10px;background:#c00'></div>"
    pages = {
        "loose": wide,  # the page scrolls sideways
        "boxed": f"<div class='scroll' style='overflow-x:auto'>{wide}</div>",  # it does not
        # A box named scroll that does not scroll exempts nothing.
        "unboxed": f"<div class='scroll'>{wide}</div>",
        "folded": f"<details><summary>more</summary>{wide}</details>",  # only when open
    }
    seen = {}
    for name, body in pages.items():
        page = tmp_path / f"{name}.html"
        page.write_text("<!doctype html><html><head><meta charset='utf-8'><title>control"
                        f"</title></head><body><p id='status'>banner</p>{body}</body></html>")
        seen[name] = visit(page).layout
    loose = seen["loose"]["closed"]
    assert loose["scrollWidth"] > 1400 and loose["offenderCount"] >= 1
    assert any(o.startswith("div") for o in loose["offenders"])
    assert _fits(seen["boxed"]) and seen["boxed"]["open"]["scrolling"] == 1
    assert seen["unboxed"]["closed"]["offenderCount"] >= 1 and not _fits(seen["unboxed"])
    folded = seen["folded"]
    assert folded["folded"] == 1 and folded["closed"]["offenderCount"] == 0, folded
    assert folded["open"]["scrollWidth"] > 1400 and folded["open"]["offenderCount"] >= 1
    assert not _fits(folded)
    assert seen["loose"]["first"]["id"] == "status"


# A large run as a real campaign could make one: over a thousand slots, ids near their
# length limit, five roles and every corpus category (or, beyond any campaign, thirteen
# long-named ones), three repeats, lookups, latencies of many seconds, and the run's
# times and models.
_LONG_TRACES = tuple(
    f"{family}-fictional-logistics-migration-{n:02d}-northern-region-warehouse-"
    "consolidation-phase-two-with-an-unusually-long-opaque-identifier"
    for n, family in enumerate(("harbor", "kiln", "orchard", "ferry", "quarry", "meadow")))
_LONG_ROLES = ("native", "cold-rebuild", "compaction-summariser-with-a-long-role-name",
               "store-backed-retained-history-lookup-role", "pack")


def _widened(plan: Plan, receipts: list[Receipt], many: bool) -> tuple[Plan, list[Receipt]]:
    """Every corpus category (``many``: every probe its own long-named category, one more
    than the corpus has; the per-category tables grow a column each), lookups on the
    store-backed role (a tool-use table) and slot times from milliseconds to minutes."""
    corpus = [c.value for c in Category]

    def category(probe_id: str, base: str) -> str:
        n = int(probe_id[-2:])
        return f"{base}-subset-{n:02d}" if many else corpus[n % len(corpus)]

    plan = msgspec.structs.replace(plan, slots=[
        msgspec.structs.replace(s, category=category(s.probe_id, s.category))
        for s in plan.slots])
    lookup_role = _LONG_ROLES[3]
    widened = []
    for n, r in enumerate(receipts):
        extra: dict[str, Any] = {"category": category(r.probe_id, r.category),
                                 "elapsed_ms": (n * 7_919) % 200_000}
        size = 400_000 // (1 + _LONG_ROLES.index(r.role)) + r.repeat
        if r.checkpoint_sha256 is not None:
            extra.update(checkpoint_tokens=size, checkpoint_bytes=4 * size + 3)
        if r.role == lookup_role and r.status.value == "completed" and n % 2:
            extra.update(lookup_calls=n % 9 + 1, lookup_bytes=n * 1_013)
        widened.append(msgspec.structs.replace(r, **extra))
    return plan, widened


# One probe more than the corpus has categories: in the ``many`` run, each probe its own.
_PROBES = len(Category) + 1


@pytest.mark.parametrize("many", [False, True], ids=["corpus-categories", "more-categories"])
def test_a_large_report_fits_1400_px_with_the_banner_first(
        tmp_path: Path, visit: Callable[[Path], PageVisit],
        run_factory: Callable[..., tuple[Plan, list[Receipt]]], many: bool) -> None:
    plan, receipts = _widened(*run_factory(5, roles=_LONG_ROLES, traces=_LONG_TRACES,
                                           probes=_PROBES, repeats=3), many)
    assert len(plan.slots) == len(_LONG_ROLES) * len(_LONG_TRACES) * _PROBES * 3
    assert max(len(t) for t in _LONG_TRACES) > 120
    facts = RunFacts(sticky_stop=None, stops=[StopFact(Code.NOT_ADMITTED_CAP.value, False)],
                     launches=[], containments=[], in_flight=[], controller="released",
                     started_ns=1_700_000_000_000_000_000,
                     ended_ns=1_700_000_000_000_000_000 + 5_025_000_000_000)
    results = build_results(plan, receipts, faux=True, run_facts=facts,
                            reader="faux/faux-extractive-v1",
                            summarisers={_LONG_ROLES[2]: "openai/gpt-5-mini"})
    assert len(results.categories) == (_PROBES if many else len(Category))
    assert len(results.versus_native) == 4
    assert [r.role for r in results.results if r.tool_use] == [_LONG_ROLES[3], "pack"]
    html = render_html(results)
    for title in ("Delta versus native", "Tool use (history lookups)", "Latency",
                  "Accuracy per repeat", "Accuracy and compression"):
        assert f"<h2>{title}</h2>" in html
    assert "duration</dt><dd>1 h 23 min 45 s</dd>" in html and " s</td>" in html
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    seen = visit(page)

    assert seen.console == [] and seen.exceptions == [] and seen.log == []
    assert seen.requests == [page.as_uri()]
    layout = seen.layout
    # The banner: the body's first element, once, saying the verdict in words.
    assert layout["banners"] == 1
    assert layout["first"]["id"] == "status" and "status-" in layout["first"]["cls"]
    banner_text = layout["first"]["text"]
    assert results.status is not None
    assert f"{results.status.verdict.upper()}" in banner_text
    # Nothing past the right edge, with the folded sections closed and open.
    assert layout["folded"] >= 1  # the per-slot table, at least
    for state in ("closed", "open"):
        assert layout[state]["viewport"] == 1400
        assert layout[state]["scrollWidth"] <= 1400, layout[state]
        assert layout[state]["offenders"] == [], layout[state]
    assert _fits(layout)
    # Better than allowed: every table fits the page, ids wrapping after their
    # separators, so no scroll box has anything to scroll; beyond the corpus's
    # categories, the table of deltas versus native may scroll in its own box, folded.
    versus = "Delta versus native"
    folded = f'<details class="table"><summary><h2>{versus}</h2>' in html
    assert folded is many
    assert set(layout["open"]["scrollingIn"]) <= ({versus} if many else set()), layout["open"]
    (tmp_path / "large.png").write_bytes(seen.screenshot)
    if shot_dir := os.environ.get("EFOLD_REPORT_SCREENSHOT_DIR"):
        Path(shot_dir, "report-large.png").write_bytes(seen.screenshot)
