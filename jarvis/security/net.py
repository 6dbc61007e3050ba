"""The SSRF-safe HTTP client under http_request, web_fetch and web_search.

A model chooses the URL, so every request (and every redirect hop) is checked before a byte is
sent: only http and https, no userinfo, no odd IPv4 spellings (`2130706433`, `0x7f.1`,
`0177.0.0.1`), no metadata names, and every address the name resolves to must be a public
unicast address by our own tables (Python's `ipaddress` flags are not trusted: 3.11 calls
`::ffff:127.0.0.1` neither private nor loopback). The name is resolved **once**; the connection
goes to the address that was checked (a pinned httpcore network backend), while the URL, the
Host header and TLS SNI keep the name, so a rebinding resolver cannot swap in 127.0.0.1 between
the check and the connect. Proxies from the environment are ignored for the same reason.
When a redirect leaves the origin, credentials are dropped: Authorization, Cookie and any
header named like a secret (X-Api-Key, Brave's X-Subscription-Token).

The user opens exceptions with `allowed_hosts` (exact `host` or `host:port`; that is how tests
reach loopback servers) and closes more with `blocked_hosts` (`host`, `host:port` or
`*.domain`; blocked wins; a name in Unicode is compared in its IDNA form, as URLs are).
Bodies are streamed and cut at `max_bytes`, gzip/deflate included (decoded with a bounded
decompressor, so a compression bomb stops at the cap), in a bounded number of pieces; the
whole call, redirects included, has one deadline.

httpx and httpcore are imported only when a request is made.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

from jarvis.errors import JarvisError
from jarvis.security.redact import is_secret_name

DEFAULT_MAX_BYTES = 1_048_576
DEFAULT_TIMEOUT = 30.0
DEFAULT_MAX_REDIRECTS = 5
MAX_URL_CHARS = 8_192
MIN_BODY_PIECES = 65_536  # pieces (chunks, reads) a body may come in, at the least
REDIRECT_STATUSES = (301, 302, 303, 307, 308)
USER_AGENT = "jarvis/0.1 (+https://github.com/jarvis)"
# Headers a caller (a model) may not set: they would let it lie about the target or framing.
FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection",
                               "upgrade", "te", "trailer", "proxy-authorization",
                               "proxy-connection", "keep-alive"})

# RFC 9110 field names are tokens; values are visible ASCII, spaces and tabs (no obs-text:
# httpx would raise on anything else, so it is refused here with a clear message).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e]*")

Resolver = Callable[[str, int], list[str]]


class BlockedURLError(JarvisError):
    """The URL (or a redirect) points somewhere the policy forbids; the message is safe to show
    the model and names the setting that would allow it."""


class FetchError(JarvisError):
    """The request failed: connection, timeout, TLS, too many redirects, or a bad response."""


# --- address tables ---------------------------------------------------------------------------
_V4_BLOCKED = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8",  # "this network", unspecified
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",  # private
    "100.64.0.0/10",  # carrier-grade NAT (shared address space)
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, incl. 169.254.169.254 cloud metadata
    "192.0.0.0/24",  # IETF protocol assignments
    "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24",  # documentation
    "192.88.99.0/24",  # 6to4 relay anycast
    "198.18.0.0/15",  # benchmarking
    "224.0.0.0/4",  # multicast
    "240.0.0.0/4",  # reserved, incl. 255.255.255.255 broadcast
))
_V6_GLOBAL = ipaddress.IPv6Network("2000::/3")  # the only global unicast space assigned
_V6_BLOCKED = tuple((ipaddress.IPv6Network(n), why) for n, why in (
    ("::/128", "unspecified"), ("::1/128", "loopback"),
    ("::ffff:0:0/96", "IPv4-mapped"), ("::/96", "IPv4-compatible"),
    ("64:ff9b::/96", "NAT64"), ("64:ff9b:1::/48", "NAT64 (local-use)"),
    ("100::/64", "discard-only"),
    ("2001::/23", "IETF protocol assignment (Teredo and others)"),
    ("2001:db8::/32", "documentation"), ("2002::/16", "6to4 (embeds an IPv4 address)"),
    ("3fff::/20", "documentation"),
    ("fc00::/7", "unique-local (private)"), ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"), ("ff00::/8", "multicast"),
))
# Names that reach cloud metadata services or this machine, whatever DNS says.
METADATA_NAMES = frozenset({
    "metadata.google.internal", "metadata.goog", "metadata", "instance-data",
    "instance-data.ec2.internal", "metadata.azure.internal", "metadata.tencentyun.com",
    "metadata.oraclecloud.com", "100-100-100-200.metadata", "localhost",
})
_BLOCKED_SUFFIXES = (".localhost", ".internal", ".local", ".home.arpa", ".in-addr.arpa",
                     ".ip6.arpa")


def blocked_reason(address: str | ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    """Why `address` may not be reached (None: a public unicast address)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            return "an IPv6 address with a zone"
        for net, why in _V6_BLOCKED:
            if ip in net:
                return f"{why} IPv6 address"
        if ip not in _V6_GLOBAL:
            return "reserved IPv6 address"
        return None
    for net in _V4_BLOCKED:
        if ip in net:
            return _v4_kind(ip)
    return None


