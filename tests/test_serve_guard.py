"""Deny by default on `jarvis serve` and `jarvis mcp serve --http`: loopback Host only without
an API key, foreign Origins and non-JSON POSTs refused, slow clients cut off (raw sockets),
the connection cap answering 503, and malformed arguments a 400 — with the server still
serving afterwards."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from serve_process import owner_headers
from serve_support import running
from waiting import wait_for

from jarvis.server import ServeSettings
from jarvis.server.guard import is_loopback_host
from jarvis.testing import FakeOpenAIServer

CHAT = {"model": "simple", "messages": [{"role": "user", "content": "hi"}]}


def test_loopback_host_values() -> None:
    for ok in ("127.0.0.1", "127.0.0.1:8765", "localhost", "localhost:1", "[::1]", "[::1]:80",
               "127.0.0.2:9"):
        assert is_loopback_host(ok), ok
    for bad in ("evil.example", "evil.example:8765", "127.0.0.1.nip.io", "10.0.0.1:80",
                "localhost:x", "", "[::2]:80", "0.0.0.0:8765"):
        assert not is_loopback_host(bad), bad


def test_a_rebinding_host_cannot_reach_tools_or_the_agent() -> None:
    with FakeOpenAIServer(["should never run"]) as fake, running(fake=fake) as server:
        port = server.url.rsplit(":", 1)[1]
        # The owner's token does not open the server to a foreign Host either.
        foreign = {"Host": f"attacker.example:{port}", **server.headers}
        r = httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers=foreign)
        assert r.status_code == 421 and "not a loopback address" in r.json()["error"]["message"]
        r = httpx.get(server.url + "/jarvis/tools", headers=foreign)
        assert r.status_code == 421 and "not a loopback" in r.json()["detail"]
        r = httpx.post(server.url + "/create_session", headers=foreign)
        assert r.status_code == 421
        assert fake.requests == []
        for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "localhost"):
            assert httpx.get(server.url + "/jarvis/tools",
                             headers={"Host": good, **server.headers}).status_code == 200


def test_http10_request_without_host_is_refused() -> None:
    with running() as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /jarvis/tools HTTP/1.0\r\n" + _auth(server) + b"\r\n")
            answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 421"), answer[:80]


def test_content_length_with_transfer_encoding_is_refused_and_the_connection_closed() -> None:
    """Request smuggling: h11 reads the chunked framing (an empty body here) and served the
    bytes a Content-Length-reading proxy took for the body as a second request."""
    with FakeOpenAIServer(["should never run"]) as fake, running(fake=fake) as server:
        port = int(server.url.rsplit(":", 1)[1])
        smuggled = b"GET /jarvis/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        body = b"0\r\n\r\n" + smuggled
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         + _auth(server) +
                         b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            answer = _read_all(sock)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:80]
        assert b"not both" in answer and answer.count(b"HTTP/1.1 ") == 1, answer
        assert fake.requests == []


def test_foreign_origin_and_text_plain_posts_are_refused() -> None:
    with FakeOpenAIServer(["should never run"]) as fake, running(fake=fake) as server:
        url = server.url + "/v1/chat/completions"
        owner = server.headers  # even with the owner's token (a page cannot have it anyway)
        r = httpx.post(url, json=CHAT, headers={"Origin": "http://evil.example", **owner})
        assert r.status_code == 403 and "allowed_origins" in r.json()["error"]["message"]
        r = httpx.post(url, json=CHAT, headers={"Origin": "null", **owner})
        assert r.status_code == 403
        # The cross-site form attack: a simple text/plain POST carrying JSON.
        import json

        r = httpx.post(url, content=json.dumps(CHAT),
                       headers={"Content-Type": "text/plain", **owner})
        assert r.status_code == 415 and "application/json" in r.json()["error"]["message"]
        r = httpx.post(url, content=json.dumps(CHAT),
                       headers={"Content-Type": "application/x-www-form-urlencoded", **owner})
        assert r.status_code == 415
        assert fake.requests == []
        # Same origin is fine (a page served from here), and so is no Origin at all (curl).
        r = httpx.get(server.url + "/jarvis/tools", headers={"Origin": server.url, **owner})
        assert r.status_code == 200


def test_allowed_origins_and_api_key_relax_the_checks() -> None:
    settings = ServeSettings(allowed_origins=["http://localhost:3000"])
    with running(settings) as server:
        r = httpx.get(server.url + "/jarvis/tools",
                      headers={"Origin": "http://localhost:3000", **server.headers})
        assert r.status_code == 200
        r = httpx.get(server.url + "/jarvis/tools",
                      headers={"Origin": "http://localhost:3001", **server.headers})
        assert r.status_code == 403
    key = "long-enough-key"
    with running(ServeSettings(api_key=key)) as server:
        # With a key any Host is accepted (a reverse proxy, a LAN name): the key guards it.
        named = {"Host": "jarvis.lan:8765"}
        assert httpx.get(server.url + "/jarvis/tools", headers=named).status_code == 401
        r = httpx.get(server.url + "/jarvis/tools", headers={**named, "X-API-Key": key})
        assert r.status_code == 200


def _auth(server) -> bytes:
    """The owner's token (or API key) as a raw request header line."""
    return f"Authorization: Bearer {server.token}\r\n".encode()


