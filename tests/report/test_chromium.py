"""report.html in a real headless Chromium: it renders, logs nothing, requests nothing.

The browser is driven over the DevTools protocol on ``--remote-debugging-pipe`` (fd 3
in, fd 4 out, NUL-separated JSON), so the test sees exactly what the page did: every
console message, uncaught exception, log entry and network request of the page's own
target. Chromium's own background traffic is made impossible, not just ignored: every
host name resolves to nothing and every connection goes to a dead loopback proxy.

A control page with a console error, an exception and a request proves the harness
detects all three, so a clean result for the report means something.

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from efold.protocol.records import Plan, Receipt
from efold.report import build_results, render_html

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
                 screenshot: bytes) -> None:
        self.console = [e["params"] for e in events if e["method"] == "Runtime.consoleAPICalled"]
        self.exceptions = [e["params"] for e in events
                           if e["method"] == "Runtime.exceptionThrown"]
        self.log = [e["params"]["entry"] for e in events if e["method"] == "Log.entryAdded"]
        self.requests = [e["params"]["request"]["url"] for e in events
                         if e["method"] == "Network.requestWillBeSent"]
        self.probe = probe
        self.screenshot = screenshot


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
def visit(tmp_path: Path) -> Iterator[Callable[[Path], PageVisit]]:
    closers: list[Callable[[], None]] = []

    def open_page(page: Path) -> PageVisit:
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
        probe = json.loads(tools.call("Runtime.evaluate",
                                      {"expression": _PROBE, "returnByValue": True},
                                      session=session)["result"]["value"])
        shot = base64.b64decode(tools.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
            session=session)["data"])
        events = tools.session_events(
            session, "Runtime.consoleAPICalled", "Runtime.exceptionThrown",
            "Log.entryAdded", "Network.requestWillBeSent")
        tools.call("Browser.close")
        return PageVisit(events, probe, shot)

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
    results = build_results(*synthetic_run, faux=True)
    page = tmp_path / "report.html"
    page.write_text(render_html(results), encoding="utf-8")
    seen = visit(page)

    assert seen.console == []
    assert seen.exceptions == []
    assert seen.log == []
    assert seen.requests == [page.as_uri()]  # the document itself, nothing else
    assert seen.probe["resources"] == 0
    assert seen.probe["scripts"] == 0
    assert seen.probe["title"] == "efold results: synthetic"
    # Every chart laid out with a real size, bars drawn, every table present.
    assert len(seen.probe["svgs"]) == len(results.categories) + 2
    assert all(width > 100 and height > 40 for width, height in seen.probe["svgs"])
    assert seen.probe["bars"] > 2 * len(results.roles)
    assert seen.probe["tables"] == 8
    assert seen.screenshot.startswith(b"\x89PNG\r\n\x1a\n")
    (tmp_path / "report.png").write_bytes(seen.screenshot)
    if shot_dir := os.environ.get("EFOLD_REPORT_SCREENSHOT_DIR"):
        Path(shot_dir, "report.png").write_bytes(seen.screenshot)
