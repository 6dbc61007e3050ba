"""http_request: one HTTP request through the SSRF-safe client (jarvis.security.net).

GET and HEAD run freely; POST, PUT, PATCH and DELETE change things somewhere, so each such call
needs a person's approval (the executor asks, per call). Only public addresses are reached
unless the user lists exceptions in `[tools.http_request] allowed_hosts`; bodies are read up to
`max_bytes` (1 MiB) and cut with a marker; text and JSON come back as text, binary bodies are
described, never dumped. Status, headers and the final URL are in the result's metadata.

In a scheduled run (a fence in the call's context, jarvis.tools.fence), a request that changes
something (not GET or HEAD) carries an `Idempotency-Key` header (the IETF httpapi draft's
name, a structured-field string) derived from the occurrence and the call's position among the
run's requests with that method to that URL (query left out), so a retried attempt sends the
same key; and it is recorded before it is sent and confirmed after. A retried attempt does
not send again one that was answered (status below 500), nor one whose confirmation is missing
(its process died in between: it may have arrived; jarvis errs toward not sending twice); one
that failed (5xx, or no answer) is sent again with the same key, for the receiver to
de-duplicate.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import math
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.base import BaseTool
from jarvis.tools.context import ToolContext
from jarvis.tools.spec import ToolSpec

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
SAFE_METHODS = frozenset({"GET", "HEAD"})
MAX_HEADERS = 50
MAX_HEADER_CHARS = 8_192
MAX_BODY_CHARS = 1_000_000
_TEXT_TYPES = ("application/json", "application/xml", "application/javascript",
               "application/x-www-form-urlencoded", "application/x-ndjson",
               "application/ld+json", "application/rss+xml", "application/atom+xml",
               "image/svg+xml")
# Headers some frameworks read as the real method: a GET carrying one may act as a DELETE, so
# it is approved like one.
METHOD_OVERRIDE_HEADERS = frozenset({"x-http-method-override", "x-http-method",
                                     "x-method-override"})
# The encodings of the WHATWG Encoding Standard (what browsers decode), by Python codec name.
# A server's charset names any Python codec otherwise: `punycode` decodes in quadratic time
# (minutes of CPU for 1 MB), `undefined` and `idna` raise instead of replacing.
WEB_ENCODING_NAMES: tuple[str, ...] = (
    "utf-8", "utf-16-le", "utf-16-be", "utf-16", "utf-32", "ascii", "latin-1", "cp866",
    "iso8859-2", "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6", "iso8859-7", "iso8859-8",
    "iso8859-10", "iso8859-13", "iso8859-14", "iso8859-15", "iso8859-16", "koi8-r", "koi8-u",
    "mac-roman", "mac-cyrillic", "cp874", "cp1250", "cp1251", "cp1252", "cp1253", "cp1254",
    "cp1255", "cp1256", "cp1257", "cp1258", "gbk", "gb2312", "gb18030", "big5", "big5hkscs",
    "cp950", "euc-jp", "iso2022-jp", "shift_jis", "cp932", "euc-kr", "cp949")
_web_encodings: frozenset[str] | None = None


def web_encodings() -> frozenset[str]:
    """WEB_ENCODING_NAMES as Python codec names (looked up on first use: importing every
    codec costs ~10 ms, which `jarvis ask` should not pay when no page is fetched)."""
    global _web_encodings
    if _web_encodings is None:
        _web_encodings = frozenset(codecs.lookup(name).name for name in WEB_ENCODING_NAMES)
    return _web_encodings


class NetTool(BaseTool):
    """A tool that reaches the network through its own SafeHttpClient (http_request,
    web_fetch), made from its settings on first use (so building the catalog imports no
    httpx)."""

    tool_id = ""

    def __init__(self, allowed_hosts: list[str] | None, blocked_hosts: list[str] | None,
                 max_bytes: int, timeout: float, max_redirects: int) -> None:
        self._settings = (allowed_hosts, blocked_hosts, max_bytes, timeout, max_redirects)
        self.timeout = float(timeout)
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            from jarvis.security.net import NetPolicy, SafeHttpClient

            allowed, blocked, max_bytes, timeout, max_redirects = self._settings
            self._client = SafeHttpClient(NetPolicy.make(
                allowed, blocked, max_bytes=int(max_bytes), timeout=float(timeout),
                max_redirects=int(max_redirects),
                setting=f"[tools.{self.tool_id}] allowed_hosts"))
        return self._client


def url_egress(tool: str, arguments: dict[str, Any], method: str = "GET",
               headers: Any = None, payload: tuple[Any, ...] = ()) -> list[Any]:
    """What a call to `arguments["url"]` sends out: to the URL's host[:port] (string work,
    no lookup), the URL itself, header names and values, and `payload` (query, body)."""
    from jarvis.trust.evidence import url_host
    from jarvis.trust.labels import Egress

    url = arguments.get("url")
    url = url if isinstance(url, str) else ""
    _, hostport = url_host(url)
    return [Egress.of("network", hostport or f"(no host in the URL {tool} got)", method=method,
                      url=url, headers=headers if isinstance(headers, dict) else None,
                      payload=payload)]


def is_text(content_type: str, body: bytes) -> bool:
    """Whether a body is text a model can read (by its type; unknown types are sniffed)."""
    if content_type.startswith("text/") or content_type in _TEXT_TYPES:
        return True
    if content_type.endswith(("+json", "+xml")):
        return True
    if content_type and content_type != "application/octet-stream":
        return False
    sample = body[:4096]
    if b"\x00" in sample:
        return False
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(sample) - 3  # a character cut by the sample's end
    return True


def decode(body: bytes, charset: str | None) -> str:
    """The body as text in the server's charset when that is a web encoding, else UTF-8."""
    try:
        codec = codecs.lookup(charset or "utf-8").name
    except (LookupError, TypeError, ValueError):  # an unknown charset name from the server
        codec = "utf-8"
    return body.decode(codec if codec in web_encodings() else "utf-8", errors="replace")


