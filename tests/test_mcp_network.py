"""A sandboxed MCP server's network: only the hosts in `network`, through a proxy in jarvis.

The server's network namespace has no route out; its only way out is jarvis's proxy
(jarvis/sandbox/netproxy.py), which connects to a listed host only, through http_request's
address rules (security/net.py). The first tests drive the proxy itself over loopback (its
rules, with test resolvers: there is no DNS server to rig here); the last ones run the hostile
server (tests/mcp_servers/hostile_host.py) in the sandbox on both mechanisms, reaching a
loopback HTTPS and HTTP server that its config lists by address (an address the person writes
is reached as written; a name is never trusted to resolve somewhere private).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from mcp_support import write_config
from net_support import Reply, serving, serving_tls
from sandbox_support import descendants, new_descendants, wait_until_gone

from jarvis.core.config import load_config
from jarvis.core.registry import ToolRegistry
from jarvis.errors import ConfigError
from jarvis.mcp.manager import McpManager
from jarvis.sandbox import netproxy
from jarvis.sandbox.netproxy import EgressProxy, EntryError, parse_entry
from jarvis.tools.executor import ToolExecutor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

HOSTILE = Path(__file__).resolve().parent / "mcp_servers" / "hostile_host.py"


# --- the proxy's rules, over loopback ------------------------------------------------------------
class Proxy:
    """An EgressProxy accepting on a loopback listener of the test's, and raw clients."""

    def __init__(self, entries: list[str], **options) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.proxy = EgressProxy("t", entries, listener=self.listener, **options)

    def send(self, data: bytes, *, read: bool = True) -> socket.socket | bytes:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        sock.sendall(data)
        if not read:
            return sock
        with sock:
            return _read_all(sock)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proxy.close()


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


@pytest.fixture
def resolver(monkeypatch: pytest.MonkeyPatch):
    """Names resolve as the test says: name -> addresses, or a function of how many times
    the name was asked."""
    answers: dict = {}
    asked: list[str] = []

    def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        answer = answers[host]
        return answer(asked.count(host)) if callable(answer) else list(answer)

    monkeypatch.setattr(netproxy, "RESOLVER", resolve)
    resolve.answers = answers
    resolve.asked = asked
    return resolve


@pytest.mark.same_for_every_uid
def test_the_list_is_parsed_and_bad_entries_are_config_errors(tmp_path: Path) -> None:
    assert parse_entry("API.GitHub.com.").host == "api.github.com"
    assert parse_entry("api.github.com").ports == (443, 80)
    assert parse_entry("api.github.com:8443").ports == (8443,)
    assert parse_entry("*.example.com").wildcard
    assert parse_entry("[::1]:8443").address and parse_entry("[::1]:8443").host == "::1"
    for bad in ("https://api.github.com", "a b", "0x7f.1", "2130706433", "x:99999", "",
                "user@host", "bücher.example"):
        with pytest.raises(EntryError):
            parse_entry(bad)
    for table, needle in (({"command": "x", "network": ["https://x/"]}, "not a host name"),
                          ({"command": "x", "sandbox": False, "network": ["a.b"]}, "sandboxed"),
                          ({"url": "http://127.0.0.1:1/mcp", "network": ["a.b"]}, "sandboxed")):
        with pytest.raises(ConfigError, match=needle):
            load_config(write_config(tmp_path, {"s": table}))


@pytest.mark.same_for_every_uid
def test_only_listed_hosts_and_ports_are_carried(resolver) -> None:
    with serving({"/": lambda s: Reply(200, "hello")}) as server, \
            Proxy([f"127.0.0.1:{server.port}", "api.example.com"]) as proxy:
        target = f"127.0.0.1:{server.port}".encode()
        answer = proxy.send(b"GET http://" + target + b"/ HTTP/1.1\r\nHost: " + target
                            + b"\r\nProxy-Connection: keep-alive\r\n\r\n")
        assert status(answer) == 200 and answer.endswith(b"hello"), answer
        assert "proxy-connection" not in server.seen[0].headers  # proxy headers stay here
        tunnel = proxy.send(b"CONNECT " + target + b" HTTP/1.1\r\n\r\n", read=False)
        with tunnel:
            assert tunnel.recv(100).startswith(b"HTTP/1.1 200")
            tunnel.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert _read_all(tunnel).endswith(b"hello")
        refused = {
            b"CONNECT other.example.com:443 HTTP/1.1\r\n\r\n": "not in the list",
            b"CONNECT api.example.com:8443 HTTP/1.1\r\n\r\n": "port 8443 is not allowed",
            b"CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n" % (server.port + 1): "is not allowed for",
            b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n": "not in the list",
            b"CONNECT 2130706433:443 HTTP/1.1\r\n\r\n": "not in the list",
            b"GET https://api.example.com/ HTTP/1.1\r\n\r\n": "absolute http://",
            b"CONNECT x@api.example.com:443 HTTP/1.1\r\n\r\n": "user names",
        }
        for request, reason in refused.items():
            answer = proxy.send(request)
            assert status(answer) in (400, 403) and reason.encode() in answer, (request, answer)
        assert len(server.seen) == 2 and resolver.asked == []  # no lookup for a refusal


