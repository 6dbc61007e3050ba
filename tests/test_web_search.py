"""web_search's backends against loopback servers speaking each service's documented format.

SearXNG, Brave and Tavily are reached through `base_url`. ddgs (DuckDuckGo) cannot be given a
base URL, so it is tested through the seam it does offer: its `proxy` and `verify` options,
with a loopback proxy that terminates TLS for html.duckduckgo.com with a test CA and serves a
saved DuckDuckGo HTML results page; ddgs's own request and parser run for real.
"""

from __future__ import annotations

import json

import pytest
from net_support import MitmProxy, Reply, fixture, serving

from jarvis.core.types import ToolCall
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.web_search import WebSearchTool


def search(tool, **arguments):
    return ToolExecutor([tool]).execute(ToolCall(id="s", name="web_search", arguments=arguments))


def test_searxng_json_api():
    body = fixture("search/searxng.json")
    with serving({"/search": lambda s: Reply(200, body, content_type="application/json")}) as server:
        result = search(WebSearchTool(backend="searxng", base_url=server.url("/")),
                        query="sqlite wal mode", max_results=5)
    assert result.success, result.content
    seen = server.seen[0]
    assert seen.query["q"] == ["sqlite wal mode"] and seen.query["format"] == ["json"]
    rows = result.metadata["results"]
    assert [r["url"] for r in rows] == ["https://www.sqlite.org/wal.html",
                                        "https://til.simonwillison.net/sqlite/enabling-wal-mode"]
    assert rows[0]["source"] == "searxng: duckduckgo, brave, startpage"
    assert result.content.startswith("1. Write-Ahead Logging - SQLite\n   "
                                     "https://www.sqlite.org/wal.html\n   Beginning with")
    assert "magnet:" not in result.content  # not a citable web URL


def test_brave_api_sends_the_key_and_strips_markup():
    body = fixture("search/brave.json")
    with serving({"/res/v1/web/search": lambda s: Reply(200, body,
                                                        content_type="application/json")}) as server:
        tool = WebSearchTool(backend="brave", base_url=server.url("/res/v1/web/search"),
                             api_key="BSA-test-key")
        result = search(tool, query="sqlite wal mode", max_results=2)
    assert result.success, result.content
    seen = server.seen[0]
    assert seen.headers["x-subscription-token"] == "BSA-test-key"
    assert seen.query == {"q": ["sqlite wal mode"], "count": ["2"]}
    rows = result.metadata["results"]
    assert rows[1]["title"] == "sql - How do I enable WAL mode? - Stack Overflow"
    assert rows[1]["snippet"] == "Run PRAGMA journal_mode=WAL; once; the setting is persistent."
    assert rows[0]["snippet"].endswith('(hereafter referred to as "WAL") is available.')
    assert rows[0]["source"] == "brave: Sqlite"


def test_tavily_api_posts_the_query_with_a_bearer_key(monkeypatch):
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-from-env")
    body = fixture("search/tavily.json")
    with serving({"/search": lambda s: Reply(200, body, content_type="application/json")}) as server:
        result = search(WebSearchTool(backend="tavily", base_url=server.url("/search")),
                        query="sqlite wal mode", max_results=2)
    assert result.success, result.content
    seen = server.seen[0]
    assert seen.method == "POST" and seen.headers["authorization"] == "Bearer tvly-from-env"
    assert json.loads(seen.body) == {"query": "sqlite wal mode", "max_results": 2,
                                     "search_depth": "basic"}
    assert [r["title"] for r in result.metadata["results"]] == [
        "Write-Ahead Logging - SQLite", "Pragma statements supported by SQLite"]


def test_api_keys_may_come_from_the_environment_by_reference(monkeypatch):
    monkeypatch.setenv("MY_BRAVE", "from-reference")
    body = fixture("search/brave.json")
    with serving({"/s": lambda s: Reply(200, body, content_type="application/json")}) as server:
        result = search(WebSearchTool(backend="brave", base_url=server.url("/s"),
                                      api_key="${MY_BRAVE}"), query="x")
    assert result.success and server.seen[0].headers["x-subscription-token"] == "from-reference"


@pytest.mark.parametrize("backend, env", [("brave", "BRAVE_API_KEY"), ("tavily", "TAVILY_API_KEY")])
def test_a_missing_key_is_one_clear_failure_naming_the_setting(backend, env, monkeypatch):
    monkeypatch.delenv(env, raising=False)
    with serving({}) as server:
        result = search(WebSearchTool(backend=backend, base_url=server.url("/")), query="x")
        assert server.seen == []
    assert not result.success
    assert result.content == (f"web_search backend {backend} needs an API key: set "
                              f"[tools.web_search] api_key or the {env} environment variable")


def test_a_rejected_key_and_an_unreachable_backend_name_the_setting():
    with serving({"/s": lambda s: Reply(401, '{"error": "bad key"}')}) as server:
        result = search(WebSearchTool(backend="brave", base_url=server.url("/s"), api_key="k"),
                        query="x")
        port = server.port
    assert not result.success and "refused the API key" in result.content
    assert "[tools.web_search] api_key" in result.content
    result = search(WebSearchTool(backend="searxng", base_url=f"http://127.0.0.1:{port}"),
                    query="x")  # the server is gone now
    assert not result.success and "is unreachable" in result.content
    assert "check [tools.web_search] base_url" in result.content


