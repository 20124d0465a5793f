"""The dashboard's web server: the page, its files, and a push channel (Server-Sent Events).

Standard library only (``http.server``): one thread per connection, so a page that keeps
its event stream open never holds up another request.

Security:

* it listens on 127.0.0.1 unless told otherwise (``--dashboard-bind``);
* every URL must carry the job's random token (``?token=...``, :func:`secrets.token_urlsafe`,
  compared in constant time); a request without it, or with another, gets ``403`` before
  anything else is looked at, whatever its method or path;
* it only reads: ``GET`` (and ``HEAD``) are served, every other method is refused
  (``405`` with the token, ``403`` without); no URL changes the job;
* answers carry ``Cache-Control: no-store``, ``Referrer-Policy: no-referrer`` (the token
  never leaves in a Referer header), ``X-Content-Type-Options: nosniff`` and a
  Content-Security-Policy that allows only the page's own files and connections;
* at most :data:`MAX_STREAMS` event streams at once.

Routes (all ``?token=T``): ``/`` the page, ``/static/NAME`` its files (shipped in the
package, no CDN), ``/events`` the stream of view documents, ``/state`` the latest view
document, ``/meta`` what the page serves (``{"mode": "live"}`` or a replay's length),
``/frame?t=SECONDS`` one moment of a replay.
"""
from __future__ import annotations