def _v4_kind(ip: ipaddress.IPv4Address) -> str:
    if ip in ipaddress.IPv4Network("127.0.0.0/8"):
        return "loopback address"
    if ip in ipaddress.IPv4Network("169.254.0.0/16"):
        return "link-local address (cloud metadata lives here)"
    if ip in ipaddress.IPv4Network("100.64.0.0/10"):
        return "carrier-grade NAT address"
    if ip in ipaddress.IPv4Network("224.0.0.0/4"):
        return "multicast address"
    if ip in ipaddress.IPv4Network("0.0.0.0/8"):
        return "unspecified address"
    if any(ip in ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12",
                                                     "192.168.0.0/16")):
        return "private address"
    return "reserved address"


def valid_header(name: Any, value: Any) -> bool:
    """Whether a request header can be sent as given (a token name, a printable-ASCII value)."""
    return (isinstance(name, str) and isinstance(value, str) and _TOKEN.fullmatch(name) is not None
            and _FIELD_VALUE.fullmatch(value) is not None)


def legacy_ipv4(host: str) -> str | None:
    """The dotted quad a non-canonical IPv4 spelling stands for (`2130706433`, `0x7f.1`,
    `0177.0.0.1`, `127.1`), which resolvers accept; None when `host` is not one."""
    if not host or not all(c in "0123456789abcdefxABCDEFX." for c in host):
        return None
    try:
        packed = socket.inet_aton(host)
    except OSError:
        return None
    canonical = socket.inet_ntoa(packed)
    return None if canonical == host else canonical


