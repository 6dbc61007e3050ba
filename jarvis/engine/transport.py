"""How OpenAICompatEngine talks HTTP: through the `openai` package, or a small built-in client.

Both speak the same chat-completions wire format and hand the engine plain dicts, and both
report failures as WireError, so the engine parses replies and classifies failures (retry,
rejected tools, unreachable, ...) in one place.

- OpenAITransport: the `openai` package (the SDK's and serve's for https, a proxy from the
  environment, or when asked for). Importing openai costs ~0.7-1 s of CPU, which is paid once
  in a long-lived process.
- HTTPTransport: the standard library's http.client with a small keep-alive pool (the `jarvis
  ask` default, where the openai import would dominate start-up: see bench/bench_agent.py;
  and, through `auto_client`, the SDK's and `jarvis serve`'s wherever it sends what the openai
  package would: it costs ~0.2 ms of CPU a request against ~1.3 ms).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin, urlsplit

from jarvis.engine.wire import (
    ACCEPT_ENCODING,
    BodyDecoder,
    Deadline,
    WireError,
    parse_json,
    read_body,
    sse_events,
    too_large,
)

MAX_ERROR_BODY = 64_000
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # default [engine] max_response_bytes
MAX_SSE_LINE = 8 * 1024 * 1024
READ_SIZE = 64 * 1024

MAX_REDIRECTS = 5
REDIRECTS = frozenset({301, 302, 303, 307, 308})

__all__ = ["HTTPTransport", "OpenAITransport", "WireError", "auto_client", "error_message",
           "openai_wire_error"]


def auto_client(base_url: str) -> str:
    """The client `[engine] client = "auto"` means for the SDK and `jarvis serve`: the built-in
    one ("http") where it sends the same request over the same kind of connection as the
    openai package (a plain http:// URL without credentials or a query, no HTTP proxy in the
    environment), else "openai" (https with its CA bundle, basic auth from the URL, a proxy
    it would take from the environment)."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or parts.username is not None or parts.query or parts.fragment:
        return "openai"
    if any(value and name.lower() in ("http_proxy", "all_proxy")
           for name, value in os.environ.items()):
        return "openai"
    return "http"


def error_message(body: Any, fallback: str) -> str:
    """The human part of an OpenAI-style error body."""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:1000]
        if isinstance(inner, str) and inner:
            return inner[:1000]
        detail = body.get("detail") or body.get("message")
        if detail:
            return str(detail)[:1000]
        return json.dumps(body)[:300]
    if isinstance(body, str) and body.strip():
        text = body.strip()
        if _HTML.match(text):
            # A proxy's or server's HTML error page: its title says it, the markup does not.
            title = _TITLE.search(text)
            name = " ".join(title.group(1).split())[:120] if title else ""
            # Not the fallback either: the openai client's message embeds the same page.
            return f"an HTML error page{': ' + name if name else ''}"
        return text[:300]
    return fallback


_HTML = re.compile(r"\s*(<!doctype html|<html|<head|<body|<\?xml|<h1|<title)", re.I)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.I | re.S)


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


