"""How OpenAICompatEngine talks HTTP: through the `openai` package, or a small built-in client.

Both speak the same chat-completions wire format and hand the engine plain dicts, and both
report failures as WireError, so the engine parses replies and classifies failures (retry,
rejected tools, unreachable, ...) in one place.

- OpenAITransport: the `openai` package (the SDK default). Importing openai costs ~0.7-1 s of
  CPU, which is paid once in a long-lived process.
- HTTPTransport: the standard library's http.client with a small keep-alive pool (the `jarvis
  ask` default, where the openai import would dominate start-up: see bench/bench_agent.py).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

MAX_ERROR_BODY = 64_000
MAX_RESPONSE_BYTES = 64 * 1024 * 1024  # a reply larger than this is not a chat completion
MAX_SSE_LINE = 8 * 1024 * 1024


class WireError(Exception):
    """A failed request. kind: status | refused | reset | timeout | protocol."""

    def __init__(self, kind: str, message: str, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retry_after = retry_after


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
                 max_idle: int = 4) -> None:
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

    def _send(self, method: str, path: str, body: dict[str, Any] | None
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            conn, reused = self._checkout()
            try:
                conn.request(method, self.prefix + path, body=data, headers=self._headers(data is not None))
                return conn, conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as exc:
                conn.close()
                if reused and attempt == 0:
                    continue  # a kept-alive connection the server had closed: use a new one
                raise WireError("reset", f"connection lost: {exc}") from exc
            except TimeoutError as exc:
                conn.close()
                raise WireError("timeout", f"no answer within {self.timeout:g} s") from exc
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
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
        conn, response = self._send(method, path, body)
        if response.status >= 400:
            raise self._fail(conn, response)
        try:
            raw = response.read(MAX_RESPONSE_BYTES + 1)
        except TimeoutError as exc:
            conn.close()
            raise WireError("timeout", f"no answer within {self.timeout:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise WireError("reset", f"connection lost while reading: {exc}") from exc
        if len(raw) > MAX_RESPONSE_BYTES:
            conn.close()
            raise WireError("protocol", f"the reply is larger than {MAX_RESPONSE_BYTES} bytes")
        if response.will_close:
            conn.close()
        else:
            self._checkin(conn)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise WireError("protocol", f"the reply is not JSON: {raw[:200]!r}") from exc

    def chat(self, params: dict[str, Any]) -> dict[str, Any]:
        data = self._json("POST", "/chat/completions", params)
        if not isinstance(data, dict):
            raise WireError("protocol", "the reply is not a JSON object")
        return data

    def chat_stream(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send the request now (errors raise here); iterate the returned chunks."""
        conn, response = self._send("POST", "/chat/completions", params)
        if response.status >= 400:
            raise self._fail(conn, response)
        return self._events(conn, response)

    def _events(self, conn: http.client.HTTPConnection,
                response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
        try:
            while True:
                line = response.readline(MAX_SSE_LINE)
                if not line:
                    break
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue  # comments, event: lines, keep-alives
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    break
                try:
                    chunk = json.loads(payload)
                except (ValueError, RecursionError) as exc:
                    raise WireError("protocol", f"bad stream chunk: {payload[:200]!r}") from exc
                if isinstance(chunk, dict) and "error" in chunk and not chunk.get("choices"):
                    raise WireError("status", error_message(chunk, "stream error"), 500)
                yield chunk
        except TimeoutError as exc:
            raise WireError("timeout", f"the stream stalled for {self.timeout:g} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            raise WireError("reset", f"the stream broke off: {exc}") from exc
        finally:
            conn.close()  # streams end with the connection; never reuse it

    def models(self) -> list[str]:
        data = self._json("GET", "/models")
        items = data.get("data") if isinstance(data, dict) else None
        return [str(m["id"]) for m in items or [] if isinstance(m, dict) and m.get("id")]


class OpenAITransport:
    """The same surface on the `openai` package (sync client, no retries of its own)."""

    def __init__(self, base_url: str, api_key: str, timeout: float, connect_timeout: float) -> None:
        from openai import OpenAI, Timeout

        self.client = OpenAI(base_url=base_url, api_key=api_key,
                             timeout=Timeout(timeout, connect=connect_timeout), max_retries=0)
        self.timeout = timeout

    def chat(self, params: dict[str, Any]) -> dict[str, Any]:
        try:
            return self.client.chat.completions.create(**params).model_dump(warnings=False)
        except Exception as exc:
            raise openai_wire_error(exc, self.timeout) from exc

    def chat_stream(self, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            stream = self.client.chat.completions.create(**params)
        except Exception as exc:
            raise openai_wire_error(exc, self.timeout) from exc
        return self._events(stream)

    def _events(self, stream: Any) -> Iterator[dict[str, Any]]:
        try:
            for chunk in stream:
                # warnings=False: a malformed chunk is the engine's to report, not a pydantic warning
                yield chunk.model_dump(warnings=False)
        except Exception as exc:
            raise openai_wire_error(exc, self.timeout) from exc
        finally:
            stream.close()

    def models(self) -> list[str]:
        try:
            return [m.id for m in self.client.models.list().data]
        except Exception as exc:
            raise openai_wire_error(exc, self.timeout) from exc

    def close(self) -> None:
        self.client.close()


def openai_wire_error(exc: BaseException, timeout: float) -> BaseException:
    """The WireError for an exception from the openai package (others pass through)."""
    import openai

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
