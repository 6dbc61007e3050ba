"""A sandboxed command's only way out: an HTTP proxy in jarvis, to the hosts listed for it.

An MCP server with `network = ["api.github.com", ...]` runs in a network namespace of its own
whose only interface is its loopback: it has no route anywhere, so no TCP or UDP packet of its
own leaves it (and Landlock allows it TCP connections to one port only, the proxy's). Before
the server runs, the sandbox's shim (exec_shim.py) makes a listening TCP socket on
127.0.0.1:PROXY_PORT inside that namespace and hands it to jarvis over a unix socket mounted
in the sandbox (SCM_RIGHTS). jarvis accepts on it: every connection the server opens to
HTTPS_PROXY / HTTP_PROXY comes to this module, which reads one request head and

  - `CONNECT host:port` (HTTPS and anything tunnelled): a tunnel, TLS end to end;
  - `GET http://host[:port]/path ...` (plain HTTP through a proxy): the request, forwarded;

only to a host and port the list names, through the rules of http_request (security/net.py):
the name resolved once, in jarvis, every address it resolves to public (no loopback, private,
link-local/metadata or reserved address in any spelling), the connection made to a checked
address (pinned), never to a second lookup's. Anything else gets a 4xx answer saying why.

The list: `host` (ports 443 and 80), `host:port` (that port only), `*.domain` (its subdomains,
ports 443 and 80; `*.domain:port`), or an IP address (`203.0.113.7`, `[2001:db8::1]:8443`):
an address written in the list is reached as written, a private or loopback one included,
because the person named it (as http_request's allowed_hosts). A *name* is never trusted to
resolve somewhere private: DNS is not the person's word.

Bounds: a request head is at most MAX_HEAD bytes and must arrive within HEAD_TIMEOUT seconds;
at most MAX_CONNECTIONS at once per server (more are answered 503); a tunnel idle for
IDLE_TIMEOUT seconds is closed. One thread per connection, all ended by `close()`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import re
import select
import shutil
import socket
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

PROXY_HOST, PROXY_PORT = "127.0.0.1", 3128  # inside the sandbox's own network namespace
MAX_HEAD = 8192
HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
RESOLVE_TIMEOUT = 10.0
IDLE_TIMEOUT = 300.0
SEND_TIMEOUT = 60.0
MAX_CONNECTIONS = 32
DEFAULT_PORTS = (443, 80)
HANDOFF = b"jarvis-egress-listener"
_NAME = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")

log = logging.getLogger(__name__)


def _resolver(host: str, port: int) -> list[str]:
    from jarvis.security.net import default_resolver

    return default_resolver(host, port)


# The resolver every proxy asks, looked up at each connection: the tests' seam for names
# that resolve to loopback or change their answer (there is no DNS server to rig here).
RESOLVER: Callable[[str, int], list[str]] = _resolver


class EntryError(ValueError):
    """A `network` entry that names no host (the message says which and why)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One allowed destination: a name (or `*.suffix`) or an IP address, and its ports."""

    host: str
    ports: tuple[int, ...]
    wildcard: bool = False
    address: bool = False

    def matches(self, host: str, port: int) -> bool:
        if port not in self.ports:
            return False
        if self.wildcard:
            return host.endswith("." + self.host)
        return host == self.host


def parse_entry(text: str) -> Entry:
    """`host`, `host:port`, `*.domain[:port]`, `1.2.3.4[:port]`, `[v6][:port]` -> Entry."""
    raw = str(text).strip().lower().rstrip(".") if isinstance(text, str) else ""
    if not raw:
        raise EntryError(f"network entry {text!r} is empty")
    if "/" in raw or "@" in raw or " " in raw:
        raise EntryError(f"network entry {text!r} is not a host name (write the host alone, "
                         f"without scheme, path or user, e.g. \"api.github.com\")")
    port: int | None = None
    host = raw
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        if rest:
            if not rest.startswith(":") or not rest[1:].isdigit():
                raise EntryError(f"network entry {text!r}: write an IPv6 address as [addr] or "
                                 f"[addr]:port")
            port = int(rest[1:])
    elif raw.count(":") == 1:
        host, _, digits = raw.partition(":")
        if not digits.isdigit():
            raise EntryError(f"network entry {text!r}: the port must be a number")
        port = int(digits)
    if port is not None and not 1 <= port <= 65535:
        raise EntryError(f"network entry {text!r}: port {port} is not a TCP port (1-65535)")
    ports = (port,) if port is not None else DEFAULT_PORTS
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if getattr(address, "scope_id", None):
            raise EntryError(f"network entry {text!r}: no IPv6 zones")
        return Entry(str(address), ports, address=True)
    from jarvis.security.net import legacy_ipv4

    if legacy_ipv4(host) is not None or not host.isascii() or not _NAME.fullmatch(host):
        raise EntryError(f"network entry {text!r} is not a host name, `host:port`, "
                         f"`*.domain` or an IP address (no scheme, path or spaces; a name in "
                         f"Unicode in its xn-- form; an IPv4 address as a dotted quad)")
    wildcard = host.startswith("*.")
    return Entry(host[2:] if wildcard else host, ports, wildcard=wildcard)


class Refused(Exception):
    """A request the proxy does not carry: (HTTP status, reason shown to the server)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


