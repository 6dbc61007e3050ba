"""http_request and web_fetch through the ToolExecutor, against real loopback servers."""

from __future__ import annotations

import json

import pytest
from cli_support import run_in_process
from net_support import Reply, fixture, serving

from jarvis.core.types import ToolCall
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.http_request import HttpRequestTool
from jarvis.tools.web_fetch import WebFetchTool


def call(tool, approver=None, **arguments):
    executor = ToolExecutor([tool], approver=approver)
    return executor.execute(ToolCall(id="c1", name=tool.spec.name, arguments=arguments))


# --- http_request ---------------------------------------------------------------------------
def test_get_returns_json_text_with_status_and_headers_in_metadata():
    routes = {"/api": lambda s: Reply(200, json.dumps({"build": "green", "q": s.query}),
                                      content_type="application/json",
                                      headers={"X-Build": "1234"})}
    with serving(routes) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]), url=server.url("/api"),
                      query={"branch": "main", "n": 3, "all": True},
                      headers={"Accept": "application/json"})
    assert result.success, result.content
    assert json.loads(result.content) == {"build": "green",
                                          "q": {"branch": ["main"], "n": ["3"], "all": ["true"]}}
    meta = result.metadata
    assert meta["status"] == 200 and meta["headers"]["x-build"] == "1234"
    assert meta["content_type"] == "application/json" and meta["url"] == server.url("/api") + \
        "?branch=main&n=3&all=true"
    assert server.seen[0].headers["accept"] == "application/json"


def test_query_adds_to_the_urls_own_query_string():
    # httpx's params= replaced the URL's query: `?page=2` was silently dropped.
    routes = {"/api": lambda s: Reply(200, json.dumps(s.query), content_type="application/json")}
    with serving(routes) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]),
                      url=server.url("/api?page=2&sort=old"), query={"sort": "new", "n": 3})
    assert result.success, result.content
    assert json.loads(result.content) == {"page": ["2"], "sort": ["new"], "n": ["3"]}


def test_loopback_is_refused_unless_allowed_and_the_message_names_the_setting():
    with serving({"/": lambda s: Reply(200, "hi")}) as server:
        result = call(HttpRequestTool(), url=server.url("/"))
        assert not result.success and result.error_type.value == "denied"
        assert "loopback" in result.content
        assert f'"{server.hostport}" to [tools.http_request] allowed_hosts' in result.content
        assert server.seen == []


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_methods_that_change_things_need_approval(method):
    with serving({"/items": lambda s: Reply(201, f"{s.method} {s.body.decode()}")}) as server:
        tool = HttpRequestTool(allowed_hosts=[server.hostport])
        denied = call(tool, url=server.url("/items"), method=method, json={"name": "x"})
        assert not denied.success and denied.error_type.value == "denied"
        assert server.seen == []
        asked = []
        approved = call(tool, approver=lambda spec, args: asked.append(args["method"]) or True,
                        url=server.url("/items"), method=method, json={"name": "x"})
    assert approved.success and approved.content == f'{method} {{"name": "x"}}'
    assert asked == [method]
    assert server.seen[0].headers["content-type"] == "application/json"


def test_get_and_head_need_no_approval():
    with serving({"/": lambda s: Reply(200, "body", headers={"ETag": '"v1"'})}) as server:
        tool = HttpRequestTool(allowed_hosts=[server.hostport])
        head = call(tool, url=server.url("/"), method="HEAD")
        get = call(tool, url=server.url("/"))
    assert head.success and head.metadata["headers"]["etag"] == '"v1"' and "200" in head.content
    assert get.success and get.content == "body"


def test_error_statuses_are_failed_results_with_the_body():
    with serving({"/gone": lambda s: Reply(410, "this resource is gone")}) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]), url=server.url("/gone"))
    assert not result.success and result.error_type.value == "execution"
    assert result.content == "HTTP 410 Gone\nthis resource is gone"
    assert result.metadata["status"] == 410


def test_binary_bodies_are_described_not_dumped():
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40
    with serving({"/logo.png": lambda s: Reply(200, png, content_type="image/png")}) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]), url=server.url("/logo.png"))
    assert result.success and result.metadata["binary"] is True
    assert result.content.startswith(f"[binary body not shown: image/png, {len(png)} bytes")
    assert "PNG" not in result.content


def test_big_bodies_are_cut_with_a_marker():
    with serving({"/log": lambda s: Reply(200, "line\n" * 100_000)}) as server:
        result = call(HttpRequestTool(allowed_hosts=[server.hostport], max_bytes=1000),
                      url=server.url("/log"))
    assert result.success and result.metadata["truncated"] and result.metadata["bytes"] == 1000
    assert result.content.startswith("line\n" * 200)
    assert "[... body cut at 1000 bytes (the max_bytes limit)" in result.content


