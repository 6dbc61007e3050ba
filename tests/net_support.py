"""Real HTTP servers on loopback for the network tools' tests: routes are plain functions, and
every request that arrived is recorded so tests assert what the server really saw."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    status: int = 200
    body: bytes | str = b""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "text/plain; charset=utf-8"
    # Write the body in pieces with a callback between them (slow or endless bodies).
    chunks: Callable[[Any], None] | None = None


Route = Callable[[Seen], Reply]


class LoopbackServer:
    """A threaded HTTP/1.1 server on 127.0.0.1 with a free port."""

    def __init__(self, routes: dict[str, Route] | None = None, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, Route] = dict(routes or {})
        self.seen: list[Seen] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet test output
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                seen = Seen(self.command, parts.path, parse_qs(parts.query),
                            {k.lower(): v for k, v in self.headers.items()}, body)
                outer.seen.append(seen)
                route = outer.routes.get(parts.path)
                reply = route(seen) if route else Reply(404, "no such page")
                data = reply.body.encode() if isinstance(reply.body, str) else reply.body
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.chunks is not None:
                    self.send_header("Connection", "close")
                    self.end_headers()
                    with contextlib.suppress(OSError):
                        reply.chunks(self.wfile)
                    self.close_connection = True
                    return
                if "Content-Length" not in reply.headers:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.host = host
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def hostport(self) -> str:
        return f"{self.host}:{self.port}"

    def url(self, path: str = "/") -> str:
        return f"http://{self.hostport}{path}"

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def serving(routes: dict[str, Route]) -> Iterator[LoopbackServer]:
    with LoopbackServer(routes) as server:
        yield server


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")