_STATUS = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed",
           408: "Request Timeout", 431: "Request Header Fields Too Large", 502: "Bad Gateway",
           503: "Service Unavailable", 504: "Gateway Timeout"}


class EgressProxy:
    """The proxy of one sandboxed server. Made before the server starts (it listens for the
    shim's hand-off on `socket_path`), closed when the server's connection ends."""

    def __init__(self, name: str, entries: list[str] | tuple[str, ...], *,
                 owner: tuple[int, int] | None = None, listener: socket.socket | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 head_timeout: float = HEAD_TIMEOUT) -> None:
        """`owner`: the host uid/gid the sandbox runs as (a root jarvis's [sandbox] uid), to
        whom the hand-off socket is given. `listener`: accept on this socket of the caller's
        instead of waiting for the shim's hand-off (the proxy's rules without a sandbox)."""
        self.name = name
        self.entries = [parse_entry(e) for e in entries]
        self.connect_timeout = connect_timeout
        self.head_timeout = head_timeout
        self.refusals: deque[str] = deque(maxlen=100)
        self.carried: deque[str] = deque(maxlen=100)
        self._closed = False
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._wake_r, self._wake_w = os.pipe()
        self.folder = self.socket_path = None
        self._handoff: socket.socket | None = None
        self._listener = listener
        if listener is None:
            self.folder = tempfile.mkdtemp(prefix="jarvis-egress-")  # 0700: jarvis's alone
            self.socket_path = os.path.join(self.folder, "egress.sock")
            self._handoff = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._handoff.bind(self.socket_path)
            self._handoff.listen(1)
            if owner is not None:
                os.chown(self.socket_path, *owner)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"jarvis-egress-{name}")
        self._thread.start()

    # --- life -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop accepting, end every tunnel, remove the hand-off socket. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            sockets = list(self._open)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)
        with self._lock:
            threads = list(self._threads)
        for thread in threads:  # each ends once its sockets are shut down
            thread.join(5)
        for sock in (self._handoff, self._listener):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def _wait(self, sock: socket.socket) -> bool:
        """True when `sock` can accept, False once the proxy is closing. poll, not select:
        jarvis serve may hold descriptors past select's 1024."""
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        ready = dict(poller.poll())
        return self._wake_r not in ready and not self._closed

    def _run(self) -> None:
        try:
            if self._listener is None:
                self._listener = self._take_listener()
            if self._listener is not None:
                self._accept_loop(self._listener)
        except OSError as exc:
            if not self._closed:
                log.warning("MCP server %r: the network proxy stopped: %s", self.name, exc)

    def _take_listener(self) -> socket.socket | None:
        """The shim's listening socket (made inside the sandbox's network namespace)."""
        assert self._handoff is not None and self.socket_path is not None
        while self._wait(self._handoff):
            conn, _ = self._handoff.accept()
            with conn:
                conn.settimeout(5)
                try:
                    message, fds, _, _ = socket.recv_fds(conn, 64, 1)
                except OSError:
                    continue
                if message != HANDOFF or len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    continue
                listener = socket.socket(fileno=fds[0])
                if (listener.family != socket.AF_INET or listener.type != socket.SOCK_STREAM
                        or not listener.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)):
                    listener.close()
                    continue
                with contextlib.suppress(OSError):
                    conn.sendall(b"ok")
            # One hand-off per sandbox: nothing may hand jarvis another listener later.
            self._handoff.close()
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)
            return listener
        return None

    def _accept_loop(self, listener: socket.socket) -> None:
        while self._wait(listener):
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            if not self._slots.acquire(blocking=False):
                with contextlib.suppress(OSError):
                    client.settimeout(1)
                    _answer(client, 503, f"more than {MAX_CONNECTIONS} connections at once")
                client.close()
                continue
            with self._lock:
                if self._closed:
                    client.close()
                    self._slots.release()
                    return
                self._open.add(client)
                thread = threading.Thread(target=self._serve, args=(client,), daemon=True,
                                          name=f"jarvis-egress-{self.name}-conn")
                self._threads.add(thread)
            thread.start()

    # --- one connection ---------------------------------------------------------------------
    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            head, rest = self._read_head(client)
            method, target, headers = _parse_head(head)
            if method == "CONNECT":
                host, port = _split_target(target, None)
                upstream = self._connect(host, port)
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                self.carried.append(f"CONNECT {host}:{port}")
            else:
                if not target.lower().startswith("http://"):
                    raise Refused(400, "only CONNECT (for https) and absolute http:// requests "
                                       "go through this proxy")
                authority, _, path = target[7:].partition("/")
                host, port = _split_target(authority, 80)
                upstream = self._connect(host, port)
                upstream.sendall(_origin_form(method, "/" + path, headers))
                self.carried.append(f"{method} http://{host}:{port}")
            if rest:
                upstream.sendall(rest)
            _relay(client, upstream)
        except Refused as refused:
            self.refusals.append(refused.reason)
            log.info("MCP server %r: network request refused: %s", self.name, refused.reason)
            with contextlib.suppress(OSError):
                _answer(client, refused.status, refused.reason)
                _linger(client)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
            with self._lock:
                self._open.discard(client)
                if upstream is not None:
                    self._open.discard(upstream)
                self._threads.discard(threading.current_thread())
            self._slots.release()

    def _read_head(self, client: socket.socket) -> tuple[bytes, bytes]:
        """The request head (up to the blank line) and what came after it, within
        head_timeout seconds in all and MAX_HEAD bytes."""
        deadline = time.monotonic() + self.head_timeout
        data = b""
        while b"\r\n\r\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Refused(408, f"the request head did not arrive within "
                                   f"{self.head_timeout:g} s")
            client.settimeout(left)
            try:
                chunk = client.recv(MAX_HEAD + 4 - len(data))
            except TimeoutError:
                continue
            if not chunk:
                raise OSError("closed before the request head")
            data += chunk
            if b"\r\n\r\n" not in data and len(data) > MAX_HEAD:
                raise Refused(431, f"the request head is over {MAX_HEAD} bytes")
        head, _, rest = data.partition(b"\r\n\r\n")
        if len(head) > MAX_HEAD:
            raise Refused(431, f"the request head is over {MAX_HEAD} bytes")
        return head, rest

    def check(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for host:port, or Refused saying why not."""
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        listed = next((e for e in self.entries if e.matches(host, port)), None)
        if listed is None:
            same = [e for e in self.entries if e.matches(host, e.ports[0])]
            detail = (f"port {port} is not allowed for {host} (list it as \"{host}:{port}\")"
                      if same else f"{where} is not in the list")
            raise Refused(403, f"{detail}: `network` of [mcp.servers.{self.name}] allows only "
                               f"the hosts it lists")
        if listed.address:
            return [host]  # an address the person wrote: reached as written
        from jarvis.security.net import BlockedURLError, FetchError, public_addresses

        try:
            return public_addresses(host, port, RESOLVER, RESOLVE_TIMEOUT)
        except BlockedURLError as exc:
            raise Refused(403, str(exc)) from None
        except FetchError as exc:
            raise Refused(502, str(exc)) from None

    def _connect(self, host: str, port: int) -> socket.socket:
        addresses = self.check(host, port)
        deadline = time.monotonic() + self.connect_timeout
        last: OSError | None = None
        for address in addresses:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            with self._lock:
                if self._closed:
                    sock.close()
                    raise OSError("closing")
                self._open.add(sock)
            sock.settimeout(left)
            try:
                sock.connect((address, port))
            except OSError as exc:
                last = exc
                with self._lock:
                    self._open.discard(sock)
                sock.close()
                continue
            return sock
        if isinstance(last, TimeoutError) or last is None:
            raise Refused(504, f"connecting to {host}:{port} took over {self.connect_timeout:g} s")
        raise Refused(502, f"cannot connect to {host}:{port}: {last.strerror or last}")


def _answer(client: socket.socket, status: int, reason: str) -> None:
    body = f"jarvis: {reason}\n".encode("utf-8", "replace")
    client.sendall(f"HTTP/1.1 {status} {_STATUS.get(status, 'Error')}\r\n"
                   f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n"
                   f"Connection: close\r\n\r\n".encode() + body)


def _linger(client: socket.socket, seconds: float = 1.0, most: int = 1 << 20) -> None:
    """After an answer, read (and drop) what the client still sends, a little: closed with
    unread data the socket sends a reset, and the client may lose the answer with it."""
    client.shutdown(socket.SHUT_WR)
    deadline = time.monotonic() + seconds
    while most > 0 and (left := deadline - time.monotonic()) > 0:
        client.settimeout(left)
        chunk = client.recv(65536)
        if not chunk:
            return
        most -= len(chunk)


def _parse_head(head: bytes) -> tuple[str, str, list[tuple[str, str]]]:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise Refused(400, "the request head is not ASCII") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        raise Refused(400, "not an HTTP/1 request line")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise Refused(400, "a malformed header line")
        headers.append((name, value.strip()))
    return parts[0].upper(), parts[1], headers


def _split_target(authority: str, default: int | None) -> tuple[str, int]:
    """host:port of a request target (lowercase host; [v6] unbracketed)."""
    if "@" in authority:
        raise Refused(400, "user names or passwords in the target are refused")
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        digits = rest[1:] if rest.startswith(":") else ("" if not rest else "x")
    else:
        host, colon, digits = authority.rpartition(":")
        if not colon:
            host, digits = authority, ""
    if digits == "" and default is not None:
        port = default
    elif digits.isdigit() and 1 <= int(digits) <= 65535:
        port = int(digits)
    else:
        raise Refused(400, f"{authority[:100]!r} names no host:port")
    host = host.lower().rstrip(".")
    if not host or "%" in host or not host.isascii():
        raise Refused(400, f"{authority[:100]!r} is not a host name or address")
    with contextlib.suppress(ValueError):
        host = str(ipaddress.ip_address(host))
    return host, port


def _origin_form(method: str, path: str, headers: list[tuple[str, str]]) -> bytes:
    """The request as sent to the origin: its path only, no proxy headers, one request per
    connection (what follows on this connection goes to the same host, whatever it says)."""
    lines = [f"{method} {path} HTTP/1.1"]
    for name, value in headers:
        if name.lower() not in ("proxy-authorization", "proxy-connection", "connection",
                                "keep-alive"):
            lines.append(f"{name}: {value}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def _relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both directions have ended (or IDLE_TIMEOUT passes with
    nothing sent either way)."""
    for sock in (a, b):
        sock.settimeout(SEND_TIMEOUT)  # a peer that stops reading ends the tunnel
    peers = {a.fileno(): (a, b), b.fileno(): (b, a)}
    poller = select.poll()
    for fd in peers:
        poller.register(fd, select.POLLIN)
    reading = len(peers)
    while reading:
        ready = poller.poll(IDLE_TIMEOUT * 1000)
        if not ready:
            return
        for fd, _ in ready:
            source, sink = peers[fd]
            data = source.recv(65536)
            if data:
                sink.sendall(data)
                continue
            poller.unregister(fd)
            reading -= 1
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)