@pytest.mark.same_for_every_uid
def test_names_must_resolve_to_public_addresses_checked_once(resolver) -> None:
    """Loopback or metadata by a name, a name mixing a public and a private address, and
    DNS rebinding (public at the check, loopback afterwards): refused, and the loopback
    server sees nothing. Each connection resolves its name once and connects to what that
    check returned (no public address is connected to here: this machine's only network
    is its loopback)."""
    with serving({"/": lambda s: Reply(200, "secret")}) as server:
        port = server.port
        resolver.answers.update({
            "loop.example": ["127.0.0.1"], "meta.example": ["169.254.169.254"],
            "mixed.example": ["93.184.215.14", "127.0.0.1"], "mapped.example": ["::ffff:127.0.0.1"],
            "rebind.example": lambda n: ["93.184.215.14"] if n == 1 else ["127.0.0.1"]})
        names = [f"{name}:{port}" for name in resolver.answers] + ["localhost", f"metadata:{port}"]
        with Proxy(names) as proxy:
            for where in ("loop.example", "meta.example", "mixed.example", "mapped.example",
                          "metadata"):
                answer = proxy.send(f"CONNECT {where}:{port} HTTP/1.1\r\n\r\n".encode())
                assert status(answer) == 403, (where, answer)
                assert b"non-public" in answer or b"metadata name" in answer, (where, answer)
            answer = proxy.send(b"CONNECT localhost:443 HTTP/1.1\r\n\r\n")
            assert status(answer) == 403 and b"local or cloud-metadata name" in answer, answer
            assert proxy.proxy.check("rebind.example", port) == ["93.184.215.14"]  # pinned
            answer = proxy.send(f"CONNECT rebind.example:{port} HTTP/1.1\r\n\r\n".encode())
            assert status(answer) == 403 and b"loopback" in answer, answer
        assert server.seen == []
        assert resolver.asked.count("rebind.example") == 2  # once per connection