# --- policy -----------------------------------------------------------------------------------
def canonical_host(host: str) -> str:
    """An IP address in its one canonical spelling (`2606:4700:0::1111` -> `2606:4700::1111`),
    so that policy entries and URLs compare as addresses; names are returned as they are."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def _host_key(entry: str) -> tuple[str, int | None]:
    """"host", "host:port", "[v6]:port" -> (lowercase host, port or None)."""
    entry = entry.strip().lower().rstrip(".")
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        port = rest.lstrip(":")
        return canonical_host(host), int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host.rstrip("."), int(port)
    return canonical_host(entry), None


def _policy_entry(entry: str) -> str:
    """A host entry as URLs are compared: lowercase, and a non-ASCII name in its IDNA form
    (`bücher.example` -> `xn--bcher-kva.example`), the form httpx gives a URL's host; without
    it `blocked_hosts = ["bücher.example"]` blocked nothing. A name IDNA refuses is kept as
    written (no URL host can equal it)."""
    entry = entry.strip().lower()
    if entry.isascii():
        return entry
    prefix = "*." if entry.startswith("*.") else "." if entry.startswith(".") else ""
    rest = entry[len(prefix):]
    host, sep, port = rest.rpartition(":") if rest.count(":") == 1 else (rest, "", "")
    if sep and not port.isdigit():
        host, sep, port = rest, "", ""
    from jarvis._lazy import load_module

    httpx = load_module("httpx")  # worker threads: see load_module

    try:
        host = httpx.URL(f"http://{host}/").raw_host.decode("ascii")
    except (httpx.InvalidURL, ValueError, UnicodeError):
        return entry
    return f"{prefix}{host}{sep}{port}"


@dataclass(frozen=True, slots=True)
class NetPolicy:
    """Where requests may go, how much they may read, and how long they may take."""

    allowed_hosts: tuple[str, ...] = ()
    blocked_hosts: tuple[str, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout: float = DEFAULT_TIMEOUT
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    setting: str = "[tools.http_request] allowed_hosts"  # named in refusals: where to allow

    def __post_init__(self) -> None:
        for name in ("allowed_hosts", "blocked_hosts"):
            object.__setattr__(self, name, tuple(_policy_entry(str(e))
                                                 for e in getattr(self, name)))

    @classmethod
    def make(cls, allowed_hosts: Iterable[str] | str | None = None,
             blocked_hosts: Iterable[str] | str | None = None, **limits: Any) -> NetPolicy:
        def norm(value: Iterable[str] | str | None) -> tuple[str, ...]:
            if value is None:
                return ()
            if isinstance(value, str):
                value = [value]
            return tuple(str(v) for v in value if str(v).strip())

        return cls(norm(allowed_hosts), norm(blocked_hosts),
                   **{k: v for k, v in limits.items() if v is not None})

    def is_allowed(self, host: str, port: int) -> bool:
        for entry in self.allowed_hosts:
            h, p = _host_key(entry)
            if h == host and p in (None, port):
                return True
        return False

    def is_blocked(self, host: str, port: int) -> bool:
        for entry in self.blocked_hosts:
            if entry.startswith("*.") or entry.startswith("."):
                suffix = "." + entry.lstrip("*.").rstrip(".")
                if host.endswith(suffix) or host == suffix[1:]:
                    return True
                continue
            h, p = _host_key(entry)
            if h == host and p in (None, port):
                return True
        return False

    def blocked_address(self, addresses: Iterable[str], port: int) -> str | None:
        """The first of `addresses` (what the name resolved to) that blocked_hosts names as an
        address: blocking 93.184.215.14 must hold for every name that points there."""
        for address in addresses:
            if self.is_blocked(canonical_host(address), port):
                return address
        return None


@dataclass(slots=True)
class Target:
    """A checked URL: where to connect (the pinned addresses) and what to call it."""

    url: str
    scheme: str
    host: str
    port: int
    addresses: list[str]
    allowed_by_user: bool = False


def default_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def _resolve(resolver: Resolver, host: str, port: int, timeout: float) -> list[str]:
    """Resolve in a helper thread, so a resolver that hangs cannot outlive the deadline."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = resolver(host, port)
        except BaseException as exc:  # reported to the caller below
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True, name="jarvis-resolve")
    thread.start()
    thread.join(max(timeout, 0.01))
    if thread.is_alive():
        raise FetchError(f"resolving {host} took longer than {timeout:.3g} s")
    if "error" in box:
        raise FetchError(f"cannot resolve {host}: {box['error']}")
    return [str(a) for a in box.get("value") or []]


def check_url(url: Any, policy: NetPolicy, resolver: Resolver = default_resolver,
              timeout: float = DEFAULT_TIMEOUT) -> Target:
    """Check `url` against `policy`, resolving its host once; raise BlockedURLError (or
    FetchError when the name does not resolve) with a message the model can read."""
    from jarvis._lazy import load_module

    httpx = load_module("httpx")  # worker threads: see load_module

    if not isinstance(url, str) or not url.strip():
        raise BlockedURLError("url must be a non-empty string")
    url = url.strip()
    if len(url) > MAX_URL_CHARS:
        raise BlockedURLError(f"url is {len(url)} characters; the limit is {MAX_URL_CHARS}")
    if any(ord(c) < 0x21 or c == "\\" for c in url):
        raise BlockedURLError("url contains spaces, control characters or backslashes")
    from urllib.parse import urlsplit

    try:
        early = urlsplit(url).hostname or ""
    except ValueError:
        early = ""
    legacy = legacy_ipv4(early)
    if legacy is not None:
        raise BlockedURLError(f"{early} is a non-standard spelling of the IPv4 address {legacy}; "
                              f"write addresses as dotted quads")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise BlockedURLError(f"invalid url: {exc}") from None
    scheme = parsed.scheme.lower()
    if scheme not in ("http", "https"):
        raise BlockedURLError(f"only http and https URLs may be fetched, not {scheme}:"
                              if scheme else "the url needs http:// or https://")
    if parsed.userinfo:
        raise BlockedURLError("URLs with a user name or password before '@' are refused "
                              "(send credentials in headers instead)")
    host = canonical_host(parsed.raw_host.decode("ascii", "replace").lower().rstrip("."))
    if not host:
        raise BlockedURLError("the url has no host")
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise BlockedURLError(f"port {parsed.port} is not a TCP port (1-65535)")
    port = parsed.port or (443 if scheme == "https" else 80)
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if policy.is_blocked(host, port):
        raise BlockedURLError(f"{where} is in blocked_hosts")
    if "%" in host:
        raise BlockedURLError("percent-encoded hosts and IPv6 zone ids are refused")
    if policy.is_allowed(host, port):
        addresses = [host] if _is_ip(host) else _resolve(resolver, host, port, timeout)
        if not addresses:
            raise FetchError(f"cannot resolve {host}: no addresses")
        _check_blocked_addresses(policy, host, port, addresses)
        return Target(str(parsed), scheme, host, port, addresses, allowed_by_user=True)
    hint = f'; to allow it, add "{where}" to {policy.setting} in config.toml'
    addresses = public_addresses(host, port, resolver, timeout, hint=hint, policy=policy)
    return Target(str(parsed), scheme, host, port, addresses)


