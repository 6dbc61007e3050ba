"""web_search: search the web through a configured backend and return citable results.

Backends (`[tools.web_search] backend = ...`):

- `searxng`: a self-hosted SearXNG instance's JSON API (`base_url` required; the instance must
  allow `format=json`);
- `brave`: the Brave Search API (`api_key`, or BRAVE_API_KEY);
- `tavily`: the Tavily search API (`api_key`, or TAVILY_API_KEY);
- `duckduckgo`: no key, through the `ddgs` package (the `web` extra).

The HTTP backends go through the SSRF-safe client; their configured `base_url` host is trusted
(the user wrote it; that is how a SearXNG on the LAN or on localhost is reached). Results are
title, url, snippet and source, as numbered text the model can cite and as `metadata.results`.
A missing key, package or an unreachable backend is one failed result naming the setting.
"""

from __future__ import annotations

import html
import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

BACKENDS = ("searxng", "brave", "tavily", "duckduckgo")
DEFAULT_URLS = {"brave": "https://api.search.brave.com/res/v1/web/search",
                "tavily": "https://api.tavily.com/search"}
KEY_ENV = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
MAX_RESULTS = 20
MAX_QUERY_CHARS = 500
MAX_SNIPPET_CHARS = 500
_TAG = re.compile(r"<[^>]{0,200}>")


@dataclass(slots=True)
class SearchResult:
    title: str
    url: str
    snippet: str
    source: str


class SearchError(Exception):
    """A backend failed; the message names the setting to fix."""


def _clip(text: Any, limit: int = MAX_SNIPPET_CHARS) -> str:
    # Brave marks matches with <strong>; entities (&quot;) come through from several APIs.
    text = html.unescape(_TAG.sub("", str(text or "")))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _result(title: Any, url: Any, snippet: Any, source: Any) -> SearchResult | None:
    url = str(url or "").strip()
    if not url.startswith(("http://", "https://")):
        return None  # not something a model can cite or fetch
    return SearchResult(_clip(title, 300) or url, url[:2000], _clip(snippet), _clip(source, 100))


def _items(value: Any) -> list[Any]:
    return value[:100] if isinstance(value, list) else []


# --- backends: each turns the service's documented JSON into SearchResults ------------------
def parse_searxng(data: Any) -> list[SearchResult]:
    out = []
    for item in _items(data.get("results")):
        if isinstance(item, dict):
            engines = item.get("engines")
            engines = engines if isinstance(engines, list) else [item.get("engine")]
            source = "searxng: " + ", ".join(str(e) for e in engines if e)
            r = _result(item.get("title"), item.get("url"), item.get("content"), source)
            if r:
                out.append(r)
    return out


def parse_brave(data: Any) -> list[SearchResult]:
    out = []
    web = data.get("web") if isinstance(data.get("web"), dict) else {}
    for item in _items(web.get("results")):
        if isinstance(item, dict):
            profile = item.get("profile") or {}
            meta_url = item.get("meta_url") if isinstance(item.get("meta_url"), dict) else {}
            name = profile.get("name") if isinstance(profile, dict) else None
            source = "brave: " + str(name or meta_url.get("hostname") or "web")
            r = _result(item.get("title"), item.get("url"), item.get("description"), source)
            if r:
                out.append(r)
    return out


def parse_tavily(data: Any) -> list[SearchResult]:
    out = []
    for item in _items(data.get("results")):
        if isinstance(item, dict):
            r = _result(item.get("title"), item.get("url"), item.get("content"), "tavily")
            if r:
                out.append(r)
    return out


def parse_ddgs(rows: Any) -> list[SearchResult]:
    out = []
    for item in _items(rows):
        if isinstance(item, dict):
            r = _result(item.get("title"), item.get("href"), item.get("body"), "duckduckgo")
            if r:
                out.append(r)
    return out