@pytest.mark.same_for_every_uid
def test_hostile_request_heads_are_bounded_and_the_proxy_goes_on() -> None:
    with serving({"/": lambda s: Reply(200, "hello")}) as server, \
            Proxy([f"127.0.0.1:{server.port}"], head_timeout=1.0) as proxy:
        big = proxy.send(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 1_000_000)
        assert status(big) == 431, big[:200]
        slow = proxy.send(b"CONNECT 127.0.0.1:", read=False)
        started = time.monotonic()
        target = f"127.0.0.1:{server.port}".encode()
        # while one connection drips its head, others are served
        answer = proxy.send(b"GET http://" + target + b"/ HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.endswith(b"hello")
        with slow:
            assert status(_read_all(slow)) == 408
        assert time.monotonic() - started < 5
        for junk in (b"\xff\xfe\r\n\r\n", b"HELLO\r\n\r\n", b"GET / HTTP/1.1\r\nbad line\r\n\r\n"):
            assert status(proxy.send(junk)) == 400, junk
        answer = proxy.send(b"GET http://" + target + b"/ HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.endswith(b"hello")


@pytest.mark.same_for_every_uid
def test_closing_the_proxy_ends_its_tunnels() -> None:
    with serving({"/": lambda s: Reply(200, "hello")}) as server:
        proxy = Proxy([f"127.0.0.1:{server.port}"])
        tunnel = proxy.send(f"CONNECT 127.0.0.1:{server.port} HTTP/1.1\r\n\r\n".encode(),
                            read=False)
        assert tunnel.recv(100).startswith(b"HTTP/1.1 200")
        done = threading.Event()
        threading.Thread(target=lambda: (_read_all(tunnel), done.set()), daemon=True).start()
        proxy.proxy.close()
        assert done.wait(10)
        tunnel.close()
        names = [t.name for t in threading.enumerate()]
        assert not any(n.startswith("jarvis-egress-t") for n in names), names


# --- a sandboxed server -----------------------------------------------------------------------
def manager_for(folder: Path, servers: dict, mechanism: str) -> McpManager:
    extra = f'[sandbox]\nisolation = "{mechanism}"\n'
    return McpManager(load_config(write_config(folder, servers, extra=extra)))


def call(manager: McpManager, name: str, arguments: dict) -> str:
    # Tools of a server not marked trusted ask first (docs/trust.md): the test approves.
    result = ToolExecutor([ToolRegistry.get(name)], approver=lambda *_: True).execute(
        {"name": name, "arguments": arguments})
    assert result.success, result.content
    return result.content


def test_a_sandboxed_server_reaches_only_its_listed_hosts(mechanism: str, tmp_path: Path,
                                                          resolver) -> None:
    ca_dir = tmp_path / "ca"
    ca_dir.mkdir()
    tmp_path.chmod(0o755)
    ca_dir.chmod(0o755)
    resolver.answers.update({"loop.example": ["127.0.0.1"]})
    before = descendants()
    with serving_tls({"/": lambda s: Reply(200, "hello over tls")}, "127.0.0.1",
                     ca_dir) as (tls, ca), \
            serving({"/": lambda s: Reply(200, "plain hello")}) as plain:
        os.chmod(ca, 0o644)
        network = [f"127.0.0.1:{tls.port}", f"127.0.0.1:{plain.port}", "api.example.com",
                   f"loop.example:{plain.port}"]
        manager = manager_for(tmp_path, {"evil": {
            "command": sys.executable, "args": [str(HOSTILE)], "connect_timeout": 60,
            "network": network, "env": {"SSL_CERT_FILE": ca}, "read_only_paths": [ca]}},
            mechanism)
        try:
            assert manager.refresh() == {"evil": None}, manager.status()
            manager.register_known()
            assert call(manager, "evil__fetch", {"url": f"https://127.0.0.1:{tls.port}/"}) == (
                "200: hello over tls")
            assert call(manager, "evil__fetch", {"url": f"http://127.0.0.1:{plain.port}/"}) == (
                "200: plain hello")
            for url in (f"https://127.0.0.1:{plain.port + 1}/",   # loopback, not listed
                        "http://169.254.169.254/latest/meta-data/",  # metadata by address
                        "https://api.example.com:8443/",            # listed name, other port
                        f"http://loop.example:{plain.port}/",        # a name resolving to loopback
                        "https://unlisted.example/"):
                assert call(manager, "evil__fetch", {"url": url}).startswith("refused"), url
            # past the proxy: no route, and Landlock allows TCP to the proxy's port only
            for host, port in (("127.0.0.1", plain.port), ("1.1.1.1", 443),
                               ("169.254.169.254", 80)):
                assert call(manager, "evil__connect", {"host": host, "port": port}).startswith(
                    "refused"), host
            assert "431" in call(manager, "evil__proxy_raw", {"data": "x" * 1000,
                                                               "repeat": 1000})
            assert call(manager, "evil__fetch", {"url": f"http://127.0.0.1:{plain.port}/"}) == (
                "200: plain hello")  # the proxy and the server go on
            assert [s.path for s in plain.seen] == ["/", "/"] and len(tls.seen) == 1
        finally:
            manager.close()
    assert not wait_until_gone(new_descendants(before), timeout=10)
    names = [t.name for t in threading.enumerate()]
    assert not any(n.startswith("jarvis-egress-") for n in names), names  # the proxy is gone


def test_a_server_without_a_list_has_no_proxy_and_no_network(mechanism: str,
                                                             tmp_path: Path) -> None:
    with serving({"/": lambda s: Reply(200, "plain hello")}) as plain:
        manager = manager_for(tmp_path, {"evil": {
            "command": sys.executable, "args": [str(HOSTILE)], "connect_timeout": 60}},
            mechanism)
        try:
            assert manager.refresh() == {"evil": None}, manager.status()
            manager.register_known()
            assert "PROXY" not in call(manager, "evil__environment", {}).upper()
            assert call(manager, "evil__fetch", {"url": plain.url("/")}).startswith("refused")
            assert call(manager, "evil__proxy_raw", {"data": "GET / HTTP/1.1\r\n\r\n"}
                        ).startswith("refused")
        finally:
            manager.close()
        assert plain.seen == []