def public_addresses(host: str, port: int, resolver: Resolver = default_resolver,
                     timeout: float = DEFAULT_TIMEOUT, *, hint: str = "",
                     policy: NetPolicy | None = None) -> list[str]:
    """The addresses `host` (a lowercase name or canonical IP address) stands for, resolved
    once, every one a public unicast address; BlockedURLError saying why not (`hint`
    appended: the setting that would allow it), FetchError when the name does not resolve.
    The caller connects to these addresses only (pinned), never to a new lookup's. `policy`:
    its blocked_hosts are checked against the addresses too."""
    legacy = legacy_ipv4(host)
    if legacy is not None:
        raise BlockedURLError(f"{host} is a non-standard spelling of the IPv4 address {legacy}; "
                              f"write addresses as dotted quads")
    if host in METADATA_NAMES or host.endswith(_BLOCKED_SUFFIXES):
        raise BlockedURLError(f"{host} is a local or cloud-metadata name" + hint)
    if _is_ip(host):
        addresses = [host]
    else:
        addresses = _resolve(resolver, host, port, timeout)
        if not addresses:
            raise FetchError(f"cannot resolve {host}: no addresses")
    if policy is not None:
        _check_blocked_addresses(policy, host, port, addresses)
    for address in addresses:
        why = blocked_reason(address)
        if why is not None:
            shown = host if address == host else f"{host} ({address})"
            article = "an" if why.startswith(("IPv", "unspecified", "IETF", "NAT64")) else "a"
            raise BlockedURLError(f"{shown} is {article} {why}: requests to non-public "
                                  f"addresses are refused" + hint)
    return addresses


def _check_blocked_addresses(policy: NetPolicy, host: str, port: int,
                             addresses: list[str]) -> None:
    hit = policy.blocked_address(addresses, port)
    if hit is not None:
        raise BlockedURLError(f"{host} resolves to {hit}, which is in blocked_hosts")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# --- the pinned transport ---------------------------------------------------------------------
