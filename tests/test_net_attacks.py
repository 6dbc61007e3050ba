"""Attacks on the network tools after issue 14, through the real entry points (the ToolExecutor
with a model's arguments, the SafeHttpClient with a test resolver): servers that drip, hostile
charsets and pages that would burn the CPU, header and port spellings that used to escape as
exceptions, blocked_hosts spelled differently, and a model's notify channel when the scheduler
does not know the channels. Loopback servers only; "public" addresses come from test resolvers
and are refused before any connection."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time

import pytest
from net_support import Reply, serving

from jarvis.core.types import ToolCall
from jarvis.security.net import BlockedURLError, FetchError, NetPolicy, SafeHttpClient, check_url
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.http_request import HttpRequestTool
from jarvis.tools.web_fetch import WebFetchTool


def call(tool, arguments, approver=None):
    """One model call through the executor (arguments as the model's JSON text)."""
    executor = ToolExecutor([tool], approver=approver)
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return executor.execute(ToolCall(id="c1", name=tool.spec.name, arguments=raw))


@contextlib.contextmanager
def raw_server(script):
    """A TCP server on loopback running `script(conn, stop)` per connection, until stopped."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=script, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def drip_headers(conn, stop):
    """Headers one byte at a time, for ever: each read succeeds, the response never starts."""
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        line = b"X-Slow: a\r\n"
        i = 0
        while not stop.wait(0.1):
            conn.sendall(line[i % len(line):i % len(line) + 1])
            i += 1


def drip_body(conn, stop):
    """A body byte just inside each read timeout (1.9 s against a 2 s deadline)."""
    with conn, contextlib.suppress(OSError):
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        while not stop.wait(1.9):
            conn.sendall(b"a")


# --- the one deadline holds while headers and bodies drip ----------------------------------
@pytest.mark.parametrize("script, timeout", [(drip_headers, 1.0), (drip_body, 2.0)])
def test_a_dripping_server_cannot_outlast_the_deadline(script, timeout):
    with raw_server(script) as port:
        tool = HttpRequestTool(allowed_hosts=[f"127.0.0.1:{port}"], timeout=timeout)
        import httpx  # noqa: F401 - imported by the first request: not part of what is timed
        started = time.monotonic()
        result = call(tool, {"url": f"http://127.0.0.1:{port}/"})
        took = time.monotonic() - started
    assert not result.success and result.error_type.value == "transport", result.content
    assert "timed out" in result.content or "deadline" in result.content
    # was: headers never (the executor abandoned the call), the body 100 x 1.9 s; the margin
    # is for a loaded machine.
    assert took < timeout + 4, took  # the executor would abandon it at timeout + 5


def test_a_body_in_a_million_tiny_chunks_is_refused_quickly():
    # Each chunk costs the reader ~25 us whatever its size: one-byte chunks kept a thread at
    # full CPU until the deadline (3,000,000 of them: 18 MB on the wire, under 30 s).
    def tiny_chunks(conn, stop):
        with conn, contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                         b"Content-Type: text/plain\r\n\r\n" + b"1\r\nx\r\n" * 500_000
                         + b"0\r\n\r\n")
            stop.wait(5)

    with raw_server(tiny_chunks) as port:
        tool = HttpRequestTool(allowed_hosts=[f"127.0.0.1:{port}"], timeout=30)
        started = time.monotonic()
        result = call(tool, {"url": f"http://127.0.0.1:{port}/"})
        took = time.monotonic() - started
    assert not result.success and "pieces" in result.content, result.content[:200]
    assert took < 6, took


def test_many_unanswering_addresses_share_the_one_deadline():
    # A name whose records all point at addresses that never answer a SYN (here: loopback
    # listeners with a full accept queue): each connect used to get its own 10 s.
    port = None
    listeners, fillers = [], []
    for last in range(2, 8):
        sock = socket.socket()
        sock.bind((f"127.0.0.{last}", port or 0))
        port = sock.getsockname()[1]
        sock.listen(0)
        listeners.append(sock)
        for _ in range(3):  # fill the accept queue; later SYNs are dropped
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect((f"127.0.0.{last}", port))
            fillers.append(filler)
    time.sleep(0.2)  # let the fillers' handshakes land in the queues
    addresses = [f"127.0.0.{last}" for last in range(2, 8)]
    client = SafeHttpClient(NetPolicy.make([f"slow.test:{port}"], timeout=1.5),
                            resolver=lambda host, p: addresses)
    import httpx  # noqa: F401 - imported by the first request: not part of what is timed
    try:
        started = time.monotonic()
        with pytest.raises(FetchError, match="timed out"):
            client.request("GET", f"http://slow.test:{port}/")
        took = time.monotonic() - started
    finally:
        for sock in listeners + fillers:
            sock.close()
    # was: 1.5 s per address, 9 s for the six; the margin over the 1.5 s deadline is for a
    # loaded machine (3.4 s was seen with 4 addresses on a busy 2-core CI).
    assert took < 5.0, took


# --- hostile charsets and pages ----------------------------------------------------------
PUNY = b"a" * 100 + b"-" + b"b" * 600_000  # Python's punycode decoder is quadratic


@pytest.mark.parametrize("tool_class, path", [
    (HttpRequestTool, "/header-puny"), (WebFetchTool, "/header-puny"), (WebFetchTool, "/meta-puny"),
    (HttpRequestTool, "/undefined"), (HttpRequestTool, "/idna"), (WebFetchTool, "/undefined"),
])
def test_charsets_that_are_not_web_encodings_are_read_as_utf8(tool_class, path):
    routes = {
        "/header-puny": lambda s: Reply(200, PUNY, content_type="text/plain; charset=punycode"),
        "/meta-puny": lambda s: Reply(200, b'<html><head><meta charset="punycode"></head><body>'
                                      + PUNY + b"</body></html>", content_type="text/html"),
        "/undefined": lambda s: Reply(200, b"caf\xc3\xa9", content_type="text/plain; "
                                                                  "charset=undefined"),
        "/idna": lambda s: Reply(200, b"caf\xc3\xa9", content_type="text/plain; charset=idna"),
    }
    with serving(routes) as server:
        started = time.monotonic()
        result = call(tool_class(allowed_hosts=[server.hostport], timeout=20),
                      {"url": server.url(path)})
        took = time.monotonic() - started
    assert result.success, result.content  # was: an exception, or minutes of CPU
    assert ("café" in result.content) or ("bbbb" in result.content)
    assert took < 10, took


def test_a_page_full_of_unclosed_title_tags_is_read_quickly():
    # The <title> fallback regex was quadratic on this (~70 s for 200 KB).
    page = "<html><body><p>Real text here.</p><script>" + "<title>" * 28_000 + "</script></body>"
    with serving({"/": lambda s: Reply(200, page, content_type="text/html")}) as server:
        started = time.monotonic()
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), {"url": server.url("/")})
        took = time.monotonic() - started
    assert result.success, result.content
    assert took < 10, took


def test_a_page_with_too_many_elements_gets_plain_text_in_bounded_time():
    # 150,000 paragraphs (1.6 MB, under the 2 MiB cap) took trafilatura over a minute.
    page = ("<html><head><title>Big</title><style>p{}</style></head><body><nav>menu</nav>"
            + "<p>word</p>" * 150_000 + "<p>the end</p><script>var x = 1;</script></body></html>")
    with serving({"/": lambda s: Reply(200, page, content_type="text/html")}) as server:
        started = time.monotonic()
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), {"url": server.url("/")})
        took = time.monotonic() - started
    assert result.success, result.content
    assert took < 15, took
    assert result.metadata["plain_text_fallback"] is True
    assert result.content.startswith("# Big\n") and "word word" in result.content
    assert "var x" not in result.content and "p{}" not in result.content
    assert "too many elements" in result.content


def test_a_page_of_many_tiny_tables_under_the_element_cap_is_read_quickly():
    # 6,000 two-cell tables: 24,000 elements (under MAX_ELEMENTS), 264 KB. trafilatura's
    # justext fallback walked the run of short cells once per cell: 34 s of CPU.
    page = ("<html><head><title>Tables</title></head><body>"
            + "<table><tr><td>a</td><td>b</td></tr></table>" * 6_000 + "</body></html>")
    with serving({"/": lambda s: Reply(200, page, content_type="text/html")}) as server:
        started = time.monotonic()
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), {"url": server.url("/")})
        took = time.monotonic() - started
    assert result.success, result.content
    assert result.metadata["plain_text_fallback"] is False  # still trafilatura's extraction
    assert result.content.startswith("# Tables\n") and "a\nb\na\nb" in result.content
    assert took < 8, took


# --- arguments that used to escape as exceptions ---------------------------------------------
@pytest.mark.parametrize("headers", [{"Hoſt": "evil"}, {"X-Note": "☃"}, {"X Note": "a"}])
def test_non_ascii_or_malformed_header_names_and_values_are_invalid_arguments(headers):
    with serving({"/": lambda s: Reply(200, "hi")}) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]),
                      {"url": server.url("/"), "headers": headers})
        assert not result.success and result.error_type.value == "invalid_args", result.content
        assert server.seen == []


@pytest.mark.parametrize("timeout", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_timeout_is_an_invalid_argument(timeout):
    # json.loads accepts NaN and Infinity, and NaN passes "exclusiveMinimum": 0.
    with serving({"/": lambda s: Reply(200, "hi")}) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]),
                      f'{{"url": "{server.url("/")}", "timeout": {timeout}}}')
        assert not result.success and result.error_type.value == "invalid_args", result.content
        assert server.seen == []


@pytest.mark.parametrize("port", ["0", "-1", "65536", "99999"])
def test_ports_outside_1_to_65535_are_refused(port):
    result = call(HttpRequestTool(allowed_hosts=["127.0.0.1"]), {"url": f"http://127.0.0.1:{port}/"})
    assert not result.success and result.error_type.value == "denied", result.content
    assert "port" in result.content


def test_a_get_with_a_method_override_header_needs_approval():
    # Frameworks that honour X-HTTP-Method-Override would turn this GET into a DELETE.
    with serving({"/items/1": lambda s: Reply(200, "gone")}) as server:
        tool = HttpRequestTool(allowed_hosts=[server.hostport])
        for name in ("X-HTTP-Method-Override", "x-http-method", "X-Method-Override"):
            denied = call(tool, {"url": server.url("/items/1"), "headers": {name: "DELETE"}})
            assert not denied.success and denied.error_type.value == "denied", denied.content
        assert server.seen == []
        asked = []
        approved = call(tool, {"url": server.url("/items/1"),
                               "headers": {"X-HTTP-Method-Override": "DELETE"}},
                        approver=lambda spec, args: asked.append(args) or True)
        assert approved.success and len(asked) == 1


def test_a_json_body_with_nan_is_an_invalid_argument():
    with serving({"/": lambda s: Reply(200, "hi")}) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]),
                      f'{{"url": "{server.url("/")}", "method": "GET", "json": NaN}}')
        assert not result.success and result.error_type.value == "invalid_args", result.content
        assert server.seen == []


# --- blocked_hosts is about the address, however it is spelled -----------------------------
@pytest.mark.parametrize("blocked, url", [
    ("[2606:4700::1111]", "http://[2606:4700:0::1111]/"),
    ("[2606:4700::1111]", "http://[2606:4700:0000:0000:0000:0000:0000:1111]/"),
    ("2606:4700::1111", "http://[2606:4700::1111]/"),
    ("[2606:4700:0::1111]:80", "http://[2606:4700::1111]/"),
    ("93.184.215.14", "http://example.test/"),  # the name resolves to the blocked address
    ("[2606:4700::1111]", "http://v6.example.test/"),
    # A name written in Unicode is the IDNA name in a URL's host: `bücher.example` blocked
    # nothing (the URL's host is xn--bcher-kva.example).
    ("bücher.example", "http://bücher.example/"),
    ("BÜCHER.example:80", "http://xn--bcher-kva.example/"),
    ("*.bücher.example", "http://www.BÜCHER.example./"),
    ("*.evil.example.", "http://a.evil.example/"),  # a trailing dot on a wildcard
])
def test_blocked_addresses_hold_whatever_the_spelling_or_name(blocked, url):
    def resolver(host, port):
        return ["2606:4700:0:0::1111"] if host.startswith("v6.") else ["93.184.215.14"]

    with pytest.raises(BlockedURLError, match="blocked_hosts"):
        check_url(url, NetPolicy.make(blocked_hosts=[blocked]), resolver)


def test_an_allowed_host_written_in_unicode_is_reached():
    with serving({"/": lambda s: Reply(200, "hallo")}) as server:
        client = SafeHttpClient(NetPolicy.make([f"bücher.test:{server.port}"]),
                                resolver=lambda host, port: ["127.0.0.1"])
        response = client.request("GET", f"http://bücher.test:{server.port}/")
    assert response.body == b"hallo" and server.seen[0].headers["host"].startswith("xn--")


def test_a_blocked_address_wins_over_an_allowed_name():
    with serving({"/": lambda s: Reply(200, "secret")}) as server:
        client = SafeHttpClient(NetPolicy.make([f"svc.test:{server.port}"],
                                               blocked_hosts=["127.0.0.1"]),
                                resolver=lambda host, port: ["127.0.0.1"])
        tool = HttpRequestTool()
        tool._client = client  # the tool with a test resolver
        result = call(tool, {"url": f"http://svc.test:{server.port}/"})
        assert not result.success and "blocked_hosts" in result.content, result.content
        assert server.seen == []
