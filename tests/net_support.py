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

TESTS_DIR = Path(__file__).resolve().parent
FIXTURES = TESTS_DIR / "fixtures"


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    peer: tuple = ()  # the client's (address, port)


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
                            {k.lower(): v for k, v in self.headers.items()}, body,
                            tuple(self.client_address))
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

        server_class = ThreadingHTTPServer
        if ":" in host:
            class V6Server(ThreadingHTTPServer):
                address_family = __import__("socket").AF_INET6

            server_class = V6Server
        self.httpd = server_class((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.host = host
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def hostport(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

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


class MitmProxy:
    """An HTTP proxy on loopback that answers CONNECT itself: it terminates TLS with a
    certificate from a test CA (trustme) and serves `handler(method, path, headers, body)`
    as if it were the real site. The seam for clients we cannot point at a base URL (ddgs):
    give them `proxy=proxy.url` and `verify=proxy.ca_path`."""

    def __init__(self, hosts: list[str], handler: Callable[[str, str, dict[str, str], bytes],
                                                             tuple[int, str, bytes]],
                 ca_dir: Path) -> None:
        import socket
        import ssl

        import trustme

        self.ca = trustme.CA()
        self.ca_path = str(ca_dir / "test-ca.pem")
        self.ca.cert_pem.write_to_path(self.ca_path)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert(*hosts).configure_cert(self.context)
        self.context.set_alpn_protocols(["http/1.1"])
        self.handler = handler
        self.connects: list[str] = []
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> MitmProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self.sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_head(stream: Any) -> bytes:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = stream.recv(4096)
            if not chunk:
                break
            data += chunk
        return data

    def _handle(self, conn: Any) -> None:
        with contextlib.suppress(OSError), conn:
            head = self._read_head(conn)
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            method, target, _ = (line.split(" ") + ["", "", ""])[:3]
            if method != "CONNECT":
                conn.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            self.connects.append(target)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            with self.context.wrap_socket(conn, server_side=True) as tls:
                self._exchange(tls)

    def _exchange(self, tls: Any) -> None:
        with contextlib.suppress(OSError):
            while True:
                data = self._read_head(tls)
                if not data:
                    return
                head_part, _, rest = data.partition(b"\r\n\r\n")
                lines = head_part.decode("latin-1").split("\r\n")
                req_method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (h.partition(":") for h in lines[1:])}
                length = int(headers.get("content-length") or 0)
                while len(rest) < length:
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
                self.requests.append((req_method, path, headers, rest[:length]))
                status, ctype, body = self.handler(req_method, path, headers, rest[:length])
                tls.sendall(f"HTTP/1.1 {status} OK\r\nContent-Type: {ctype}\r\n"
                            f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


class SmtpReceiver:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 with a port chosen by the OS; the messages
    it accepted are in `messages` as (mail_from, rcpt_tos, parsed message), parsed with
    `policy` (email's default, compat32: email.message.Message). With `hold` set it records
    a message, then holds its 250 back until `release` is set (or it is closed)."""

    def __init__(self, policy: Any = None) -> None:
        self.messages: list[tuple[str, list[str], Any]] = []
        self.port = 0
        self.policy = policy
        self.hold = threading.Event()
        self.release = threading.Event()
        self._cond = threading.Condition()
        self._loop: Any = None
        self._server: Any = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        import asyncio
        import email

        options = {} if self.policy is None else {"policy": self.policy}
        parsed = email.message_from_bytes(envelope.original_content, **options)
        with self._cond:
            self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), parsed))
            self._cond.notify_all()
        if self.hold.is_set():
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 60)
        return "250 OK"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[tuple[str, list[str], Any]]:
        """The messages, once there are at least `count` (an assertion error after `timeout`)."""
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.messages) >= count, timeout), (
                f"{len(self.messages)} messages received, expected {count}")
            return list(self.messages)

    def _run(self) -> None:
        import asyncio

        from aiosmtpd.smtp import SMTP

        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(
            self._loop.create_server(lambda: SMTP(self), "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        self._server.close()
        self._loop.run_until_complete(self._server.wait_closed())
        self._loop.close()

    def __enter__(self) -> SmtpReceiver:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release.set()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def serving_tls(routes: dict[str, Route], hostname: str, ca_dir: Path) -> Iterator[tuple[Any, str]]:
    """A LoopbackServer speaking HTTPS with a certificate for `hostname` from a test CA;
    yields (server, path of the CA's PEM file)."""
    import ssl

    import trustme

    ca = trustme.CA()
    ca_path = ca_dir / "tls-ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(hostname).configure_cert(context)
    server = LoopbackServer(routes)
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    with server:
        yield server, str(ca_path)