def _left(deadline: float, timeout: float | None, error: type[Exception]) -> float:
    """The time an operation may take: its own timeout, never past the call's deadline."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the deadline passed")
    return left if timeout is None else min(timeout, left)


def _deadline_stream(stream: Any, deadline: float) -> Any:
    """A network stream whose every read, write and TLS handshake ends by `deadline`.
    httpcore's timeouts are per operation, so a server dripping one header byte per second
    would otherwise hold a call for as long as it liked."""
    import httpcore

    class DeadlineStream(httpcore.NetworkStream):
        def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
            return stream.read(max_bytes, _left(deadline, timeout, httpcore.ReadTimeout))

        def write(self, buffer: bytes, timeout: float | None = None) -> None:
            view = memoryview(buffer)
            for start in range(0, len(view), 65_536):  # a slow reader: re-check per piece
                stream.write(bytes(view[start:start + 65_536]),
                             _left(deadline, timeout, httpcore.WriteTimeout))

        def close(self) -> None:
            stream.close()

        def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                      timeout: float | None = None) -> Any:
            return _deadline_stream(stream.start_tls(
                ssl_context, server_hostname, _left(deadline, timeout, httpcore.ConnectTimeout)),
                deadline)

        def get_extra_info(self, info: str) -> Any:
            return stream.get_extra_info(info)

    return DeadlineStream()


def _pinned_backend(pins: dict[tuple[str, int], list[str]], connected: list[str],
                    deadline: float = math.inf) -> Any:
    """An httpcore network backend that connects only to the addresses checked for a
    (host, port): the name is never looked up again. Every connect attempt and every stream
    operation ends by `deadline` (one deadline for the call, however many addresses or
    bytes a server offers)."""
    import httpcore

    class PinnedBackend(httpcore.NetworkBackend):
        def __init__(self) -> None:
            self._inner = httpcore.SyncBackend()

        def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                        local_address: str | None = None,
                        socket_options: Any = None) -> Any:
            addresses = pins.get((canonical_host(host.lower().strip("[]").rstrip(".")), port))
            if not addresses:
                raise httpcore.ConnectError(f"{host}:{port} was not checked; refusing to connect")
            last: Exception | None = None
            for address in addresses:
                try:
                    stream = self._inner.connect_tcp(
                        address, port, _left(deadline, timeout, httpcore.ConnectTimeout),
                        local_address, socket_options)
                except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                    last = exc
                    if time.monotonic() >= deadline:
                        break
                    continue
                connected.append(address)
                return _deadline_stream(stream, deadline)
            assert last is not None
            raise last

        def connect_unix_socket(self, path: str, timeout: float | None = None,
                                socket_options: Any = None) -> Any:
            raise httpcore.ConnectError("unix sockets are not reachable from tools")

        def sleep(self, seconds: float) -> None:
            time.sleep(seconds)

    return PinnedBackend()


@dataclass(slots=True)
class HttpResponse:
    """A response read under the policy's limits."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    url: str
    truncated: bool = False
    redirects: list[str] = field(default_factory=list)
    address: str | None = None
    elapsed: float = 0.0

    def header(self, name: str, default: str = "") -> str:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return default

    @property
    def content_type(self) -> str:
        return self.header("content-type").split(";")[0].strip().lower()

    @property
    def charset(self) -> str | None:
        for part in self.header("content-type").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                return value.strip('"').strip()
        return None


class SafeHttpClient:
    """Makes requests under a NetPolicy; one instance may serve many calls (thread-safe:
    every call builds its own pinned transport)."""

    def __init__(self, policy: NetPolicy | None = None, *,
                 resolver: Resolver = default_resolver, verify: Any = True) -> None:
        self.policy = policy or NetPolicy()
        self.resolver = resolver
        self.verify = verify
        self._ssl: Any = None  # built once: loading the CA bundle costs ~20 ms per client
        self._ssl_lock = threading.Lock()

    def _ssl_context(self) -> Any:
        if not (self.verify is True or isinstance(self.verify, str)):
            return self.verify  # False, or an SSLContext the caller made
        with self._ssl_lock:
            if self._ssl is None:
                import ssl

                import certifi

                self._ssl = ssl.create_default_context(
                    cafile=self.verify if isinstance(self.verify, str) else certifi.where())
            return self._ssl

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                params: dict[str, Any] | None = None, content: bytes | None = None,
                timeout: float | None = None, follow_redirects: bool = True,
                max_bytes: int | None = None) -> HttpResponse:
        """One request, redirects followed (each hop re-checked), body read up to max_bytes.
        Raises BlockedURLError or FetchError."""
        from jarvis._lazy import load_module

        httpx = load_module("httpx")  # worker threads: see load_module

        policy = self.policy
        limit = policy.max_bytes if max_bytes is None else max_bytes
        try:
            total = policy.timeout if timeout is None else min(float(timeout), policy.timeout)
        except (TypeError, ValueError):
            total = math.nan
        if not (math.isfinite(total) and total > 0):  # NaN would disable every deadline check
            raise FetchError(f"timeout must be a positive number of seconds, not {timeout!r}")
        started = time.monotonic()
        deadline = started + total
        method = method.upper()
        send_headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "gzip, deflate"}
        for key, value in (headers or {}).items():
            if not valid_header(key, value):
                raise BlockedURLError(f"header {str(key)[:50]!r}: names are letters, digits and "
                                      f"!#$%&'*+-.^_`|~; values printable ASCII")
            if key.lower() in FORBIDDEN_HEADERS:
                raise BlockedURLError(f"header {key!r} may not be set")
            send_headers[key] = value
        pins: dict[tuple[str, int], list[str]] = {}
        connected: list[str] = []
        transport = httpx.HTTPTransport(verify=self._ssl_context(), retries=0)
        transport._pool._network_backend = _pinned_backend(pins, connected,  # noqa: SLF001
                                                           deadline)
        redirects: list[str] = []
        current = url
        first_origin: tuple[str, str, int] | None = None
        with httpx.Client(transport=transport, trust_env=False, follow_redirects=False) as client:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FetchError(f"the request took longer than {total:g} s (the deadline)")
                target = check_url(current, policy, self.resolver, left)
                pins[(target.host, target.port)] = target.addresses
                origin = (target.scheme, target.host, target.port)
                if first_origin is None:
                    first_origin = origin
                elif origin != first_origin:
                    # Credentials chosen for one site must not be handed to another: not
                    # only Authorization and Cookie (what httpx and curl drop) but any header
                    # named like a secret, e.g. Brave's X-Subscription-Token or X-Api-Key.
                    for key in [k for k in send_headers if _credential_header(k)]:
                        del send_headers[key]
                left = deadline - time.monotonic()
                # httpx's `params=` replaces the URL's own query (`?a=1` and params {b: 2}
                # sent only b=2, silently); merged, the URL keeps it and params add to it.
                send_url = (httpx.URL(target.url).copy_merge_params(params)
                            if params and not redirects else target.url)
                try:
                    request = client.build_request(
                        method, send_url, headers=send_headers, content=content,
                        timeout=httpx.Timeout(left, connect=min(left, 10.0)))
                    response = client.send(request, stream=True)
                except httpx.TimeoutException:
                    raise FetchError(f"timed out connecting to or reading from {target.host} "
                                     f"(deadline {total:g} s)") from None
                except httpx.HTTPError as exc:
                    raise FetchError(f"request to {target.host} failed: {exc}") from None
                try:
                    location = response.headers.get("location")
                    if (follow_redirects and response.status_code in REDIRECT_STATUSES
                            and location):
                        if len(redirects) >= policy.max_redirects:
                            raise FetchError(f"too many redirects (more than "
                                             f"{policy.max_redirects}); last: {location[:200]}")
                        current = urljoin(str(response.url), location)
                        redirects.append(current)
                        if response.status_code == 303 or (
                                response.status_code in (301, 302) and method == "POST"):
                            method = "GET" if method != "HEAD" else method
                            content = None
                        continue
                    body, truncated = _read_body(response, limit, deadline, total)
                    return HttpResponse(
                        status=response.status_code, reason=response.reason_phrase,
                        headers=[(k, v) for k, v in response.headers.multi_items()],
                        body=body, url=str(response.url), truncated=truncated,
                        redirects=redirects, address=connected[-1] if connected else None,
                        elapsed=time.monotonic() - started)
                finally:
                    response.close()


