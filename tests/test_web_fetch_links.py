"""web_fetch keeps link targets: an HTML page's links come back as Markdown links
`[text](absolute URL)`, resolved against the page's final URL (after redirects) or its
`<base href>`, so a model can follow "Next: read part 2". Bounded: at most MAX_LINKS (a note
counts the rest), only http(s) targets, text and URL escaped so nothing breaks out of the
Markdown. Real pages on a loopback server; a real `jarvis ask` follows a link."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from net_support import Reply, serving

from jarvis.core.types import ToolCall
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.web_fetch import MAX_LINKS, WebFetchTool

PROSE = ("<p>This chapter explains how the parts fit together, in enough words that the "
         "extractor keeps it as the main text of the page and not as boilerplate.</p>")


def page(body: str, head: str = "", title: str = "Guide") -> str:
    return (f"<html><head><title>{title}</title>{head}</head><body><nav><a href='/'>Home</a>"
            f"</nav><article><h1>{title}</h1>{PROSE}{body}{PROSE}</article>"
            f"<footer>All rights reserved</footer></body></html>")


def html(text: str):
    return lambda seen: Reply(200, text, content_type="text/html; charset=utf-8")


def fetch(server, path: str, **extra) -> str:
    tool = WebFetchTool(allowed_hosts=[server.hostport])
    result = ToolExecutor([tool], default_timeout=30).execute(
        ToolCall("c", "web_fetch", json.dumps({"url": server.url(path), **extra})))
    assert result.success, result.content
    return result.content


def link_targets(markdown: str) -> list[str]:
    """The target of every Markdown link: what follows a `](` whose bracket is not escaped
    (an even number of backslashes before it) up to `)`."""
    targets = []
    for match in re.finditer(r"(\\*)\]\(", markdown):
        if len(match.group(1)) % 2:
            continue
        rest = markdown[match.end():]
        targets.append(rest[:rest.index(")")] if ")" in rest else rest)
    return targets


def test_relative_links_resolve_against_the_final_url_after_redirects():
    routes = {
        "/start": lambda s: Reply(302, headers={"Location": "/docs/guide/part1.html"}),
        "/docs/guide/part1.html": html(page(
            "<p>Next: <a href='part2.html'>read part 2</a>. See also <a href='../faq/'>the "
            "FAQ</a>, <a href='/about?x=1&amp;y=2#team'>about us</a> and <a "
            "href='//mirror.example/guide'>a mirror</a>.</p>", title="Part 1")),
        "/docs/guide/part2.html": html(page("<p>Part two begins where part one ended.</p>",
                                            title="Part 2")),
    }
    with serving(routes) as server:
        text = fetch(server, "/start")
        base = server.url("/")
        assert f"[read part 2]({base}docs/guide/part2.html)" in text
        assert f"[the FAQ]({base}docs/faq/)" in text
        assert f"[about us]({base}about?x=1&y=2#team)" in text
        assert "[a mirror](http://mirror.example/guide)" in text
        assert "[Home]" not in text  # navigation is still dropped
        # The link a model reads is one it can follow.
        (target,) = [t for t in link_targets(text) if t.endswith("part2.html")]
        followed = fetch(server, target[len(base) - 1:])  # the path, from its "/"
    assert "Part two begins where part one ended." in followed


def test_base_href_is_honoured_and_a_bad_one_ignored():
    body = "<p>Read <a href='next.html'>the next page</a> now.</p>"
    routes = {
        "/a/page.html": html(page(body, head="<base href='/mirror/v2/'>")),
        "/b/page.html": html(page(body, head="<base href='javascript:alert(1)//'>")),
    }
    with serving(routes) as server:
        assert f"[the next page]({server.url('/mirror/v2/next.html')})" in fetch(server,
                                                                             "/a/page.html")
        assert f"[the next page]({server.url('/b/next.html')})" in fetch(server, "/b/page.html")


def test_hostile_links_cannot_break_out_of_the_markdown():
    body = ("<p>Links: "
            "<a href='javascript:alert(1)'>js</a> "
            "<a href='  JaVaScRiPt:alert(2)'>js-case</a> "
            "<a href='java&#x09;script:alert(3)'>js-tab</a> "
            "<a href='java\nscript:alert(4)'>js-newline</a> "
            "<a href='data:text/html;base64,PHNjcmlwdD4='>data</a> "
            "<a href='vbscript:msgbox(1)'>vb</a> "
            "<a href='mailto:a@example.com'>mail</a> "
            "<a href='file:///etc/passwd'>file</a> "
            "<a href='#top'>same page</a> "
            "<a href='x)](javascript:alert(5))'>paren-url</a> "
            "<a href='a b\"c&lt;d&gt;e`f\\g'>odd-url</a> "
            "<a href='/ok'>text ](javascript:alert(6)) [x]</a> "
            "<a href='/ok2'>back\\slash ` tick</a> "
            "<a href='/ok4'>ends in a backslash\\</a> "
            "<a href='https://evil.example/'>[</a> "
            "<a href='http://[::1]:8/v6'>ipv6</a> "
            "<a href='/ok3'><img src='x.png'></a>"
            ".</p>")
    with serving({"/p": html(page(body))}) as server:
        text = fetch(server, "/p")
    targets = link_targets(text)
    assert targets, text
    for target in targets:
        assert re.fullmatch(r"https?://(\[[0-9a-f:]+\](:\d+)?|[^\s()<>\[\]\"'`\\/]+)"
                            r"([/?#][^\s()<>\[\]\"'`\\]*)?", target), (target, text)
    assert not any(re.match(r"(?i)\s*<?\s*(javascript|data|vbscript|mailto|file):", t)
                   for t in targets)
    for word in ("js", "js-case", "js-tab", "js-newline", "data", "vb", "mail", "file",
                 "same page"):
        assert f" {word} " in f" {text} ".replace(".", " "), (word, text)  # the text stays
    assert "[ipv6](http://[::1]:8/v6)" in text
    # A backslash at the end of the text or a lone bracket cannot swallow the closing bracket:
    # each text keeps its own target.
    assert f"[ends in a backslash\\\\]({server.url('/ok4')})" in text
    assert "[\\[](https://evil.example/)" in text
    assert len(targets) == 7, targets
    assert "javascript:alert(5)" not in [t.split("/")[-1] for t in targets]


def test_many_links_are_capped_and_counted():
    items = "".join(f"<p>Item {i}: see <a href='/item/{i}'>item {i}</a> for the details "
                    f"of the item.</p>" for i in range(MAX_LINKS + 150))
    with serving({"/list": html(page(items))}) as server:
        text = fetch(server, "/list", max_chars=200_000)
    targets = link_targets(text)
    assert len(targets) == MAX_LINKS
    assert targets[0] == server.url("/item/0") and targets[-1] == server.url(
        f"/item/{MAX_LINKS - 1}")
    assert f"Item {MAX_LINKS + 100}: see item {MAX_LINKS + 100} for" in text  # text kept
    assert f"[150 more links on this page kept as text only: at most {MAX_LINKS} links" in text


def test_jarvis_ask_follows_next_read_part_2(tmp_path: Path, cli_env):
    """End to end: the model fetches part 1, finds the link in what web_fetch returned, and
    fetches part 2 by it; the answer quotes part 2."""
    from jarvis.testing import FakeOpenAIServer, reply, tool_call

    routes = {
        "/guide/part1.html": html(page("<p>Next: <a href='part2.html'>read part 2</a>.</p>",
                                       title="Part 1")),
        "/guide/part2.html": html(page("<p>The secret ingredient is patience.</p>",
                                       title="Part 2")),
    }

    def model(body: dict):
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if not results:
            return reply(tool_calls=[tool_call("web_fetch", {"url": start})])
        if len(results) == 1:
            found = re.search(r"\[read part 2\]\((http[^)]+)\)", results[0])
            assert found, results[0]
            return reply(tool_calls=[tool_call("web_fetch", {"url": found.group(1)})])
        line = next(ln for ln in results[1].splitlines() if "ingredient" in ln)
        return f"Part 2 says: {line}"

    with serving(routes) as server, FakeOpenAIServer(default=model) as engine:
        start = server.url("/guide/part1.html")
        (tmp_path / "config.toml").write_text(
            f'[tools.web_fetch]\nallowed_hosts = ["{server.hostport}"]\n')
        env = dict(cli_env, JARVIS_ENGINE="vllm", JARVIS_MODEL="m", VLLM_HOST=engine.url)
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "--tools", "web_fetch",
                              "What does the guide's part 2 say?"], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120,
                             stdin=subprocess.DEVNULL)
        paths = [seen.path for seen in server.seen]
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "Part 2 says: The secret ingredient is patience."
    assert paths == ["/guide/part1.html", "/guide/part2.html"]