def test_hostile_arguments_are_clear_failures():
    tool = HttpRequestTool()
    cases = [({"url": "http://example.com/", "body": "a", "json": {}}, "either body or json"),
             ({"url": "http://example.com/", "headers": {"X": "a\r\nHost: evil"}}, "single-line"),
             ({"url": "http://example.com/", "method": "TRACE"}, "invalid arguments"),
             ({"url": "ftp://example.com/"}, "only http and https"),
             ({"url": "http://[::ffff:127.0.0.1]:80/"}, "IPv4-mapped")]
    for arguments, expected in cases:
        result = call(tool, **arguments)
        assert not result.success and expected in result.content, (arguments, result.content)


def test_the_timeout_argument_bounds_the_call():
    import threading
    import time

    release = threading.Event()

    def slow(seen):
        release.wait(30)
        return Reply(200, "late")

    with serving({"/slow": slow}) as server:
        started = time.monotonic()
        result = call(HttpRequestTool(allowed_hosts=[server.hostport]), url=server.url("/slow"),
                      timeout=0.5)
        took = time.monotonic() - started
        release.set()
    assert not result.success and result.error_type.value == "transport"
    assert "timed out" in result.content and took < 5  # not the 30 s; room for a loaded machine


def test_cli_lists_and_runs_the_new_tools(cli_env, tmp_path):
    with serving({"/status": lambda s: Reply(200, "all systems go")}) as server:
        config = tmp_path / "config.toml"
        config.write_text(f'[tools.http_request]\nallowed_hosts = ["{server.hostport}"]\n')
        env = dict(cli_env, JARVIS_CONFIG=str(config))
        listing = run_in_process(["tools", "list"], env=env)  # tests/cli_support.py
        run = run_in_process(["tools", "run", "http_request",
                              json.dumps({"url": server.url("/status")})], env=env)
    names = [line.split()[0] for line in listing.stdout.splitlines()]
    for name in ("http_request", "web_fetch", "web_search", "channel_send", "channel_list",
                 "channel_status"):
        assert name in names, listing.stdout
    assert run.returncode == 0 and run.stdout == "all systems go\n", run.stderr


# --- web_fetch -------------------------------------------------------------------------------
def test_web_fetch_returns_the_article_without_boilerplate():
    page = fixture("web/news_article.html")
    routes = {"/story": lambda s: Reply(301, headers={"Location": "/news/2026/bike-lanes"}),
              "/news/2026/bike-lanes": lambda s: Reply(200, page,
                                                       content_type="text/html; charset=utf-8")}
    with serving(routes) as server:
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), url=server.url("/story"))
    assert result.success, result.content
    text = result.content
    assert text.startswith("# City Council Approves New Bike Lanes on Main Street\n"
                           f"URL: {server.url('/news/2026/bike-lanes')}\n")
    assert "voted 7-2 on Tuesday night" in text and "review the final design in June" in text
    for boilerplate in ("Accept all cookies", "Subscribe for $1", "mattress sale", "Refinance",
                        "celebrity homes", "All rights reserved", "Most read", "Careers"):
        assert boilerplate not in text, boilerplate
    assert result.metadata["title"] == "City Council Approves New Bike Lanes on Main Street"
    assert result.metadata["url"] == server.url("/news/2026/bike-lanes")


def test_web_fetch_keeps_headings_lists_and_code_as_markdown():
    page = fixture("web/blog_post.html")
    with serving({"/post": lambda s: Reply(200, page, content_type="text/html")}) as server:
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), url=server.url("/post"))
    text = result.content
    assert "## What we changed" in text and "- A dead man's switch" in text
    assert "curl -fsS https://monitor.example/ping/backup-nightly" in text
    for boilerplate in ("30% off", "Recent posts", "Managed Postgres", "percent-sign bug last year"):
        assert boilerplate not in text, boilerplate


def test_web_fetch_cuts_to_max_chars():
    page = fixture("web/news_article.html")
    with serving({"/": lambda s: Reply(200, page, content_type="text/html")}) as server:
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), url=server.url("/"),
                      max_chars=300)
    body = result.content.split("\n\n", 1)[1]
    assert body.startswith("# City Council") and "more characters cut (max_chars)" in body
    assert len(body.split("\n[...")[0]) == 300