def describe_binary(content_type: str, size: int, truncated: bool, body: bytes) -> str:
    more = " (at least; the rest was not read)" if truncated else ""
    return (f"[binary body not shown: {content_type or 'unknown type'}, {size} bytes{more}, "
            f"sha256 of what was read {hashlib.sha256(body).hexdigest()[:16]}…]")


def response_metadata(response: Any) -> dict[str, Any]:
    headers: dict[str, str] = {}
    for key, value in response.headers:
        key = key.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return {"status": response.status, "reason": response.reason, "url": response.url,
            "headers": headers, "content_type": response.content_type,
            "bytes": len(response.body), "truncated": response.truncated,
            "redirects": list(response.redirects), "address": response.address,
            "elapsed_seconds": round(response.elapsed, 3)}


def net_failure(tool: str, exc: Exception) -> ToolResult:
    from jarvis.security.net import BlockedURLError

    if isinstance(exc, BlockedURLError):
        return ToolResult.failure(tool, f"refused: {exc}", ErrorType.DENIED)
    return ToolResult.failure(tool, str(exc), ErrorType.TRANSPORT)


@ToolRegistry.register("http_request")
class HttpRequestTool(NetTool):
    """Make an HTTP request to a public address (SSRF-safe)."""

    tool_id = "http_request"

    def __init__(self, allowed_hosts: list[str] | None = None,
                 blocked_hosts: list[str] | None = None, max_bytes: int = 1_048_576,
                 timeout: float = 30.0, max_redirects: int = 5) -> None:
        super().__init__(allowed_hosts, blocked_hosts, max_bytes, timeout, max_redirects)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="http_request",
            description="Make an HTTP request (GET, HEAD, POST, PUT, PATCH, DELETE) to a public "
                        "http(s) URL and return the response body as text; status and headers "
                        "are in the metadata. Private, loopback and cloud-metadata addresses are "
                        "refused. POST, PUT, PATCH and DELETE need the user's approval.",
            parameters={
                "type": "object",
                "properties": {
                    "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                            "description": "http:// or https:// URL"},
                    "method": {"type": "string", "enum": list(METHODS), "default": "GET",
                               "description": "HTTP method"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"},
                                "description": "Request headers"},
                    "query": {"type": "object",
                              "additionalProperties": {"type": ["string", "number", "boolean"]},
                              "description": "Query-string parameters added to the URL"},
                    "body": {"type": "string", "maxLength": MAX_BODY_CHARS,
                             "description": "Raw request body (text)"},
                    "json": {"description": "A JSON request body (instead of body)"},
                    "timeout": {"type": "number", "exclusiveMinimum": 0,
                                "description": f"Seconds for the whole request (at most "
                                               f"{self.timeout:g})"},
                },
                "required": ["url"],
            },
            category="http",
            latency_estimate=0.5,
            timeout_seconds=self.timeout + 5.0,
            metadata={"confirmation": "per call: POST, PUT, PATCH and DELETE"},
            output_labels=frozenset({"untrusted"}),
            egress="network",  # every method: a GET's URL, headers and body carry data too
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        method = str(arguments.get("method") or "GET").upper()
        return url_egress("http_request", arguments, method, arguments.get("headers"),
                          (arguments.get("query"), arguments.get("body"), arguments.get("json")))

    def needs_confirmation(self, arguments: dict[str, Any]) -> bool:
        if str(arguments.get("method") or "GET").upper() not in SAFE_METHODS:
            return True
        headers = arguments.get("headers")
        return isinstance(headers, dict) and any(
            str(key).lower() in METHOD_OVERRIDE_HEADERS for key in headers)

    def execute(self, **params: Any) -> ToolResult:
        return self._request(params, None)

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        return self._request(arguments, context)

    def _request(self, params: dict[str, Any], context: ToolContext | None) -> ToolResult:
        method = str(params.get("method") or "GET").upper()
        if method not in METHODS:
            return ToolResult.failure("http_request", f"method must be one of {', '.join(METHODS)}",
                                      ErrorType.INVALID_ARGS)
        try:
            headers, query, content = _request_parts(params)
        except ValueError as exc:
            return ToolResult.failure("http_request", str(exc), ErrorType.INVALID_ARGS)
        if content is not None and "json" in params and params["json"] is not None:
            headers.setdefault("Content-Type", "application/json")
        timeout = params.get("timeout")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(
                timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0):
            # json.loads reads NaN and Infinity, and NaN passes the schema's bound.
            return ToolResult.failure("http_request", f"timeout must be a positive number of "
                                                      f"seconds (at most {self.timeout:g})",
                                      ErrorType.INVALID_ARGS)
        from jarvis.security.net import BlockedURLError, FetchError

        effect = None
        fence = context.fence if context is not None else None
        if fence is not None and method not in SAFE_METHODS:
            effect = fence.begin("http_request", f"{method} {_target(params.get('url'))}")
            if not effect.go:
                return ToolResult(tool_name="http_request", content=effect.describe_prior(),
                                  metadata={"idempotency_key": effect.key, "not_sent": True})
            if not any(k.lower() == "idempotency-key" for k in headers):
                headers["Idempotency-Key"] = f'"{effect.key}"'
        try:
            response = self.client.request(method, params.get("url"), headers=headers,
                                           params=query, content=content, timeout=timeout)
        except (BlockedURLError, FetchError) as exc:
            if effect is not None:  # nothing answered: a retry may send it again (same key)
                effect.finish(False, str(exc))
            return net_failure("http_request", exc)
        if effect is not None:
            effect.finish(response.status < 500, f"HTTP {response.status} {response.reason}")
        metadata = response_metadata(response)
        if effect is not None:
            metadata["idempotency_key"] = effect.key
        if method == "HEAD":
            text = ""
        elif is_text(response.content_type, response.body):
            text = decode(response.body, response.charset)
            if response.truncated:
                text += (f"\n[... body cut at {len(response.body)} bytes (the max_bytes limit); "
                         f"the rest was not read ...]")
        else:
            text = describe_binary(response.content_type, len(response.body), response.truncated,
                                   response.body)
            metadata["binary"] = True
        status_line = f"HTTP {response.status} {response.reason}".strip()
        if response.status >= 400:
            return ToolResult(tool_name="http_request", content=f"{status_line}\n{text}".rstrip(),
                              success=False, error_type=ErrorType.EXECUTION, metadata=metadata)
        if not text:
            text = f"{status_line} (empty body)"
        return ToolResult(tool_name="http_request", content=text, metadata=metadata)


