"""The SSRF-safe client (jarvis.security.net) against the known tricks, with real loopback
servers: every refusal is checked to happen before the server sees anything."""

from __future__ import annotations

import gzip
import ipaddress
import threading
import time

import pytest
from net_support import Reply, serving

from jarvis.security.net import (
    BlockedURLError,
    FetchError,
    NetPolicy,
    SafeHttpClient,
    blocked_reason,
    check_url,
    legacy_ipv4,
)

DENY_ALL = NetPolicy()


def public_resolver(host, port):
    """A resolver that says every name is a public address (nothing here may be reached)."""
    return ["93.184.215.14"]


@pytest.mark.parametrize("address, why", [
    ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("10.1.2.3", "private"),
    ("172.16.0.1", "private"), ("192.168.1.1", "private"), ("169.254.169.254", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"), ("100.127.255.254", "carrier-grade NAT"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("0.0.0.0", "unspecified"),
    ("255.255.255.255", "reserved"), ("198.18.0.1", "reserved"), ("192.0.2.1", "reserved"),
    ("::1", "loopback"), ("::", "unspecified"), ("::ffff:127.0.0.1", "IPv4-mapped"),
    ("::ffff:8.8.8.8", "IPv4-mapped"), ("::127.0.0.1", "IPv4-compatible"),
    ("64:ff9b::7f00:1", "NAT64"), ("64:ff9b:1::a00:1", "NAT64"), ("fe80::1", "link-local"),
    ("fc00::1", "unique-local"), ("fd12:3456::1", "unique-local"), ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"), ("2002:7f00:1::1", "6to4"), ("2001::1", "Teredo"),
    ("fec0::1", "site-local"),
])
def test_every_non_public_range_is_blocked(address, why):
    reason = blocked_reason(address)
    assert reason is not None and why in reason, (address, reason)


def test_python_ipaddress_misses_some_that_we_block():
    # Why the module keeps its own tables: on this Python some of these look harmless.
    mapped = ipaddress.ip_address("::ffff:127.0.0.1")
    assert not mapped.is_loopback  # Python 3.11: a mapped loopback address is not "loopback"
    assert "IPv4-mapped" in blocked_reason(mapped)
    compat = ipaddress.ip_address("::127.0.0.1")
    assert not compat.is_loopback and "IPv4-compatible" in blocked_reason(compat)


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "1.1.1.1",
                                     "2606:4700:4700::1111", "2a00:1450:4001:80b::200e"])
def test_public_addresses_pass(address):
    assert blocked_reason(address) is None


@pytest.mark.parametrize("host, quad", [("2130706433", "127.0.0.1"), ("0x7f.1", "127.0.0.1"),
                                        ("0177.0.0.1", "127.0.0.1"), ("127.1", "127.0.0.1"),
                                        ("0x7f000001", "127.0.0.1"), ("017700000001", "127.0.0.1")])
def test_legacy_ipv4_spellings_are_recognised(host, quad):
    assert legacy_ipv4(host) == quad