def test_web_fetch_refuses_pdfs_and_binaries_with_a_description():
    pdf = b"%PDF-1.7\n" + b"\x00\x01binary" * 500
    routes = {"/report.pdf": lambda s: Reply(200, pdf, content_type="application/pdf"),
              "/download": lambda s: Reply(200, pdf, content_type="application/octet-stream"),
              "/app.zip": lambda s: Reply(200, b"PK\x03\x04" + bytes(2000),
                                          content_type="application/zip")}
    with serving(routes) as server:
        tool = WebFetchTool(allowed_hosts=[server.hostport])
        for path in ("/report.pdf", "/download"):
            result = call(tool, url=server.url(path))
            assert not result.success and "is a PDF document (" in result.content
            assert "web_fetch reads HTML and text pages only" in result.content
        result = call(tool, url=server.url("/app.zip"))
    assert not result.success and "not a text page" in result.content
    assert "application/zip, 2004 bytes" in result.content


def test_web_fetch_returns_plain_text_as_is():
    with serving({"/robots.txt": lambda s: Reply(200, "User-agent: *\nDisallow: /admin\n")}) as server:
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), url=server.url("/robots.txt"))
    assert result.success
    assert result.content == f"URL: {server.url('/robots.txt')}\n\nUser-agent: *\nDisallow: /admin"


def test_web_fetch_uses_the_ssrf_policy():
    with serving({"/": lambda s: Reply(200, "<html><title>x</title></html>",
                                       content_type="text/html")}) as server:
        result = call(WebFetchTool(), url=server.url("/"))
        assert not result.success and result.error_type.value == "denied"
        assert "[tools.web_fetch] allowed_hosts" in result.content and server.seen == []
        result = call(WebFetchTool(), url="http://169.254.169.254/latest/meta-data/")
    assert not result.success and "link-local" in result.content


def test_naming_http_request_for_mcp_serve_approves_its_calls_like_other_gated_tools():
    from jarvis.core.config import JarvisConfig
    from jarvis.server.mcp_serve import select_tools

    tools, approved = select_tools(JarvisConfig(), ["http_request", "calculator"])
    assert [t.spec.name for t in tools] == ["http_request", "calculator"]
    assert approved == {"http_request"}


def test_web_fetch_reads_the_charset_from_a_meta_tag():
    page = ("<html><head><meta charset='iso-8859-1'><title>Caf\xe9 cr\xe8me</title></head><body>"
            "<article><p>Le caf\xe9 cr\xe8me co\xfbte trois euros au comptoir, et un peu plus "
            "en terrasse, \xe0 deux pas de la gare.</p></article></body></html>").encode("latin-1")
    with serving({"/": lambda s: Reply(200, page, content_type="text/html")}) as server:
        result = call(WebFetchTool(allowed_hosts=[server.hostport]), url=server.url("/"))
    assert result.metadata["title"] == "Café crème"
    assert "Le café crème coûte trois euros" in result.content


def test_a_confirmation_check_that_breaks_asks_instead_of_running():
    class Shaky(HttpRequestTool):
        def needs_confirmation(self, arguments):
            raise RuntimeError("cannot tell")

    result = call(Shaky(), url="http://example.com/")
    assert not result.success and result.error_type.value == "denied"


def test_web_fetch_on_a_real_saved_page_keeps_the_text_and_drops_scripts_and_chrome():
    # A real mozilla.org page (tests/fixtures/web/SOURCES.md): 7 script tags, analytics,
    # conditional comments, a menu, a footer with a language picker.
    page = fixture("web/mozilla_firefox_developer_edition.html")
    assert page.count("<script") >= 7 and "_gaq" in page  # the fixture really is script-heavy
    with serving({"/firefox/developer/": lambda s: Reply(
            200, page, content_type="text/html; charset=utf-8")}) as server:
        result = call(WebFetchTool(allowed_hosts=[server.hostport]),
                      url=server.url("/firefox/developer/"))
    assert result.success, result.content
    text = result.content
    assert result.metadata["title"] == "Welcome to Firefox Developer Edition"
    assert text.startswith("# Welcome to Firefox Developer Edition\n")
    for kept in ("Get to know the features that make it the most complete browser",
                 "Developer Edition comes with a new profile so you can run it alongside",
                 "## Features and tools",
                 "Step through JavaScript code and examine or modify its state",
                 "create new ones and apply existing CSS stylesheets to any page"):
        assert kept in text, kept
    for dropped in ("_gaq", "tabzilla", "site-bundle", "html5shiv", "<script", "<!--",
                    "Contact Us", "Report Trademark Abuse", "Other languages",
                    "Español (de Argentina)", "Portions of this content", "Twitter (@mozilla)"):
        assert dropped not in text, dropped
    # Most of 25 KB of markup is chrome: what reaches the model is the article alone.
    assert result.metadata["text_chars"] < len(page) / 10