def _target(url: Any) -> str:
    """What a request's effect key names: the URL without its query and fragment (a retried
    attempt may add a timestamp to the query; it is still the same request)."""
    from urllib.parse import urlsplit

    text = str(url)[:8192]
    try:
        parts = urlsplit(text)
    except ValueError:
        return text[:500]
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path or '/'}"[:500]


def _request_parts(params: dict[str, Any]) -> tuple[dict[str, str], dict[str, Any], bytes | None]:
    from jarvis.security.net import valid_header

    headers = params.get("headers") or {}
    if not isinstance(headers, dict) or len(headers) > MAX_HEADERS:
        raise ValueError(f"headers must be an object of at most {MAX_HEADERS} string values")
    clean: dict[str, str] = {}
    for key, value in headers.items():
        if (not isinstance(value, str) or len(key) + len(value) > MAX_HEADER_CHARS
                or any(c in key + value for c in "\r\n\x00")):
            raise ValueError(f"header {key[:50]!r} must be a single-line string under "
                             f"{MAX_HEADER_CHARS} characters")
        if not valid_header(key, value):
            raise ValueError(f"header {key[:50]!r}: a name is letters, digits and "
                             f"!#$%&'*+-.^_`|~, a value printable ASCII (encode anything else)")
        clean[key] = value
    query = params.get("query") or {}
    if not isinstance(query, dict) or len(query) > 100:
        raise ValueError("query must be an object of at most 100 values")
    query = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in query.items()}
    body, data = params.get("body"), params.get("json")
    if body is not None and data is not None:
        raise ValueError("give either body or json, not both")
    if data is not None:
        try:
            text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError(f"json is not serializable: {exc}") from None
        if len(text) > MAX_BODY_CHARS:
            raise ValueError(f"the json body is over {MAX_BODY_CHARS} characters")
        return clean, query, text.encode("utf-8")
    if body is not None:
        if not isinstance(body, str):
            raise ValueError("body must be a string")
        return clean, query, body.encode("utf-8")
    return clean, query, None