def _unauthenticated_body_is_refused_at_once(port: int, path: bytes) -> None:
    """A client without the key announces a big body and sends ten bytes of it: it gets 401
    at once, instead of the server holding the connection and buffering the body first."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 900000\r\n\r\n"
                     + b"{" * 10)
        started = time.monotonic()
        sock.settimeout(3)
        answer = sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 401"), answer[:80]
        assert time.monotonic() - started < 2


def test_without_the_api_key_no_body_is_read() -> None:
    # Before: the guard (in front of the key check) read and buffered up to max_body_bytes
    # for up to body_timeout for anyone, so 512 keyless connections held 512 MiB, or CPU.
    with FakeOpenAIServer(["should never run"]) as fake, \
            running(ServeSettings(api_key="long-enough-key"), fake=fake) as server:
        _unauthenticated_body_is_refused_at_once(_port(server.url), b"/v1/chat/completions")
        assert fake.requests == []


def test_mcp_http_without_the_api_key_reads_no_body(cli_env, tmp_path: Path) -> None:
    cli_env = {**cli_env, "JARVIS_API_KEY": "long-enough-key"}
    with mcp_http(cli_env, tmp_path / "ws", "127.0.0.1") as base:
        _unauthenticated_body_is_refused_at_once(_port(base), b"/mcp")
        ok = httpx.post(base + "/mcp", json=INIT, headers={**MCP_HEADERS,
                                                           "X-API-Key": "long-enough-key"})
        assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("body", [
    {"split": "default", "start": "a"},
    {"split": "default", "stop": "1"},
    {"split": "default", "start": 1.5},
    {"split": "default", "start": [1]},
    {"split": "default", "start": True},
    {"split": "default", "start": 10**40},
    {"split": "default", "start": {"x": 1}},
])
def test_malformed_task_range_bounds_are_400(body) -> None:
    with running() as server:
        r = httpx.post(server.url + "/jarvis/task_range", json=body, headers=server.headers)
        assert r.status_code == 400, r.text
        assert "must be an integer" in r.json()["detail"]
        ok = httpx.post(server.url + "/jarvis/task_range", json={"split": "default", "start": 0},
                        headers=server.headers)
        assert ok.status_code == 200 and ok.json() == {"tasks": [{}]}


@pytest.mark.parametrize("extra", [{"stream_options": "yes"}, {"stream_options": [1]},
                                   {"max_tokens": True}, {"temperature": True},
                                   {"temperature": "hot"}, {"n": {"a": 1}}])
def test_malformed_chat_options_are_400(extra) -> None:
    with running() as server:
        r = httpx.post(server.url + "/v1/chat/completions", json={**CHAT, **extra},
                       headers=server.headers)
        assert r.status_code == 400, r.text


def test_oversized_headers_are_refused_and_the_server_keeps_serving() -> None:
    with running() as server:
        port = _port(server.url)
        for size in (40_000, 200_000):  # in one piece, and more than one read
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                # Connection: close, so that the answer ends with the connection (a refused
                # request may leave it open for the next one: read until then, not 5 s).
                s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                          b"X-Big: " + b"a" * size + b"\r\n\r\n")
                answer = _read_all(s, limit=5)
            assert answer.startswith((b"HTTP/1.1 431", b"HTTP/1.1 400")), answer[:60]
        assert httpx.get(server.url + "/health").status_code == 200


# --- slow clients, against the real `jarvis serve` -------------------------------------------
@contextmanager
def jarvis_serve(cli_env: dict[str, str], folder: Path, serve_toml: str,
                 tools: str = "think") -> Iterator[str]:
    folder.mkdir(exist_ok=True)
    (folder / "config.toml").write_text(f"[serve]\n{serve_toml}\n")
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "serve", "--port", "0",
                             "--tools", tools], env=cli_env, cwd=folder,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("jarvis serve: listening on http://127.0.0.1:"), first
        yield first.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        proc.stderr.close()


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _read_all(sock: socket.socket, limit: float = 10.0) -> bytes:
    sock.settimeout(limit)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            return data
        if not chunk:
            return data
        data += chunk


def _health(url: str) -> float:
    started = time.monotonic()
    r = httpx.get(url + "/health", timeout=10)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    return time.monotonic() - started


@pytest.mark.slow
def test_300_half_open_requests_do_not_stop_health(cli_env, tmp_path: Path) -> None:
    with jarvis_serve(cli_env, tmp_path / "ws", "header_timeout = 5\nbody_timeout = 2\n") as url:
        port = _port(url)
        token = (Path(cli_env["JARVIS_HOME"]) / "serve.token").read_text().strip()
        # Opened together, their deadlines run at once: a connection that sends nothing at
        # all, one whose body never finishes (the owner's: anyone else gets 401 first), and
        # 300 whose headers never finish.
        silent = socket.create_connection(("127.0.0.1", port), timeout=5)
        body = socket.create_connection(("127.0.0.1", port), timeout=5)
        socks = [silent, body]
        try:
            for i in range(300):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                # Headers that never finish (no blank line).
                s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + bytes(str(i), "ascii"))
                socks.append(s)
            assert _health(url) < 3.0  # answered while all 300 are still open
            body.sendall(b"POST /jarvis/call HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         + f"Authorization: Bearer {token}\r\n".encode() +
                         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"na")
            started = time.monotonic()
            answer = _read_all(body, limit=10)
            assert time.monotonic() - started < 6
            assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
            assert b"body did not arrive within 2 seconds" in answer
            started = time.monotonic()
            answers = [_read_all(s, limit=15) for s in socks[2:]]
            assert time.monotonic() - started < 15
            assert all(a.startswith(b"HTTP/1.1 408") for a in answers), {a[:40] for a in answers}
            assert b"did not arrive within 5 seconds" in answers[0]
            assert _read_all(silent, limit=15).startswith(b"HTTP/1.1 408")
        finally:
            for s in socks:
                s.close()
        assert _health(url) < 3.0


@pytest.mark.slow
def test_connections_past_the_cap_get_503_at_once(cli_env, tmp_path: Path) -> None:
    # The 20 held connections (headers never sent) stay held for the whole test on a loaded
    # machine too: a 2 s header deadline could free them before the probes ran.
    with jarvis_serve(cli_env, tmp_path / "ws",
                      "header_timeout = 30\nmax_connections = 20\n") as url:
        port = _port(url)
        socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
        try:
            def held() -> bool:  # the server has accepted all 20 (none answered yet)
                with socket.create_connection(("127.0.0.1", port), timeout=5) as probe:
                    return _read_all(probe, limit=3).startswith(b"HTTP/1.1 503")

            wait_for(held, timeout=10)
            with socket.create_connection(("127.0.0.1", port), timeout=5) as extra:
                started = time.monotonic()
                extra.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answer = _read_all(extra, limit=10)
                assert time.monotonic() - started < 5  # at once: not after the 30 s deadline
            assert answer.startswith(b"HTTP/1.1 503") and b"maximum of 20 connections" in answer
        finally:
            for s in socks:
                s.close()
        # Once they are gone the server answers again.
        wait_for(lambda: httpx.get(url + "/health", timeout=5).status_code == 200, timeout=10)


# --- jarvis mcp serve --http ------------------------------------------------------------------
def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


@contextmanager
def mcp_http(cli_env: dict[str, str], folder: Path, host: str,
             serve_toml: str = "") -> Iterator[str]:
    folder.mkdir(exist_ok=True)
    (folder / "config.toml").write_text(f"[serve]\n{serve_toml}\n")
    port = _free_port(host)
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "mcp", "serve", "--tools",
                             "calculator", "--http", f"{host}:{port}"], env=cli_env, cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def listening() -> bool:
            with socket.socket() as probe:
                return probe.connect_ex((host, port)) == 0

        wait_for(listening, timeout=20)
        yield f"http://{host}:{port}"
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def test_mcp_transport_security_is_set_for_every_loopback_bind() -> None:
    from jarvis.server.mcp_serve import transport_security

    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        settings = transport_security(host)
        assert settings.enable_dns_rebinding_protection, host
    other = transport_security("127.0.0.2")
    assert "127.0.0.2:*" in other.allowed_hosts and "http://127.0.0.2:*" in other.allowed_origins
    assert "evil.example:*" not in other.allowed_hosts


def test_mcp_http_on_127_0_0_2_refuses_rebinding(cli_env, tmp_path: Path) -> None:
    with mcp_http(cli_env, tmp_path / "ws", "127.0.0.2") as base:
        url = base + "/mcp"
        port = base.rsplit(":", 1)[1]
        owner = {**MCP_HEADERS, **owner_headers(cli_env)}
        r = httpx.post(url, json=INIT, headers={**owner, "Host": f"evil.example:{port}"})
        assert r.status_code == 421
        r = httpx.post(url, json=INIT, headers={**owner, "Origin": "http://evil.example"})
        assert r.status_code == 403
        r = httpx.post(url, content=b"{}", headers={**owner, "Content-Type": "text/plain"})
        assert r.status_code == 415
        assert httpx.post(url, json=INIT, headers=MCP_HEADERS).status_code == 401  # not yours
        ok = httpx.post(url, json=INIT, headers=owner)
        assert ok.status_code == 200, ok.text


@pytest.mark.slow
def test_mcp_http_cuts_off_half_open_requests(cli_env, tmp_path: Path) -> None:
    with mcp_http(cli_env, tmp_path / "ws", "127.0.0.1", "header_timeout = 1\n") as base:
        port = _port(base)
        socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(50)]
        try:
            for s in socks:
                s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            ok = httpx.post(base + "/mcp", json=INIT, timeout=10,
                            headers={**MCP_HEADERS, **owner_headers(cli_env)})
            assert ok.status_code == 200
            answers = [_read_all(s, limit=8) for s in socks]
            assert all(a.startswith(b"HTTP/1.1 408") for a in answers)
        finally:
            for s in socks:
                s.close()


@pytest.mark.skipif(os.name != "posix", reason="rlimits")
def test_fd_limit_is_raised_or_the_cap_fits_under_it() -> None:
    import resource

    from jarvis.server.limits import FD_RESERVE, raise_fd_limit

    fits = raise_fd_limit(512)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert 1 <= fits <= 512 and (soft == resource.RLIM_INFINITY or fits <= soft - FD_RESERVE)


HOSTILE = [None, True, 0, -1, 1.5, 10**30, "x", "", [], [1], {}, {"a": 1}, "\u0000"]
ROUTES = {
    "/create": ["env_name", "task_spec", "split", "index", "secrets"],
    "/ping": [], "/delete": [],
    "/jarvis/tasks": ["split"], "/jarvis/num_tasks": ["split"],
    "/jarvis/task": ["split", "index"], "/jarvis/task_range": ["split", "start", "stop"],
    "/jarvis/call": ["name", "input", "task_id"],
    "/v1/chat/completions": ["model", "messages", "tools", "n", "temperature", "max_tokens",
                             "max_completion_tokens", "stream", "stream_options"],
}


def test_no_argument_shape_is_a_500() -> None:
    """Every POST route, every known field, values of every JSON type: 4xx, never 500."""
    with running() as server, httpx.Client(base_url=server.url, timeout=10,
                                           headers=server.headers) as http:
        sid = http.post("/create_session").text.split("data: ", 1)[1].split("\n", 1)[0].strip()
        assert http.post("/create", json={"task_spec": {}},
                         headers={"X-Session-ID": sid}).status_code == 200
        seen = set()
        for route, fields in ROUTES.items():
            bodies = [value for value in HOSTILE] + [{f: v} for f in fields for v in HOSTILE]
            bodies += [{"split": "default", f: v} for f in fields for v in HOSTILE]
            for body in bodies:
                r = http.post(route, json=body, headers={"X-Session-ID": sid})
                seen.add(r.status_code)
                assert r.status_code < 500, (route, body, r.text)
                if r.status_code == 200 and route in ("/delete", "/create"):
                    # Keep a live session for the next bodies.
                    http.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": sid})
        assert 400 in seen
        assert http.get("/health").status_code == 200


# --- attacks on the guard (second pass) -------------------------------------------------------
def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        return _read_all(s, limit=5)


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x"])
def test_an_empty_form_post_is_refused_even_without_origin(ctype: str) -> None:
    """A cross-site form with no fields posts an empty body with a form Content-Type; a
    browser that leaves Origin out (old ones, privacy settings) must not create a session."""
    with running() as server:
        port = _port(server.url)
        answer = _raw(port, b"POST /create_session HTTP/1.1\r\nHost: 127.0.0.1\r\n" + _auth(server)
                      + b"Content-Type: " + ctype.encode()
                      + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 415"), answer[:200]
        assert httpx.get(server.url + "/health").json()["sessions"] == 0
        # The ORS client's body-less POSTs (no Content-Type, or JSON) still work.
        ok = _raw(port, b"POST /create_session HTTP/1.1\r\nHost: 127.0.0.1\r\n" + _auth(server)
                  + b"Content-Length: 0\r\nConnection: close\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200"), ok[:200]


@pytest.mark.parametrize("headers", [
    b"Origin: http://127.0.0.1\r\nOrigin: http://evil.example\r\n",
    b"Content-Type: application/json\r\nContent-Type: text/plain\r\n",
])
def test_a_repeated_origin_or_content_type_is_refused(headers: bytes) -> None:
    """Two Origin or Content-Type headers: the guard would judge one and something later might
    read the other. Ambiguous security headers are refused."""
    body = b'{"split": "default", "start": 0}'
    with running() as server:
        answer = _raw(_port(server.url),
                      b"POST /jarvis/task_range HTTP/1.1\r\nHost: 127.0.0.1\r\n" + _auth(server)
                      + headers
                      + b"Content-Length: " + str(len(body)).encode()
                      + b"\r\nConnection: close\r\n\r\n" + body)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b"more than one" in answer


def test_websocket_scopes_get_the_same_host_and_origin_checks() -> None:
    """No route speaks WebSocket today, but a WebSocket handshake is not subject to the
    same-origin policy: the guard refuses a foreign Host or Origin before any app sees it."""
    import asyncio

    from jarvis.server.guard import RequestGuard

    reached = []

    async def app(scope, receive, send):
        reached.append(scope["type"])
        await send({"type": "websocket.accept"})

    async def handshake(headers: list[tuple[bytes, bytes]]) -> list[dict]:
        sent: list[dict] = []

        async def receive():
            return {"type": "websocket.connect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "websocket", "path": "/ws", "raw_path": b"/ws", "query_string": b"",
                 "headers": headers}
        await RequestGuard(app, loopback_only=True)(scope, receive, send)
        return sent

    foreign = asyncio.run(handshake([(b"host", b"evil.example:80")]))
    cross = asyncio.run(handshake([(b"host", b"127.0.0.1:80"), (b"origin", b"http://evil.example")]))
    assert reached == []
    assert foreign[0]["type"] == "websocket.close" and cross[0]["type"] == "websocket.close"
    same = asyncio.run(handshake([(b"host", b"127.0.0.1:80"), (b"origin", b"http://127.0.0.1:80")]))
    assert reached == ["websocket"] and same[0]["type"] == "websocket.accept"


def _established(port: int) -> int:
    """Server-side established connections on `port` (from /proc/net/tcp{,6})."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[3] == "01" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    count += 1
    return count