@ToolRegistry.register("web_search")
class WebSearchTool(BaseTool):
    """Search the web (SearXNG, Brave, Tavily or DuckDuckGo)."""

    tool_id = "web_search"

    def __init__(self, backend: str = "duckduckgo", base_url: str | None = None,
                 api_key: str | None = None, timeout: float = 15.0, max_results: int = 5,
                 region: str = "wt-wt", safesearch: str = "moderate",
                 proxy: str | None = None, verify: bool | str = True) -> None:
        from jarvis.errors import ConfigError

        if backend not in BACKENDS:
            raise ConfigError(f"[tools.web_search] backend must be one of {', '.join(BACKENDS)}, "
                              f"got {backend!r}")
        self.backend = backend
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = float(timeout)
        self.max_results = max(1, min(int(max_results), MAX_RESULTS))
        self.region = region
        self.safesearch = safesearch
        self.proxy = proxy  # duckduckgo only: ddgs's own client goes through this proxy
        self.verify = verify  # duckduckgo only: False or a CA bundle path for that proxy

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="web_search",
            description=f"Search the web ({self.backend}) and return numbered results with "
                        f"title, URL and snippet; cite results by their URL and read a page with "
                        f"web_fetch.",
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                              "description": "What to search for"},
                    "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                                    "default": self.max_results,
                                    "description": "How many results to return"},
                },
                "required": ["query"],
            },
            category="web",
            latency_estimate=1.0,
            timeout_seconds=self.timeout + 5.0,
            output_labels=frozenset({"untrusted"}),
            egress="network",
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        """The query, to the backend's host (max_results, a number from 1 to 20, is left
        out: a few bits of choice, like the method of a request)."""
        from jarvis.trust.evidence import url_host
        from jarvis.trust.labels import Egress

        if self.backend == "duckduckgo":
            host = "duckduckgo.com"
        else:
            host = url_host(self.base_url or DEFAULT_URLS.get(self.backend, ""))[1] or self.backend
        return [Egress.of("network", host, method="search", payload=[arguments.get("query")])]

    def execute(self, **params: Any) -> ToolResult:
        query = params.get("query")
        if not isinstance(query, str) or not query.strip() or len(query) > MAX_QUERY_CHARS:
            return ToolResult.failure("web_search", f"query must be 1-{MAX_QUERY_CHARS} characters",
                                      ErrorType.INVALID_ARGS)
        count = params.get("max_results") or self.max_results
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_RESULTS:
            return ToolResult.failure("web_search", f"max_results must be 1-{MAX_RESULTS}",
                                      ErrorType.INVALID_ARGS)
        try:
            results = getattr(self, f"_{self.backend}")(query.strip(), count)[:count]
        except SearchError as exc:
            return ToolResult.failure("web_search", str(exc), ErrorType.EXECUTION,
                                      backend=self.backend)
        rows = [asdict(r) for r in results]
        if not results:
            text = f"no results for {query.strip()!r} ({self.backend})"
        else:
            text = "\n\n".join(f"{i}. {r.title}\n   {r.url}\n   {r.snippet}".rstrip()
                               + f"\n   (source: {r.source})"
                               for i, r in enumerate(results, start=1))
        return ToolResult(tool_name="web_search", content=text,
                          metadata={"backend": self.backend, "query": query.strip(),
                                    "results": rows})

    # --- HTTP backends ---------------------------------------------------------------------
    def _endpoint(self) -> str:
        url = self.base_url or DEFAULT_URLS.get(self.backend)
        if not url:
            raise SearchError(f"web_search backend {self.backend} needs the instance's address: "
                              f"set [tools.web_search] base_url (e.g. http://localhost:8888)")
        return url

    def _key(self) -> str:
        from jarvis.core.envvars import expand_env
        from jarvis.errors import ConfigError

        key = self.api_key or os.environ.get(KEY_ENV[self.backend], "")
        try:
            key = expand_env(key, "[tools.web_search] api_key")
        except ConfigError as exc:
            raise SearchError(str(exc)) from None
        if not key:
            raise SearchError(f"web_search backend {self.backend} needs an API key: set "
                              f"[tools.web_search] api_key or the {KEY_ENV[self.backend]} "
                              f"environment variable")
        return key

    def _call(self, method: str, url: str, **kwargs: Any) -> Any:
        """One JSON request to the configured backend, whose own host is trusted."""
        from jarvis._lazy import load_module
        from jarvis.security.net import BlockedURLError, FetchError, NetPolicy, SafeHttpClient
        from jarvis.security.redact import redact_url

        httpx = load_module("httpx")  # worker threads: see load_module

        # What the model (and the run log) read: base_url's password or ?token= is the
        # user's secret, not the model's.
        shown = redact_url(url)
        try:
            parsed = httpx.URL(url)
            host = parsed.raw_host.decode("ascii").lower()
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
        except (httpx.InvalidURL, ValueError, TypeError):
            raise SearchError(f"[tools.web_search] base_url {shown!r} is not a valid URL") from None
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        client = SafeHttpClient(NetPolicy.make([where], timeout=self.timeout,
                                               max_bytes=4_194_304))
        try:
            response = client.request(method, url, **kwargs)
        except (BlockedURLError, FetchError) as exc:
            raise SearchError(f"web_search backend {self.backend} at {shown} is unreachable: {exc}; "
                              f"check [tools.web_search] base_url") from None
        if response.status in (401, 403):
            raise SearchError(f"web_search backend {self.backend} refused the API key (HTTP "
                              f"{response.status}); check [tools.web_search] api_key")
        if response.status >= 400:
            raise SearchError(f"web_search backend {self.backend} at {shown} answered HTTP "
                              f"{response.status} {response.reason}")
        try:
            data = json.loads(response.body.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            hint = (" (SearXNG must allow the json format: search.formats in settings.yml)"
                    if self.backend == "searxng" else "")
            raise SearchError(f"web_search backend {self.backend} at {shown} did not answer "
                              f"JSON{hint}") from None
        if not isinstance(data, dict):
            raise SearchError(f"web_search backend {self.backend} at {shown} answered JSON that "
                              f"is not a results object")
        return data

    def _searxng(self, query: str, count: int) -> list[SearchResult]:
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self._endpoint())
        path = parts.path.rstrip("/")
        if not path.endswith("/search"):  # the path's end: a base_url may carry a ?query
            path += "/search"
        url = urlunsplit(parts._replace(path=path))
        data = self._call("GET", url, params={"q": query, "format": "json",
                                              "safesearch": {"off": 0, "moderate": 1,
                                                             "strict": 2}.get(self.safesearch, 1)},
                          headers={"Accept": "application/json"})
        return parse_searxng(data)

    def _brave(self, query: str, count: int) -> list[SearchResult]:
        key = self._key()
        data = self._call("GET", self._endpoint(), params={"q": query, "count": count},
                          headers={"Accept": "application/json", "X-Subscription-Token": key})
        return parse_brave(data)

    def _tavily(self, query: str, count: int) -> list[SearchResult]:
        key = self._key()
        body = json.dumps({"query": query, "max_results": count, "search_depth": "basic"})
        data = self._call("POST", self._endpoint(), content=body.encode(),
                          headers={"Content-Type": "application/json",
                                   "Authorization": f"Bearer {key}"})
        return parse_tavily(data)

    # --- duckduckgo (ddgs) --------------------------------------------------------------------
    def _duckduckgo(self, query: str, count: int) -> list[SearchResult]:
        try:
            from jarvis._lazy import load_module

            DDGS = load_module("ddgs").DDGS  # noqa: N806
            DDGSException = load_module("ddgs.exceptions").DDGSException  # noqa: N806
        except ImportError:
            raise SearchError("web_search backend duckduckgo needs the ddgs package, which is "
                              "not installed: pip install 'jarvis[web]'") from None
        try:
            rows = DDGS(proxy=self.proxy, timeout=int(max(self.timeout, 1)),
                        verify=self.verify).text(query, max_results=count,
                                                 backend="duckduckgo", region=self.region,
                                                 safesearch=self.safesearch)
        except DDGSException as exc:
            if "No results" in str(exc):
                return []
            raise SearchError(f"web_search backend duckduckgo failed: {exc}") from None
        except Exception as exc:  # ddgs raises its client's errors too (network, TLS)
            raise SearchError(f"web_search backend duckduckgo is unreachable: "
                              f"{type(exc).__name__}: {exc}") from None
        return parse_ddgs(rows)
