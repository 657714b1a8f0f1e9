"""A scripted loopback HTTP peer in a thread, for tests that talk real HTTP to one.

``serve(handler)`` starts a ``ThreadingHTTPServer`` on 127.0.0.1 (a free port), yields
its base URL (``http://127.0.0.1:PORT/v1``) and always shuts the server down, closes
its socket and joins its thread. Handler threads are daemons: a peer that holds a
connection open on purpose never blocks the shutdown.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