@pytest.mark.parametrize("url, expected", [
    ("http://2130706433/", "non-standard spelling"),
    ("http://0x7f.1/", "non-standard spelling"),
    ("http://0177.0.0.1/", "non-standard spelling"),
    ("http://127.1:8080/", "non-standard spelling"),
    ("http://127.0.0.1/", "loopback"),
    ("http://127.0.0.1./", "loopback"),
    ("http://0/", "non-standard spelling"),
    ("http://[::]/", "unspecified"),
    ("http://LOCALHOST./", "metadata"),
    ("http://[::1]/", "loopback"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped"),
    ("http://[::ffff:7f00:1]/", "IPv4-mapped"),
    ("http://[::127.0.0.1]/", "IPv4-compatible"),
    ("http://[64:ff9b::7f00:1]/", "NAT64"),
    ("http://[64:ff9b:1::a9fe:a9fe]/", "NAT64"),
    ("http://100.64.0.1/", "carrier-grade NAT"),
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://metadata/", "metadata"),
    ("http://instance-data/latest/", "metadata"),
    ("http://localhost:8080/", "metadata"),
    ("http://api.localhost/", "metadata"),
    ("http://a@127.0.0.1/", "user name or password"),
    ("http://user:pass@example.com/", "user name or password"),
    ("http://example.com@127.0.0.1/", "user name or password"),
    ("file:///etc/passwd", "only http and https"),
    ("gopher://example.com/", "only http and https"),
    ("ftp://example.com/", "only http and https"),
    ("dict://127.0.0.1:11211/", "only http and https"),
    ("//example.com/x", "http:// or https://"),
    ("http://exa mple.com/", "spaces"),
    ("http://example.com\\@127.0.0.1/", "backslashes"),
    ("http://ex%61mple.com/", "percent-encoded"),
    ("http://[fe80::1%25eth0]/", "zone ids"),
])
def test_tricks_are_refused_before_any_connection(url, expected):
    with pytest.raises(BlockedURLError) as info:
        check_url(url, DENY_ALL, public_resolver)
    assert expected in str(info.value), str(info.value)


def test_names_that_resolve_to_private_addresses_are_refused():
    for answer in (["10.0.0.5"], ["93.184.215.14", "127.0.0.1"], ["::ffff:169.254.169.254"]):
        with pytest.raises(BlockedURLError, match="non-public"):
            check_url("http://innocent.example/", DENY_ALL, lambda h, p, a=answer: a)


def test_a_public_name_is_pinned_to_what_it_resolved_to():
    target = check_url("https://Example.COM./path?q=1", DENY_ALL, public_resolver)
    assert (target.host, target.port, target.addresses) == ("example.com", 443, ["93.184.215.14"])


def test_allowed_hosts_are_exact_host_and_port():
    policy = NetPolicy.make(["127.0.0.1:8123", "intranet.example"])
    assert check_url("http://127.0.0.1:8123/x", policy).allowed_by_user
    with pytest.raises(BlockedURLError, match="loopback"):
        check_url("http://127.0.0.1:8124/x", policy)  # another port is not the exception
    with pytest.raises(BlockedURLError, match="loopback"):
        check_url("http://127.0.0.2:8123/x", policy)
    target = check_url("http://intranet.example:9000/", policy, lambda h, p: ["10.0.0.7"])
    assert target.addresses == ["10.0.0.7"]  # any port of a host listed without one


def test_blocked_hosts_win_over_everything():
    policy = NetPolicy.make(["127.0.0.1:8123"], ["127.0.0.1:8123", "*.tracker.example"])
    with pytest.raises(BlockedURLError, match="blocked_hosts"):
        check_url("http://127.0.0.1:8123/", policy)
    for url in ("https://tracker.example/", "https://a.b.tracker.example/"):
        with pytest.raises(BlockedURLError, match="blocked_hosts"):
            check_url(url, policy, public_resolver)


def test_a_rebinding_resolver_cannot_win():
    """The first answer is checked and connected to; a second lookup never happens. The
    resolver answers 127.0.0.1 first, then 127.0.0.2: only 127.0.0.1 has the server, so a
    second lookup would fail the request."""
    calls = []

    def rebinding(host, port):
        calls.append(host)
        return ["127.0.0.1"] if len(calls) == 1 else ["127.0.0.2"]

    with serving({"/": lambda s: Reply(200, "first answer")}) as server:
        policy = NetPolicy.make([f"rebind.test:{server.port}"])
        client = SafeHttpClient(policy, resolver=rebinding)
        response = client.request("GET", f"http://rebind.test:{server.port}/")
    assert response.body == b"first answer" and response.address == "127.0.0.1"
    assert calls == ["rebind.test"]
    assert server.seen[0].headers["host"] == f"rebind.test:{server.port}"  # the name is kept


def test_a_rebinding_resolver_that_turns_private_after_the_check_reaches_nothing_local():
    """Public at the check, loopback afterwards: the connection goes to the checked public
    address (unreachable here), never to the loopback server."""
    calls = []

    def rebinding(host, port):
        calls.append(host)
        return ["93.184.215.14"] if len(calls) == 1 else ["127.0.0.1"]

    with serving({"/": lambda s: Reply(200, "secret")}) as server:
        client = SafeHttpClient(NetPolicy(timeout=1.0), resolver=rebinding)
        with pytest.raises(FetchError):
            client.request("GET", f"http://rebind.test:{server.port}/")
        assert server.seen == [] and calls == ["rebind.test"]


def test_every_redirect_hop_is_checked():
    targets = {"/to-loopback": "http://127.0.0.1:1/", "/to-metadata": "http://169.254.169.254/",
               "/to-file": "file:///etc/passwd", "/to-userinfo": "http://x@example.com/",
               "/to-decimal": "http://2130706433/"}
    routes = {path: (lambda s, t=t: Reply(302, headers={"Location": t})) for path, t in targets.items()}
    with serving(routes) as server:
        client = SafeHttpClient(NetPolicy.make([server.hostport]))
        for path in targets:
            with pytest.raises(BlockedURLError):
                client.request("GET", server.url(path))
        assert len(server.seen) == len(targets)  # each first hop ran; no forbidden one did


def test_redirects_are_followed_up_to_the_limit():
    def hop(seen):
        n = int(seen.path.rsplit("/", 1)[1])
        return Reply(302, headers={"Location": f"/hop/{n + 1}"}) if n < 10 else Reply(200, "end")

    with serving({f"/hop/{n}": hop for n in range(11)}) as server:
        client = SafeHttpClient(NetPolicy.make([server.hostport], max_redirects=3))
        with pytest.raises(FetchError, match="too many redirects"):
            client.request("GET", server.url("/hop/0"))
        assert len(server.seen) == 4
        ok = SafeHttpClient(NetPolicy.make([server.hostport], max_redirects=10))
        response = ok.request("GET", server.url("/hop/0"))
    assert response.body == b"end" and len(response.redirects) == 10
    assert response.url.endswith("/hop/10")


def test_credentials_are_not_carried_to_another_origin():
    with serving({"/": lambda s: Reply(200, "b")}) as b_server, \
            serving({"/": lambda s: Reply(307, headers={"Location": b_server.url("/")})}) as a:
        client = SafeHttpClient(NetPolicy.make([a.hostport, b_server.hostport]))
        # web_search's Brave backend sends its key as X-Subscription-Token: a redirect from
        # the API host to another used to hand it over (only Authorization/Cookie were dropped).
        client.request("GET", a.url("/"), headers={
            "Authorization": "Bearer s3cret", "X-Subscription-Token": "brave-key",
            "X-Api-Key": "k", "Cookie": "sid=1", "X-Request-Id": "keep-me"})
    assert a.seen[0].headers["authorization"] == "Bearer s3cret"
    assert a.seen[0].headers["x-subscription-token"] == "brave-key"
    seen_by_b = b_server.seen[0].headers
    for name in ("authorization", "x-subscription-token", "x-api-key", "cookie"):
        assert name not in seen_by_b, name
    assert seen_by_b["x-request-id"] == "keep-me"  # not a credential: still sent


def test_a_303_turns_a_post_into_a_get_without_the_body():
    routes = {"/form": lambda s: Reply(303, headers={"Location": "/done"}),
              "/done": lambda s: Reply(200, s.method)}
    with serving(routes) as server:
        client = SafeHttpClient(NetPolicy.make([server.hostport]))
        response = client.request("POST", server.url("/form"), content=b"x=1")
    assert response.body == b"GET" and server.seen[1].body == b""


def test_bodies_are_cut_at_the_size_cap_while_streaming():
    sent = []

    def endless(wfile):
        for _ in range(10_000):  # 640 MB if nobody stops reading
            wfile.write(b"a" * 65_536)
            sent.append(1)

    with serving({"/big": lambda s: Reply(200, chunks=endless)}) as server:
        client = SafeHttpClient(NetPolicy.make([server.hostport], max_bytes=100_000))
        response = client.request("GET", server.url("/big"))
    assert len(response.body) == 100_000 and response.truncated
    assert len(sent) < 1_000


def test_a_compression_bomb_stops_at_the_cap():
    bomb = gzip.compress(b"\0" * 50_000_000)  # ~50 KB on the wire, 50 MB decoded
    routes = {"/bomb": lambda s: Reply(200, bomb, headers={"Content-Encoding": "gzip"},
                                       content_type="application/octet-stream")}
    with serving(routes) as server:
        client = SafeHttpClient(NetPolicy.make([server.hostport], max_bytes=1_000_000))
        started = time.monotonic()
        response = client.request("GET", server.url("/bomb"))
    assert len(response.body) == 1_000_000 and response.truncated
    assert time.monotonic() - started < 5


def test_gzip_bodies_are_decoded():
    routes = {"/z": lambda s: Reply(200, gzip.compress(b"hello " * 100),
                                    headers={"Content-Encoding": "gzip"})}
    with serving(routes) as server:
        response = SafeHttpClient(NetPolicy.make([server.hostport])).request("GET", server.url("/z"))
    assert response.body == b"hello " * 100 and not response.truncated


def test_a_slow_drip_body_is_stopped_by_the_total_deadline():
    stop = threading.Event()

    def drip(wfile):
        while not stop.is_set():
            wfile.write(b"x")
            wfile.flush()
            time.sleep(0.05)

    with serving({"/slow": lambda s: Reply(200, chunks=drip)}) as server:
        client = SafeHttpClient(NetPolicy.make([server.hostport], timeout=1.0))
        started = time.monotonic()
        with pytest.raises(FetchError, match="deadline"):
            client.request("GET", server.url("/slow"))
        took = time.monotonic() - started
        stop.set()
    assert took < 5  # the drip never ends; the margin over 1 s is for a loaded machine


def test_a_hanging_resolver_is_bounded_by_the_deadline():
    release = threading.Event()

    def hanging(host, port):
        release.wait(30)
        return ["93.184.215.14"]

    started = time.monotonic()
    with pytest.raises(FetchError, match="resolving"):
        SafeHttpClient(NetPolicy(timeout=0.5), resolver=hanging).request("GET", "http://slow.example/")
    release.set()
    assert time.monotonic() - started < 5  # not the resolver's 30 s; room for a loaded machine


def test_headers_that_would_lie_about_the_target_are_refused():
    client = SafeHttpClient(NetPolicy())
    for header in ("Host", "Content-Length", "Transfer-Encoding", "Proxy-Authorization"):
        with pytest.raises(BlockedURLError, match="may not be set"):
            client.request("GET", "http://example.com/", headers={header: "x"})


def test_proxy_environment_variables_are_ignored(monkeypatch):
    with serving({"/": lambda s: Reply(200, "direct")}) as server:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")
        monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:1")
        response = SafeHttpClient(NetPolicy.make([server.hostport])).request("GET", server.url("/"))
    assert response.body == b"direct"


def test_tls_is_verified_against_the_name_while_connecting_to_the_pinned_address(tmp_path):
    """The connection goes to the checked IP, but the certificate is checked for the URL's
    name (SNI and Host stay the name), so pinning never weakens TLS."""
    from net_support import serving_tls

    with serving_tls({"/": lambda s: Reply(200, "over tls")}, "secure.test", tmp_path) as (server, ca):
        resolver = lambda host, port: ["127.0.0.1"]  # noqa: E731
        policy = NetPolicy.make([f"secure.test:{server.port}", f"wrong.test:{server.port}"])
        client = SafeHttpClient(policy, resolver=resolver, verify=ca)
        response = client.request("GET", f"https://secure.test:{server.port}/")
        assert response.body == b"over tls" and response.address == "127.0.0.1"
        assert server.seen[0].headers["host"] == f"secure.test:{server.port}"
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED|certificate"):
            client.request("GET", f"https://wrong.test:{server.port}/")  # same IP, wrong name
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED|certificate"):
            SafeHttpClient(policy, resolver=resolver).request(  # default CAs: the test CA is unknown
                "GET", f"https://secure.test:{server.port}/")


def test_ipv6_exceptions_are_written_with_brackets():
    with pytest.raises(BlockedURLError, match=r'add "\[::1\]:8080" to \[tools.http_request\]'):
        check_url("http://[::1]:8080/", DENY_ALL)
    assert check_url("http://[::1]:8080/", NetPolicy.make(["[::1]:8080"])).addresses == ["::1"]


def test_an_allowed_ipv6_loopback_server_is_reached_on_its_pinned_address():
    from net_support import LoopbackServer

    with LoopbackServer({"/": lambda s: Reply(200, "v6")}, host="::1") as server:
        client = SafeHttpClient(NetPolicy.make([server.hostport]))
        response = client.request("GET", server.url("/"))
    assert response.body == b"v6" and response.address == "::1"
