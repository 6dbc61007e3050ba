"""A keyless `jarvis serve` / `jarvis mcp serve --http` serves only its owner: every request
but /health carries the owner's token ($JARVIS_HOME/serve.token, 0600), which another local
user cannot read; WebSocket upgrades go through the same token, Host and Origin checks and
are never taken. Real servers as subprocesses on loopback, a throwaway uid for the other
user, raw sockets for the handshakes."""

from __future__ import annotations

import encodings.idna  # noqa: F401 - loaded before the fork: the other user cannot read it
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from serve_process import jarvis_serve, mcp_serve_http, owner_headers

OTHER_UID = 65534  # nobody: a user that is not the owner


def token_of(env: dict[str, str]) -> str:
    return (Path(env["JARVIS_HOME"]) / "serve.token").read_text().strip()


def raw(port: int, request: bytes, timeout: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        sock.settimeout(timeout)
        while True:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                return data
            if not chunk:
                return data
            data += chunk
            if b"\r\n\r\n" in data and b"Connection: close" not in request:
                return data


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def as_other_user(job) -> dict:
    """Run `job()` in a forked child that has become another user (uid/gid 65534, no
    groups); returns what it returned (a JSON-able dict)."""
    if os.geteuid() != 0:
        pytest.fail("switching to another uid needs root (the suite runs as root)")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no pytest machinery from here on, only _exit
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            result = job()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = {"crashed": repr(exc)}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    out = json.loads(data)
    assert "crashed" not in out, out
    return out


def test_the_token_file_is_private_and_printed_for_the_owner(cli_env, tmp_path):
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "serve", "--print-token"],
                         env=cli_env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    path = Path(cli_env["JARVIS_HOME"]) / "serve.token"
    assert token == token_of(cli_env) and len(token) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    again = subprocess.run([sys.executable, "-m", "jarvis.cli", "serve", "--print-token"],
                           env=cli_env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert again.stdout.strip() == token  # the same token until it has to change


def test_a_token_others_could_read_is_replaced(cli_env, tmp_path):
    path = Path(cli_env["JARVIS_HOME"]) / "serve.token"
    path.write_text("A" * 43 + "\n")
    os.chmod(path, 0o644)
    out = subprocess.run([sys.executable, "-m", "jarvis.cli", "serve", "--print-token"],
                         env=cli_env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0 and "was readable by other users" in out.stderr, out.stderr
    assert out.stdout.strip() != "A" * 43 and stat.S_IMODE(path.stat().st_mode) == 0o600
    os.chown(path, OTHER_UID, OTHER_UID)
    foreign = subprocess.run([sys.executable, "-m", "jarvis.cli", "serve", "--port", "0"],
                             env=cli_env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert foreign.returncode == 2 and "is not a file of yours" in foreign.stderr
    assert "Traceback" not in foreign.stderr


def test_another_local_user_is_refused_and_the_owner_served(cli_env, tmp_path):
    with jarvis_serve(cli_env, tmp_path / "ws", "--tools", "think") as url:
        port = port_of(url)
        token = token_of(cli_env)
        token_file = str(Path(cli_env["JARVIS_HOME"]) / "serve.token")

        def other() -> dict:
            try:
                with open(token_file) as fh:
                    stolen = fh.read()
            except PermissionError:
                stolen = None
            ask = b"GET /jarvis/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            return {
                "uid": os.getuid(), "read_token": stolen is not None,
                "plain": raw(port, ask + b"Connection: close\r\n\r\n")[:12].decode(),
                "guess": raw(port, ask + b"Authorization: Bearer " + b"x" * 43
                             + b"\r\nConnection: close\r\n\r\n")[:12].decode(),
                "key_header": raw(port, ask + b"X-API-Key: guess-guess-guess\r\n"
                                  b"Connection: close\r\n\r\n")[:12].decode(),
                "chat": raw(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            b"Content-Type: application/json\r\nContent-Length: 2\r\n"
                            b"Connection: close\r\n\r\n{}")[:12].decode(),
                "health": raw(port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              b"Connection: close\r\n\r\n")[:12].decode(),
            }

        seen = as_other_user(other)
        owner = httpx.get(url + "/jarvis/tools", headers={"Authorization": f"Bearer {token}"})
        by_key_header = httpx.get(url + "/jarvis/tools", headers={"X-API-Key": token})
        refused = httpx.get(url + "/jarvis/tools")
    assert seen["uid"] == OTHER_UID and seen["read_token"] is False
    for what in ("plain", "guess", "key_header", "chat"):
        assert seen[what] == "HTTP/1.1 401", (what, seen)
    assert seen["health"] == "HTTP/1.1 200"  # the health probe tells nothing of your tools
    assert owner.status_code == 200 and [t["name"] for t in owner.json()["tools"]] == ["think"]
    assert by_key_header.status_code == 200
    assert refused.status_code == 401
    assert "jarvis serve --print-token" in refused.json()["detail"]


def test_with_an_api_key_the_key_is_required_as_before(cli_env, tmp_path):
    env = dict(cli_env, JARVIS_API_KEY="a-long-enough-api-key")
    with jarvis_serve(env, tmp_path / "ws", "--tools", "think") as url:
        assert httpx.get(url + "/jarvis/tools").status_code == 401
        assert httpx.get(url + "/jarvis/tools",
                         headers={"X-API-Key": "a-long-enough-api-key"}).status_code == 200
    assert not (Path(cli_env["JARVIS_HOME"]) / "serve.token").exists()  # not made, not used


HANDSHAKE = (b"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
             b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             b"Sec-WebSocket-Version: 13\r\n{extra}\r\n")


def handshake(port: int, path: str = "/jarvis/tools", host: str = "127.0.0.1",
              extra: str = "") -> bytes:
    request = (HANDSHAKE.replace(b"{path}", path.encode()).replace(b"{host}", host.encode())
               .replace(b"{extra}", extra.encode()))
    return raw(port, request)


def test_websocket_upgrades_on_jarvis_serve_get_the_same_checks(cli_env, tmp_path):
    with jarvis_serve(cli_env, tmp_path / "ws", "--tools", "think") as url:
        port = port_of(url)
        auth = f"Authorization: Bearer {token_of(cli_env)}\r\n"
        answers = {
            "no token": handshake(port),
            "no token, other route": handshake(port, "/v1/chat/completions"),
            "no token, root": handshake(port, "/"),
            "token in a subprotocol": handshake(
                port, extra=f"Sec-WebSocket-Protocol: {token_of(cli_env)}\r\n"),
            "foreign host": handshake(port, host="evil.example", extra=auth),
            "foreign origin": handshake(port, extra=auth + "Origin: http://evil.example\r\n"),
            "owner": handshake(port, "/ws", extra=auth),
            "owner, other spelling": raw(port, (
                "GET /jarvis/tools HTTP/1.1\r\nhost: 127.0.0.1\r\nUPGRADE: WebSocket\r\n"
                "connection: keep-alive, Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"sec-websocket-version: 13\r\nauthorization: bearer {token_of(cli_env)}\r\n\r\n"
            ).encode()),
            "other spelling, no token": raw(port, (
                b"GET /jarvis/tools HTTP/1.1\r\nhost: 127.0.0.1\r\nUPGRADE: WebSocket\r\n"
                b"connection: keep-alive, Upgrade\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                b"sec-websocket-version: 13\r\n\r\n")),
        }
    status = {k: " ".join(v.split(b"\r\n", 1)[0].decode().split()[:2])
              for k, v in answers.items()}
    for name in ("no token", "no token, other route", "no token, root",
                 "token in a subprotocol", "other spelling, no token"):
        assert status[name] == "HTTP/1.1 401", (name, status)
    assert status["foreign host"] == "HTTP/1.1 421", status
    assert status["foreign origin"] == "HTTP/1.1 403", status
    # With every check passed there is still nothing to upgrade to: never a 101.
    assert status["owner"] == "HTTP/1.1 404", status
    assert status["owner, other spelling"] == "HTTP/1.1 200", status  # a plain GET answer
    assert all("101" not in s for s in status.values()), status


def test_no_websocket_is_ever_taken_whatever_library_is_installed():
    from jarvis.server.runner import _server

    async def app(scope, receive, send):  # pragma: no cover - never called
        raise AssertionError

    assert _server(app, "warning").config.ws == "none"


def test_the_key_middleware_refuses_a_websocket_scope_without_the_key():
    """An app mounted elsewhere (a uvicorn with WebSocket support): the key middleware
    checks websocket scopes like http ones (before, they passed through unchecked)."""
    import asyncio

    from jarvis.server.http import ApiKeyMiddleware

    reached = []

    async def app(scope, receive, send):
        reached.append(scope["type"])
        await send({"type": "websocket.accept"})

    guarded = ApiKeyMiddleware(app, "the-owner-token-value", owner=True)

    async def connect(headers: list[tuple[bytes, bytes]]) -> list[dict]:
        sent: list[dict] = []

        async def receive():
            return {"type": "websocket.connect"}

        async def send(message):
            sent.append(message)

        scope = {"type": "websocket", "path": "/ws", "raw_path": b"/ws", "query_string": b"",
                 "headers": [(b"host", b"127.0.0.1:1"), *headers]}
        await guarded(scope, receive, send)
        return sent

    refused = asyncio.run(connect([]))
    wrong = asyncio.run(connect([(b"authorization", b"Bearer nope")]))
    accepted = asyncio.run(connect([(b"authorization", b"Bearer the-owner-token-value")]))
    assert refused == [{"type": "websocket.close", "code": 1008}] == wrong
    assert accepted == [{"type": "websocket.accept"}] and reached == ["websocket"]


MCP_INIT = (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": '
            b'"2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}')


def mcp_post(port: int, extra: bytes = b"") -> bytes:
    return raw(port, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               b"Accept: application/json, text/event-stream\r\n" + extra
               + b"Content-Length: " + str(len(MCP_INIT)).encode()
               + b"\r\nConnection: close\r\n\r\n" + MCP_INIT)


def test_mcp_serve_http_answers_only_its_owner(cli_env, tmp_path):
    with mcp_serve_http(cli_env, tmp_path / "ws", "--tools", "calculator") as base:
        port = port_of(base)
        token_file = str(Path(cli_env["JARVIS_HOME"]) / "serve.token")

        def other() -> dict:
            try:
                with open(token_file) as fh:
                    fh.read()
                read = True
            except PermissionError:
                read = False
            return {"read_token": read, "init": mcp_post(port)[:12].decode(),
                    "guess": mcp_post(port, b"Authorization: Bearer " + b"g" * 43
                                      + b"\r\n")[:12].decode()}

        seen = as_other_user(other)
        auth = f"Authorization: {owner_headers(cli_env)['Authorization']}\r\n".encode()
        owner = mcp_post(port, auth)
    assert seen == {"read_token": False, "init": "HTTP/1.1 401", "guess": "HTTP/1.1 401"}
    assert owner.startswith(b"HTTP/1.1 200") and b'"serverInfo"' in owner, owner[:300]


def test_websocket_upgrades_on_mcp_serve_http_get_the_same_checks(cli_env, tmp_path):
    with mcp_serve_http(cli_env, tmp_path / "ws", "--tools", "calculator") as base:
        port = port_of(base)
        auth = f"Authorization: {owner_headers(cli_env)['Authorization']}\r\n"
        answers = {
            "no token": handshake(port, "/mcp"),
            "no token, other path": handshake(port, "/"),
            "foreign host": handshake(port, "/mcp", host="evil.example", extra=auth),
            "foreign origin": handshake(port, "/mcp",
                                        extra=auth + "Origin: http://evil.example\r\n"),
            "owner": handshake(port, "/mcp", extra=auth),
        }
    status = {k: " ".join(v.split(b"\r\n", 1)[0].decode().split()[:2])
              for k, v in answers.items()}
    assert status["no token"] == status["no token, other path"] == "HTTP/1.1 401", status
    assert status["foreign host"] == "HTTP/1.1 421", status
    assert status["foreign origin"] == "HTTP/1.1 403", status
    # Every check passed, and still no upgrade: the MCP endpoint answers it as the GET it is.
    assert not status["owner"].endswith("101") and status["owner"].startswith("HTTP/1.1 4"), status


def test_the_env_client_sends_the_owner_token_to_this_machine_only(cli_env, tmp_path):
    from jarvis.env import EnvClient

    with jarvis_serve(cli_env, tmp_path / "ws", "--tools", "calculator") as url:
        with EnvClient(url) as env:  # no key given: the owner token, read from the file
            assert [a.name for a in env.actions()] == ["calculator"]
        token = token_of(cli_env)
    for elsewhere in ("http://10.0.0.1:8765", "https://jarvis.example", "http://127.0.0.1.nip.io"):
        with EnvClient(elsewhere) as env:
            assert token not in str(env._http.headers), elsewhere
    for here in ("http://localhost:1", "http://[::1]:1", "http://127.0.0.2:1"):
        with EnvClient(here) as env:
            assert env._http.headers.get("X-API-Key") == token, here