class HTTPTransport:
    """A minimal OpenAI-wire client on http.client (thread-safe, keep-alive pool)."""

    def __init__(self, base_url: str, api_key: str, timeout: float, connect_timeout: float,
                 max_idle: int = 16, max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self.max_response_bytes = max_response_bytes
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    # --- connections -------------------------------------------------------------------------
    def _new_connection(self) -> http.client.HTTPConnection:
        if self.https:
            import ssl  # only for https: local servers never pay for it

            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=self.connect_timeout,
                context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except ConnectionRefusedError as exc:
            raise WireError("refused", f"connection refused ({exc})") from exc
        except TimeoutError as exc:
            raise WireError("timeout", f"no connection within {self.connect_timeout:g} s") from exc
        except OSError as exc:
            raise WireError("refused", f"cannot connect: {exc}") from exc
        assert conn.sock is not None
        conn.sock.settimeout(self.timeout)
        return conn

    def _checkout(self) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                return self._idle.pop(), True
        return self._new_connection(), False

    def _checkin(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    # --- requests ----------------------------------------------------------------------------
    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.api_key}", "Accept": "application/json",
                   "User-Agent": "jarvis"}
        if has_body:
            headers["Content-Type"] = "application/json"
        return headers

    def _send(self, method: str, path: str, body: dict[str, Any] | None, deadline: Deadline
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send the request; the response once its headers are in. A 307/308 to this same
        server is followed with the same request (as the openai package does); another
        redirect is a status error naming where it points."""
        data = json.dumps(body).encode() if body is not None else None
        target = self.prefix + path
        for _ in range(MAX_REDIRECTS + 1):
            conn, response = self._send_once(method, target, data, deadline)
            if response.status not in REDIRECTS:
                return conn, response
            location = response.getheader("Location") or ""
            response.close()
            conn.close()
            followed = self._same_server(target, location) if response.status in (307, 308) else None
            if followed is None:
                raise WireError("status", f"the server redirects to {location[:300]!r}; point "
                                          f"the engine's URL there", response.status)
            target = followed
        raise WireError("status", f"more than {MAX_REDIRECTS} redirects", response.status)

    def _same_server(self, target: str, location: str) -> str | None:
        """The path to re-send to, when `location` is on this same server (else None)."""
        scheme = "https" if self.https else "http"
        host = f"[{self.host}]" if ":" in self.host else self.host
        here = f"{scheme}://{host}:{self.port}"
        there = urlsplit(urljoin(here + target, location))
        if (there.scheme, there.hostname, there.port or (443 if there.scheme == "https" else 80)) \
                != (scheme, self.host, self.port) or not there.path:
            return None
        return there.path + (f"?{there.query}" if there.query else "")

    def _send_once(self, method: str, target: str, data: bytes | None, deadline: Deadline
                   ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        for attempt in range(2):
            conn, reused = self._checkout()
            deadline.arm(conn.sock)
            try:
                conn.request(method, target, body=data, headers=self._headers(data is not None))
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                if deadline.expired:
                    raise deadline.error() from exc
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: use a new one
                raise WireError("reset", f"connection lost: {exc}") from exc
            except TimeoutError as exc:
                conn.close()
                raise WireError("timeout", f"no answer within {self.timeout:g} s") from exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if deadline.expired:
                    raise deadline.error() from exc
                raise WireError("reset", f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def _fail(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> WireError:
        try:
            raw = response.read(MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException):
            raw = b""
        conn.close()
        try:
            body: Any = json.loads(raw)
        except (ValueError, RecursionError):
            body = raw.decode("utf-8", "replace")
        return WireError("status", error_message(body, response.reason or "error"), response.status,
                         _retry_after(response.getheader("Retry-After")))

    def _json(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        deadline = Deadline(self.timeout)
        try:
            conn, response = self._send(method, path, body, deadline)
            if response.status >= 400:
                raise self._fail(conn, response)
            try:
                raw = read_body(iter(lambda: response.read1(READ_SIZE), b""), deadline,
                                self.max_response_bytes)
                if not response.isclosed():
                    response.read()  # read1 leaves a drained response open; read() ends it
            except WireError:
                response.close()
                conn.close()
                raise
            except TimeoutError as exc:
                response.close()
                conn.close()
                raise WireError("timeout", f"no answer within {self.timeout:g} s") from exc
            except (OSError, http.client.HTTPException) as exc:
                response.close()
                conn.close()
                if deadline.expired:
                    raise deadline.error() from exc
                raise WireError("reset", f"connection lost while reading: {exc}") from exc
        finally:
            deadline.cancel()
        if response.will_close:
            conn.close()
        else:
            self._checkin(conn)
        return parse_json(raw)

    def chat(self, params: dict[str, Any]) -> dict[str, Any]:
        data = self._json("POST", "/chat/completions", params)
        if not isinstance(data, dict):
            raise WireError("protocol", "the reply is not a JSON object")
        return data

    def chat_stream(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send the request now (errors raise here); iterate the returned chunks."""
        deadline = Deadline(self.timeout)
        try:
            conn, response = self._send("POST", "/chat/completions", params, deadline)
            if response.status >= 400:
                raise self._fail(conn, response)
        except BaseException:
            deadline.cancel()
            raise
        return self._events(conn, response, deadline)

    def _events(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse,
                deadline: Deadline) -> Iterator[dict[str, Any]]:
        try:
            yield from sse_events(iter(lambda: response.read1(READ_SIZE), b""), deadline,
                                  self.max_response_bytes, MAX_SSE_LINE, error_message)
        except TimeoutError as exc:
            raise WireError("timeout", f"the stream stalled for {self.timeout:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            if deadline.expired:
                raise deadline.error() from exc
            raise WireError("reset", f"the stream broke off: {exc}") from exc
        finally:
            deadline.cancel()
            response.close()
            conn.close()  # streams end with the connection; never reuse it

    def models(self) -> list[str]:
        data = self._json("GET", "/models")
        items = data.get("data") if isinstance(data, dict) else None
        return [str(m["id"]) for m in items or [] if isinstance(m, dict) and m.get("id")]


class OpenAITransport:
    """The same surface on the `openai` package (sync client, no retries of its own).

    Bodies are read as raw bytes (`with_streaming_response`), so the deadline and the byte
    budget apply here exactly as in HTTPTransport; the engine parses the same JSON either way.
    """

    def __init__(self, base_url: str, api_key: str, timeout: float, connect_timeout: float,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        openai = openai_module()
        DefaultHttpxClient, OpenAI, Timeout = (  # noqa: N806 - the package's class names
            openai.DefaultHttpxClient, openai.OpenAI, openai.Timeout)

        self.client = OpenAI(base_url=base_url, api_key=api_key,
                             timeout=Timeout(timeout, connect=connect_timeout), max_retries=0,
                             http_client=DefaultHttpxClient(
                                 transport=_bounded_transport(max_response_bytes)))
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes

    def _error(self, exc: BaseException, deadline: Deadline) -> BaseException:
        if deadline.expired:
            return deadline.error()
        if isinstance(exc, WireError):
            return exc
        mapped = openai_wire_error(exc, self.timeout)
        if mapped is exc and type(exc).__module__.split(".")[0].startswith(("httpx", "httpcore")):
            # Raised while reading the body (openai wraps only the request itself).
            if "Timeout" in type(exc).__name__:
                return WireError("timeout", f"no answer within {self.timeout:g} s")
            return WireError("reset", f"connection lost while reading: {exc}")
        return mapped

    def _open(self, params: dict[str, Any], deadline: Deadline) -> Any:
        return self._request(lambda: self.client.chat.completions.with_streaming_response.create(
            **params).__enter__(), deadline)

    def _request(self, open_response: Any, deadline: Deadline) -> Any:
        """Send the request; the response once its headers are in (errors as WireError).

        The openai client does not show its socket before the headers are in, so until then
        the request runs on a helper thread and the caller waits only until the deadline (a
        server that trickles its headers would otherwise hold it); a response that arrives
        after the caller gave up is closed by the helper.
        """
        from concurrent.futures import Future
        from concurrent.futures import TimeoutError as FutureTimeout

        box: Future[Any] = Future()
        lock = threading.Lock()
        gave_up = [False]

        def send() -> None:
            _request_deadline.value = deadline  # read by the bounded httpx transport
            try:
                response = open_response()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                box.set_exception(exc)
                return
            with lock:
                if not gave_up[0]:
                    box.set_result(response)
                    return
            response.close()

        threading.Thread(target=send, name="jarvis-engine-request", daemon=True).start()
        try:
            response = box.result(timeout=max(0.0, deadline.remaining()))
        except FutureTimeout:
            with lock:
                gave_up[0] = True
                late = box.done() and box.exception() is None
            if late:  # it arrived as the deadline passed: ours to close
                box.result().close()
            deadline.expire()  # shuts the helper's socket, if armed: the helper ends as well
            raise deadline.error() from None
        except Exception as exc:
            raise self._error(exc, deadline) from exc
        deadline.arm(_socket_of(response.http_response))
        return response

    def chat(self, params: dict[str, Any]) -> dict[str, Any]:
        deadline = Deadline(self.timeout)
        try:
            raw = self._read(self._open(params, deadline), deadline)
        finally:
            deadline.cancel()
        data = parse_json(raw)
        if not isinstance(data, dict):
            raise WireError("protocol", "the reply is not a JSON object")
        return data

    def chat_stream(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        deadline = Deadline(self.timeout)
        try:
            response = self._open(params, deadline)
        except BaseException:
            deadline.cancel()
            raise
        return self._events(response, deadline)

    def _events(self, response: Any, deadline: Deadline) -> Iterator[dict[str, Any]]:
        try:
            yield from sse_events(response.iter_bytes(), deadline, self.max_response_bytes,
                                  MAX_SSE_LINE, error_message)
        except Exception as exc:
            raise self._error(exc, deadline) from exc
        finally:
            deadline.cancel()
            response.close()

    def models(self) -> list[str]:
        deadline = Deadline(self.timeout)
        try:
            response = self._request(
                lambda: self.client.models.with_streaming_response.list().__enter__(), deadline)
            raw = self._read(response, deadline)
        finally:
            deadline.cancel()
        data = parse_json(raw, "the model list")
        items = data.get("data") if isinstance(data, dict) else None
        return [str(m["id"]) for m in items or [] if isinstance(m, dict) and m.get("id")]

    def _read(self, response: Any, deadline: Deadline) -> bytes:
        try:
            return read_body(response.iter_bytes(), deadline, self.max_response_bytes)
        except Exception as exc:
            raise self._error(exc, deadline) from exc
        finally:
            response.close()

    def close(self) -> None:
        self.client.close()


_request_deadline = threading.local()  # the Deadline of the request this thread sends


def _bounded_transport(limit: int) -> Any:
    """An httpx transport under the openai client that keeps its own reads bounded.

    The openai client reads some bodies itself (an error status's body, whole), on the
    request's helper thread, which the caller stops waiting for at the deadline: unbounded,
    an endless error body was read into memory long after the caller gave up (2 GB in 15 s).
    Here every body stops at `limit` bytes and at the request's deadline, and a new
    connection's socket is shut at the deadline (so trickled headers end the helper too).
    """
    import importlib

    from jarvis._lazy import load_module

    DefaultHttpxClient = load_module("openai").DefaultHttpxClient  # noqa: N806
    DEFAULT_CONNECTION_LIMITS = load_module("openai._constants").DEFAULT_CONNECTION_LIMITS  # noqa: N806

    # The httpx the openai package is built on (some builds use their own copy, httpx2).
    httpx = importlib.import_module(DefaultHttpxClient.__mro__[1].__module__.split(".")[0])

    class Capped(httpx.SyncByteStream):
        def __init__(self, stream: Any, deadline: Deadline | None, streamed: bool,
                     decoder: BodyDecoder) -> None:
            self.stream = stream
            self.deadline = deadline
            self.streamed = streamed
            self.decoder = decoder

        def __iter__(self) -> Iterator[bytes]:
            size = 0
            for chunk in self.stream:
                if self.deadline is not None:
                    self.deadline.check()
                size += len(chunk)
                if size > limit:
                    raise too_large(limit, streamed=self.streamed)
                yield self.decoder.decode(chunk) if self.decoder.active else chunk

        def close(self) -> None:
            self.stream.close()

    class Bounded(httpx.HTTPTransport):
        def handle_request(self, request: Any) -> Any:
            deadline = getattr(_request_deadline, "value", None)
            if deadline is not None:
                outer = request.extensions.get("trace")

                def trace(name: str, info: dict[str, Any]) -> None:
                    if name in ("connection.connect_tcp.complete",
                                "connection.connect_unix_socket.complete"):
                        stream = info.get("return_value")
                        deadline.arm(stream.get_extra_info("socket") if stream else None)
                    if outer is not None:
                        outer(name, info)

                request.extensions = {**request.extensions, "trace": trace}
            request.headers["Accept-Encoding"] = ACCEPT_ENCODING
            response = super().handle_request(request)
            streamed = response.headers.get("content-type", "").startswith("text/event-stream")
            try:
                decoder = _take_encoding(response, limit, streamed)
            except WireError:
                response.close()
                raise
            response.stream = Capped(response.stream, deadline, streamed, decoder)
            return response

    return Bounded(limits=DEFAULT_CONNECTION_LIMITS)


def bounded_async_client(limit: int) -> Any:
    """For openai.AsyncOpenAI: every body stops at `limit` bytes (the async client reads a
    whole reply itself; its deadline is the caller's asyncio.wait_for)."""
    import importlib

    from jarvis._lazy import load_module

    DefaultAsyncHttpxClient = load_module("openai").DefaultAsyncHttpxClient  # noqa: N806
    DEFAULT_CONNECTION_LIMITS = load_module("openai._constants").DEFAULT_CONNECTION_LIMITS  # noqa: N806

    httpx = importlib.import_module(DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0])

    class Capped(httpx.AsyncByteStream):
        def __init__(self, stream: Any, streamed: bool, decoder: BodyDecoder) -> None:
            self.stream = stream
            self.streamed = streamed
            self.decoder = decoder

        async def __aiter__(self) -> Any:
            size = 0
            async for chunk in self.stream:
                size += len(chunk)
                if size > limit:
                    raise too_large(limit, streamed=self.streamed)
                yield self.decoder.decode(chunk) if self.decoder.active else chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Bounded(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = ACCEPT_ENCODING
            response = await super().handle_async_request(request)
            streamed = response.headers.get("content-type", "").startswith("text/event-stream")
            try:
                decoder = _take_encoding(response, limit, streamed)
            except WireError:
                await response.aclose()
                raise
            response.stream = Capped(response.stream, streamed, decoder)
            return response

    return DefaultAsyncHttpxClient(transport=Bounded(limits=DEFAULT_CONNECTION_LIMITS))


def _take_encoding(response: Any, limit: int, streamed: bool) -> BodyDecoder:
    """The bounded decoder for the response's Content-Encoding, which is then removed from
    its headers so that httpx does not decode the body again (unbounded)."""
    decoder = BodyDecoder(response.headers.get("content-encoding", ""), limit, streamed)
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]
    if decoder.active and "content-length" in response.headers:
        del response.headers["content-length"]  # it counted the encoded bytes
    return decoder


def _socket_of(response: Any) -> Any:
    """The socket under an httpx response (its network_stream extension), if it says."""
    try:
        stream = response.extensions.get("network_stream")
        return stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # noqa: BLE001 - without it, the deadline is checked between reads
        return None


def openai_module() -> Any:
    """The openai package, imported safely from any thread, with httpx fully imported first.

    openai (on its own httpx2) looks up `sys.modules["httpx"]` on every request to accept the
    classic httpx's objects too. A first `import httpx` on another thread (a web tool's first
    call) leaves a half-initialised module there, and a request of a concurrent run failed
    with "partially initialized module 'httpx' has no attribute 'Response'". With httpx
    imported before any openai client exists, no request can see it half done.
    """
    from jarvis._lazy import load_module

    load_module("httpx")
    return load_module("openai")


def openai_wire_error(exc: BaseException, timeout: float) -> BaseException:
    """The WireError for an exception from the openai package (others pass through)."""
    from jarvis._lazy import load_module

    openai = load_module("openai")

    if isinstance(exc, openai.APITimeoutError):
        return WireError("timeout", f"no answer within {timeout:g} s")
    if isinstance(exc, openai.APIStatusError):
        response = getattr(exc, "response", None)
        retry = _retry_after(response.headers.get("retry-after")) if response is not None else None
        return WireError("status", error_message(exc.body, str(exc.message)), exc.status_code, retry)
    if isinstance(exc, openai.APIConnectionError):
        node: BaseException | None = exc
        for _ in range(10):  # by name: openai may vendor its own copy of httpx
            if node is None:
                break
            if isinstance(node, ConnectionRefusedError) or type(node).__name__ == "ConnectError":
                return WireError("refused", f"connection refused ({node})")
            node = node.__cause__ or node.__context__
        return WireError("reset", f"connection lost: {exc.__cause__ or exc}")
    if isinstance(exc, openai.APIError):
        return WireError("protocol", str(exc))
    if isinstance(exc, (json.JSONDecodeError, RecursionError)):  # a body openai could not decode
        return WireError("protocol", f"the reply could not be decoded: {type(exc).__name__}")
    return exc