import hmac
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Optional, Tuple
from urllib.parse import parse_qs, urlsplit

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
#: the page's files, by the name in its URL: (file, content type)
STATIC_FILES = {
    "app.js": ("app.js", "text/javascript; charset=utf-8"),
    "style.css": ("style.css", "text/css; charset=utf-8"),
}
INDEX = "index.html"
#: event streams served at once (more are refused with 503)
MAX_STREAMS = 32
#: a comment line on an idle event stream this often, so that a closed page is noticed
KEEPALIVE_S = 10.0
SECURITY_HEADERS = (
    ("Cache-Control", "no-store"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy",
     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"),
)


class Hub:
    """The latest view document, and the streams waiting for the next one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.version = 0
        self.data = b"{}"
        self.closed = False

    def publish(self, data: bytes) -> None:
        with self._cond:
            self.version += 1
            self.data = data
            self._cond.notify_all()

    def close(self) -> None:
        """No more documents: streams send what they have not sent yet, then end."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def next(self, seen: int, timeout: float) -> Tuple[int, bytes, bool]:
        """(version, document, closed) once a version newer than ``seen`` is there, the hub
        is closed, or ``timeout`` seconds passed."""
        with self._cond:
            if self.version == seen and not self.closed:
                self._cond.wait(timeout)
            return self.version, self.data, self.closed


class DashboardServer(ThreadingHTTPServer):
    """One dashboard: ``source.meta()`` and ``source.frame(t)`` for replays, ``hub`` for
    the live documents."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, bind: str, port: int, token: str, hub: Hub,
                 meta: Callable[[], Dict[str, Any]],
                 frame: Optional[Callable[[float], Dict[str, Any]]] = None,
                 refresh: Optional[Callable[[], None]] = None) -> None:
        self.address_family = socket.AF_INET6 if ":" in bind else socket.AF_INET
        self.token = token
        self.hub = hub
        self.meta = meta
        self.frame = frame
        #: brings ``hub`` up to date before ``/state`` answers (the live documents are only
        #: made while a page watches)
        self.refresh = refresh
        self.refused = 0               # requests refused for a missing or wrong token
        self.streams = 0
        self._streams_lock = threading.Lock()
        self.stream_threads: set = set()
        super().__init__((bind, port), _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A page that went away mid-answer is no news for the job's output."""

    def authorized(self, token: str) -> bool:
        return hmac.compare_digest(token.encode(), self.token.encode())

    def url(self, host: str) -> str:
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self.port}/?token={self.token}"

    def serve_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2},
                             name="minimpi-dashboard-http", daemon=True)
        t.start()
        return t

    def close(self, drain: float = 1.0) -> None:
        """Close the hub, give the streams up to ``drain`` seconds to send the last document,
        then stop serving."""
        self.hub.close()
        deadline = time.monotonic() + drain
        for t in list(self.stream_threads):
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "minimpi-dashboard"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:   # the job's output stays the job's
        pass

    # -- answers ---------------------------------------------------------------------------
    def _answer(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8",
                extra: Tuple[Tuple[str, str], ...] = ()) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS + extra:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, doc: Any) -> None:
        self._answer(200, json.dumps(doc, separators=(",", ":")).encode(),
                     "application/json; charset=utf-8")

    def _checked(self) -> Optional[Tuple[str, Dict[str, list]]]:
        """(path, query) of an authorized request; None after answering 403."""
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        token = (query.get("token") or [""])[0]
        if not token or not self.server.authorized(token):
            self.server.refused += 1
            self._answer(403, b"403 Forbidden: this minimpi dashboard needs the token of its "
                              b"URL (as printed by minimpi run --dashboard)\n")
            return None
        return url.path, query

    # -- methods -----------------------------------------------------------------------------
    def do_GET(self) -> None:
        checked = self._checked()
        if checked is None:
            return
        path, query = checked
        try:
            if path in ("/", "/index.html"):
                self._index()
            elif path.startswith("/static/"):
                self._static(path[len("/static/"):])
            elif path == "/events" and self.command == "GET":
                self._events()
            elif path == "/events":
                self._answer(200, b"", "text/event-stream")
            elif path == "/state":
                if self.server.refresh is not None:
                    self.server.refresh()
                self._answer(200, self.server.hub.data, "application/json; charset=utf-8")
            elif path == "/meta":
                self._json(self.server.meta())
            elif path == "/frame" and self.server.frame is not None:
                try:
                    t = float((query.get("t") or ["0"])[0])
                except ValueError:
                    self._answer(400, b"400 Bad Request: t must be a number of seconds\n")
                    return
                self._json(self.server.frame(t))
            else:
                self._answer(404, b"404 Not Found\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    do_HEAD = do_GET

    def _refuse_method(self) -> None:
        if self._checked() is None:
            return
        self._answer(405, b"405 Method Not Allowed: the dashboard only shows the job\n",
                     extra=(("Allow", "GET, HEAD"),))

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_CONNECT = do_TRACE = _refuse_method

    def _index(self) -> None:
        with open(os.path.join(STATIC_DIR, INDEX), "rb") as f:
            page = f.read()
        # the token is URL-safe base64: nothing in it needs escaping in an attribute
        page = page.replace(b"{{TOKEN}}", self.server.token.encode())
        self._answer(200, page, "text/html; charset=utf-8")

    def _static(self, name: str) -> None:
        entry = STATIC_FILES.get(name)
        if entry is None:
            self._answer(404, b"404 Not Found\n")
            return
        with open(os.path.join(STATIC_DIR, entry[0]), "rb") as f:
            self._answer(200, f.read(), entry[1])

    def _events(self) -> None:
        server = self.server
        with server._streams_lock:
            if server.streams >= MAX_STREAMS:
                self._answer(503, b"503: too many open dashboard pages\n")
                return
            server.streams += 1
            server.stream_threads.add(threading.current_thread())
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            for name, value in SECURITY_HEADERS:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(b"retry: 1000\n\n")
            if server.refresh is not None:
                server.refresh()           # the first document a page gets is a fresh one
            seen = 0
            while True:
                version, data, closed = server.hub.next(seen, KEEPALIVE_S)
                if version != seen:
                    seen = version
                    self.wfile.write(b"data: " + data + b"\n\n")
                elif not closed:
                    self.wfile.write(b": keepalive\n\n")
                self.wfile.flush()
                if closed:
                    self.wfile.write(b"event: end\ndata: {}\n\n")
                    self.wfile.flush()
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            return
        finally:
            with server._streams_lock:
                server.streams -= 1
                server.stream_threads.discard(threading.current_thread())