def _credential_header(name: str) -> bool:
    return name.lower() in ("authorization", "cookie") or is_secret_name(name)


def _read_body(response: Any, limit: int, deadline: float, total: float) -> tuple[bytes, bool]:
    """At most `limit` decoded bytes of the body; True when more was there."""
    from jarvis._lazy import load_module

    httpx = load_module("httpx")  # worker threads: see load_module

    encoding = response.headers.get("content-encoding", "").strip().lower()
    decoder = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(47)  # 47: gzip or zlib header, detected
    chunks: list[bytes] = []
    size = 0
    # Each piece costs ~25 us of Python whatever its size: 3,000,000 one-byte chunks (18 MB
    # on the wire, 3 MB of body) kept a thread at full CPU until the deadline. Pieces are
    # bounded too, so that only a body of under 16 bytes a piece on average meets the bound.
    max_pieces = max(MIN_BODY_PIECES, limit // 16)
    pieces = 0
    try:
        for raw in response.iter_raw():  # as received: a chunk size would wait to fill it
            if time.monotonic() > deadline:
                raise FetchError(f"reading the body took longer than {total:g} s (the deadline)")
            pieces += 1
            if pieces > max_pieces:
                raise FetchError(f"the server sent the body in more than {max_pieces} pieces "
                                 f"({size} bytes so far); refused")
            data = raw
            if decoder is not None:
                try:
                    data = decoder.decompress(raw, limit - size + 1)
                except zlib.error as exc:
                    raise FetchError(f"the {encoding} body is corrupt: {exc}") from None
            chunks.append(data)
            size += len(data)
            if size > limit or (decoder is not None and decoder.unconsumed_tail):
                body = b"".join(chunks)
                return body[:limit], True
    except httpx.TimeoutException:
        raise FetchError(f"timed out reading the body (deadline {total:g} s)") from None
    except httpx.HTTPError as exc:
        raise FetchError(f"reading the body failed: {exc}") from None
    return b"".join(chunks), False