# A workspace tool whose description makes each /jarvis/tools answer ~200 KB: the buffers
# between a server and a client that does not read hold a few MB (the kernel grows the
# server's send buffer to tcp_wmem's maximum), so with small answers the server had to
# answer ~13 000 pipelined requests before it waited to write (minutes of CPU on a loaded
# machine); with these, a few dozen.
BIG_TOOL = '''
from jarvis.tools.base import tool


@tool
def big() -> str:
    """{text}"""
    return ""
'''.replace("{text}", "A long description. " * 10_000)


def test_a_client_that_never_reads_its_answers_is_cut_off(cli_env, tmp_path: Path) -> None:
    """A slow reader: pipelined requests, answers never read. The answers fill the socket
    buffers and the server waits to write; without a send deadline the connection (and its
    request task) lived forever. With `send_timeout` it is closed, not before its time (the
    header deadline, shorter, is not what closes it)."""
    send_timeout = 4.0
    (tmp_path / "ws" / "tools").mkdir(parents=True)
    (tmp_path / "ws" / "tools" / "big.py").write_text(BIG_TOOL)
    with jarvis_serve(cli_env, tmp_path / "ws", "header_timeout = 2\nbody_timeout = 2\n"
                      f"send_timeout = {send_timeout}\n", tools="think,big") as url:
        port = _port(url)
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            auth = f"Authorization: {owner_headers(cli_env)['Authorization']}\r\n".encode()
            request = b"GET /jarvis/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"\r\n"
            started = time.monotonic()
            s.sendall(request * 200)  # ~40 MB of answers: far more than the buffers hold
            if time.monotonic() - started < send_timeout:  # (always, on a quiet machine)
                assert _established(port) == 1, "cut off before its send deadline"
            wait_for(lambda: _established(port) == 0, timeout=120,
                     what="the server letting go of a client that does not read")
            # The deadline runs from when the server began waiting, after `started`.
            assert time.monotonic() - started >= send_timeout, "cut off before its send deadline"
            assert _health(url) >= 0  # and the server serves on, answers as big as meant
            tools = httpx.get(url + "/jarvis/tools", headers=owner_headers(cli_env), timeout=30)
            assert len(tools.content) > 150_000
        finally:
            s.close()