def test_secrets_in_base_url_never_reach_the_model():
    """A password or ?token= in base_url is the user's: the failure a model reads (and the run
    log keeps) shows the URL masked."""
    body = fixture("search/searxng.json")
    with serving({"/search": lambda s: Reply(502, "bad gateway")}) as server:
        port = server.port
        failed = search(WebSearchTool(backend="searxng",
                                      base_url=f"http://127.0.0.1:{port}/?token=tok-SECRET-1"),
                        query="x")
        # A base_url with a query gets /search in its path, not after its query.
        assert server.seen[0].path == "/search" and server.seen[0].query["token"] == [
            "tok-SECRET-1"]
    assert not failed.success and "answered HTTP 502" in failed.content
    assert "SECRET" not in failed.content and "token=***" in failed.content
    for base_url in (f"http://admin:pw-SECRET-2@127.0.0.1:{port}/",  # refused: userinfo
                     f"http://127.0.0.1:{port}/?api_key=key-SECRET-3"):  # gone: unreachable
        failed = search(WebSearchTool(backend="searxng", base_url=base_url), query="x")
        assert not failed.success and "SECRET" not in failed.content, failed.content
        assert "***" in failed.content
    with serving({"/search": lambda s: Reply(200, body, content_type="application/json")}) as ok:
        found = search(WebSearchTool(backend="searxng", base_url=ok.url("/?token=t")), query="x")
    assert found.success and ok.seen[0].query["token"] == ["t"]


def test_searxng_without_base_url_or_json_format_says_how_to_fix_it():
    result = search(WebSearchTool(backend="searxng"), query="x")
    assert not result.success and "set [tools.web_search] base_url" in result.content
    with serving({"/search": lambda s: Reply(200, "<html>search page</html>",
                                             content_type="text/html")}) as server:
        result = search(WebSearchTool(backend="searxng", base_url=server.url("/")), query="x")
    assert not result.success and "search.formats in settings.yml" in result.content


def test_an_unknown_backend_is_a_config_error():
    from jarvis.errors import ConfigError

    with pytest.raises(ConfigError, match="backend must be one of searxng, brave, tavily"):
        WebSearchTool(backend="google")


def test_duckduckgo_through_ddgs(tmp_path):
    page = fixture("search/duckduckgo_html.html").encode()
    hosts = ["html.duckduckgo.com", "duckduckgo.com"]
    with MitmProxy(hosts, lambda m, p, h, b: (200, "text/html; charset=UTF-8", page),
                   tmp_path) as proxy:
        tool = WebSearchTool(backend="duckduckgo", proxy=proxy.url, verify=proxy.ca_path,
                             timeout=10)
        result = search(tool, query="sqlite wal mode", max_results=3)
    assert result.success, result.content
    assert proxy.connects == ["html.duckduckgo.com:443"]
    method, path, _, body = proxy.requests[0]
    assert (method, path) == ("POST", "/html/") and b"q=sqlite+wal+mode" in body
    rows = result.metadata["results"]
    assert [r["url"] for r in rows] == ["https://www.sqlite.org/wal.html",
                                        "https://sqlite.org/pragma.html",
                                        "https://news.ycombinator.com/item?id=31318354"]
    assert all(r["source"] == "duckduckgo" for r in rows)  # the ad (y.js) was dropped
    assert "3. SQLite in WAL mode" in result.content


def test_duckduckgo_unreachable_is_a_clear_failure(tmp_path):
    with MitmProxy(["html.duckduckgo.com"], lambda m, p, h, b: (200, "text/html", b""),
                   tmp_path) as proxy:
        url = proxy.url
    result = search(WebSearchTool(backend="duckduckgo", proxy=url, timeout=2), query="x")
    assert not result.success and result.content.startswith("web_search backend duckduckgo")


def test_hostile_arguments_are_clear_failures():
    tool = WebSearchTool(backend="searxng", base_url="http://127.0.0.1:9")
    for arguments, expected in (({"query": "x" * 501}, "invalid arguments"),
                                ({"query": "   "}, "query must be 1-500 characters"),
                                ({"query": "x", "max_results": 500}, "invalid arguments")):
        result = search(tool, **arguments)
        assert not result.success and expected in result.content, (arguments, result.content)


@pytest.mark.parametrize("body", ['[1, 2]', '{"results": "nope"}', '{"results": [null, 3, {"url": 5}]}',
                                  '{"web": []}', '[' * 100_000])
def test_hostile_backend_json_is_a_clear_result_not_a_crash(body):
    with serving({"/search": lambda s: Reply(200, body, content_type="application/json")}) as server:
        for backend in ("searxng", "brave", "tavily"):
            tool = WebSearchTool(backend=backend, base_url=server.url("/search"), api_key="k")
            result = search(tool, query="x")
            assert result.error_type is None or result.error_type.value == "execution", result
            assert result.content.startswith(("no results", "web_search backend")), result.content
