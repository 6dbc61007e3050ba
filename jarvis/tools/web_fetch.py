"""web_fetch: a web page's main text (Markdown-ish), its title and its final URL.

The page comes through the same SSRF-safe client as http_request (`[tools.web_fetch]` has its
own allowed_hosts / blocked_hosts / max_bytes / timeout). HTML goes through trafilatura, which
drops navigation, ads and footers; plain text, Markdown and JSON are returned as they are;
PDFs and other binary bodies are refused with a description (type and size), never dumped.
trafilatura is the `web` extra: `pip install 'jarvis[web]'`.

Links in the main text stay links, so a model can follow "Next: read part 2": Markdown
`[text](absolute-url)`, resolved against the page's final URL (after redirects) or its
`<base href>`. trafilatura's own `include_links` resolves against the site's root rather
than the page (`part2.html` on /docs/part1.html became /part2.html) and ignores `<base>`, so
jarvis resolves each link itself first and hands trafilatura a placeholder it leaves alone.
Only http(s) links are kept (javascript:, data:, mailto: and the like become plain text), the
URL is percent-encoded where Markdown would read it (spaces, brackets, parentheses, quotes),
trafilatura escapes the link text, and at most MAX_LINKS are kept: the rest stay as text and
a note says how many.
"""

from __future__ import annotations

import html
import re
import secrets
from typing import Any
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.http_request import (
    NetTool,
    decode,
    describe_binary,
    is_text,
    net_failure,
    response_metadata,
    url_egress,
)
from jarvis.tools.spec import ToolSpec

DEFAULT_MAX_CHARS = 20_000
MAX_CHARS = 200_000
INSTALL_WEB = "pip install 'jarvis[web]'"
_HTML_TYPES = ("text/html", "application/xhtml+xml")
# Bounded on both sides: `<title[^>]*>(.*?)</title>` was quadratic on a page of unclosed
# <title> tags (~70 s for 200 KB).
_TITLE = re.compile(r"<title[^<>]{0,200}>([^<]{0,2000})</title>", re.I)
# trafilatura spends ~0.1-0.2 ms per element (extraction and metadata), so a 2 MiB page of
# 150,000 paragraphs held a thread for minutes; above this many elements the page's text is
# taken in one linear pass instead.
MAX_ELEMENTS = 25_000
# trafilatura's fallbacks (readability and justext, run when its own extraction looks short)
# are quadratic in short blocks: justext looks for each short paragraph's nearest good or bad
# neighbour by walking the run of short ones, so 6,000 tiny tables (24,000 elements, 264 KB)
# took 34 s. Above this many elements only trafilatura's own extractor runs (`fast`), which
# stays linear (that page: under 1 s); the pages people read are far below it.
FAST_ELEMENTS = 4_000
_NOT_TEXT = ("script", "style", "noscript", "template", "svg", "math", "iframe", "object",
             "nav", "header", "footer", "aside", "form", "button", "select", "head")
_META_CHARSET = re.compile(rb"""<meta[^>]{0,200}?charset=["']?([A-Za-z0-9_-]{1,40})""", re.I)
MAX_LINKS = 200  # links kept per page; more stay plain text (a note says how many)
MAX_URL_CHARS = 2048  # a longer link target is dropped (its text stays)
_NETLOC = re.compile(r"[A-Za-z0-9.\-_~:@\[\]%!$&'*+,;=]+")


def _missing(tool: str, package: str, exc: ImportError) -> ToolResult:
    return ToolResult.failure(tool, f"{tool} needs the {package} package, which cannot be "
                                    f"imported ({exc.name or exc}): {INSTALL_WEB}",
                              ErrorType.EXECUTION)


def _title(page: str) -> str:
    match = _TITLE.search(page[:200_000])
    return " ".join(html.unescape(match.group(1)).split()) if match else ""


def plain_text(tree: Any) -> str:
    """The visible text of a parsed page (article or main when there is one), one pass."""
    from jarvis._lazy import load_module

    etree = load_module("lxml.etree")

    etree.strip_elements(tree, *_NOT_TEXT, etree.Comment, etree.ProcessingInstruction,
                         with_tail=False)
    found = tree.xpath("//article | //main")
    root = found[0] if found else tree  # (an lxml element without children is falsy)
    blocks = (" ".join(t.split()) for t in root.itertext())
    return " ".join(b for b in blocks if b)


def _safe_url(raw: str, base: str) -> str | None:
    """`raw` resolved against `base` as an absolute http(s) URL that cannot end a Markdown
    link early, or None (another scheme, no host, too long, unparsable)."""
    try:
        parts = urlsplit(urljoin(base, raw.strip()))
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    if not _NETLOC.fullmatch(parts.netloc) or "(" in parts.netloc or ")" in parts.netloc:
        return None
    # Percent-encode what Markdown would read (space, <>, (), [], quotes, backslash, `);
    # an existing %XX stays as it is.
    safe = "/%:@!$&*+,;=-._~"
    url = urlunsplit((parts.scheme.lower(), parts.netloc, quote(parts.path, safe=safe),
                      quote(parts.query, safe=safe + "?/"),
                      quote(parts.fragment, safe=safe + "?/")))
    return url if len(url) <= MAX_URL_CHARS else None


def _base_of(tree: Any, page_url: str) -> str:
    """The URL links are resolved against: the page's `<base href>` (an http(s) one), else
    the page's final URL."""
    for base in tree.iter("base"):
        href = base.get("href")
        if href:
            resolved = _safe_url(href, page_url)
            if resolved is not None:
                return resolved
            break
    return page_url


def mark_links(tree: Any, page_url: str) -> tuple[str, list[str]]:
    """Mark every `<a href>` of `tree` for fill_links: its target becomes a placeholder
    standing for its resolved URL and its text starts with a marker of the same number; a
    link that may not be kept (another scheme, no text) becomes plain text. Returns (the
    placeholder's unguessable tag, the URLs by number)."""
    tag = secrets.token_hex(6)
    base = _base_of(tree, page_url)
    urls: list[str] = []
    for link in list(tree.iter("a")):
        href = (link.get("href") or "").strip()
        # A link to a place on this same page (#top) leads nowhere new.
        url = _safe_url(href, base) if href and not href.startswith("#") else None
        text = " ".join(link.text_content().split())
        for name in list(link.attrib):
            del link.attrib[name]
        if url is None or not text:
            link.tag = "span"  # its text stays, as text
            continue
        number = len(urls)
        link.set("href", f"https://l{tag}.invalid/{number}")
        link.text = f"m{tag}n{number}e" + (link.text or "")
        urls.append(url)
    return tag, urls


def fill_links(text: str, tag: str, urls: list[str]) -> tuple[str, int]:
    """Put the URLs back for the links trafilatura kept, the first MAX_LINKS as Markdown
    links and the rest as their text; returns (text, how many were dropped). The marker at
    the start of a link's text finds where it begins, whatever the text holds."""
    marker = f"m{tag}n"
    pattern = re.compile(r"\[" + marker + r"(\d+)e(.{0,4000}?)\]\(<?https://l" + tag
                         + r"\.invalid/\1>?\)", re.DOTALL)
    kept = dropped = 0

    def one(match: re.Match[str]) -> str:
        nonlocal kept, dropped
        number, label = int(match.group(1)), match.group(2)
        if number >= len(urls) or kept >= MAX_LINKS:
            dropped += number < len(urls)
            return label
        kept += 1
        return f"[{_link_text(label)}]({urls[number]})"

    text = pattern.sub(one, text)
    # What trafilatura did not keep as a link (a marker or a target on its own): never shown.
    text = re.sub(marker + r"\d+e", "", text)
    text = re.sub(r"https://l" + tag + r"\.invalid/(\d+)",
                  lambda m: urls[int(m.group(1))] if int(m.group(1)) < len(urls) else "", text)
    return text, dropped


def _link_text(text: str) -> str:
    """Link text that cannot end its link early: every bracket escaped, and a backslash that
    escapes nothing (one at the end) doubled."""
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\\" and i + 1 < len(text) and not text[i + 1].isalnum() \
                and not text[i + 1].isspace():
            out.append(text[i:i + 2])  # an escape trafilatura wrote (\[, \*, \\): kept
            i += 2
            continue
        out.append("\\\\" if char == "\\" else f"\\{char}" if char in "[]" else char)
        i += 1
    return "".join(out)


def html_to_text(page: str, url: str) -> tuple[str, str, bool]:
    """(title, main text as Markdown with its links, whether the plain-text fallback was
    used) of an HTML page; raises ImportError without trafilatura."""
    from jarvis._lazy import load_module

    trafilatura = load_module("trafilatura")
    load_html = load_module("trafilatura.utils").load_html

    tree = load_html(page)
    elements = sum(1 for _ in tree.iter()) if tree is not None else 0
    if elements > MAX_ELEMENTS:
        title = next((" ".join(t.text_content().split()) for t in tree.iter("title")), "")
        text = plain_text(tree)
        note = (f"[this page has too many elements (over {MAX_ELEMENTS:,}) for main-text "
                f"extraction; its whole visible text follows]\n\n")
        return (title or _title(page))[:300], note + text if text else "", True

    tag, urls = mark_links(tree, url) if tree is not None else ("", [])
    text = trafilatura.extract(tree if tree is not None else page, url=url,
                               output_format="markdown", include_links=True,
                               include_images=False, include_tables=True, favor_recall=True,
                               include_comments=False, fast=elements > FAST_ELEMENTS) or ""
    if tag:
        text, dropped = fill_links(text, tag, urls)
        if dropped:
            text += (f"\n\n[{dropped} more link{'s' if dropped != 1 else ''} on this page "
                     f"kept as text only: at most {MAX_LINKS} links are shown]")
    title = ""
    meta = trafilatura.extract_metadata(page, default_url=url)
    if meta is not None and meta.title:
        title = meta.title
    if not title:
        title = _title(page)
    return title.strip(), text.strip(), False


@ToolRegistry.register("web_fetch")
class WebFetchTool(NetTool):
    """Fetch a web page and return its main text, title and final URL."""

    tool_id = "web_fetch"

    def __init__(self, allowed_hosts: list[str] | None = None,
                 blocked_hosts: list[str] | None = None, max_bytes: int = 2_097_152,
                 timeout: float = 30.0, max_redirects: int = 5) -> None:
        super().__init__(allowed_hosts, blocked_hosts, max_bytes, timeout, max_redirects)

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="web_fetch",
            description="Fetch a web page (http/https, public addresses only) and return its "
                        "title, final URL and main text as Markdown, without navigation, ads "
                        "and footers; links stay as [text](absolute URL) to follow. PDFs and "
                        "other binary files are refused.",
            parameters={
                "type": "object",
                "properties": {
                    "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                            "description": "The page's http:// or https:// URL"},
                    "max_chars": {"type": "integer", "minimum": 100, "maximum": MAX_CHARS,
                                  "default": DEFAULT_MAX_CHARS,
                                  "description": "Longest text returned; longer is cut"},
                },
                "required": ["url"],
            },
            category="web",
            latency_estimate=1.0,
            timeout_seconds=self.timeout + 10.0,
            output_labels=frozenset({"untrusted"}),
            egress="network",
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        return url_egress("web_fetch", arguments)  # max_chars is applied here, never sent

    def execute(self, **params: Any) -> ToolResult:
        max_chars = params.get("max_chars") or DEFAULT_MAX_CHARS
        if not isinstance(max_chars, int) or isinstance(max_chars, bool) or not (
                100 <= max_chars <= MAX_CHARS):
            return ToolResult.failure("web_fetch", f"max_chars must be an integer from 100 to "
                                                   f"{MAX_CHARS}", ErrorType.INVALID_ARGS)
        from jarvis.security.net import BlockedURLError, FetchError

        try:
            response = self.client.request(
                "GET", params.get("url"),
                headers={"Accept": "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.5"})
        except (BlockedURLError, FetchError) as exc:
            return net_failure("web_fetch", exc)
        metadata = response_metadata(response)
        kind = response.content_type
        if response.status >= 400:
            return ToolResult.failure("web_fetch", f"HTTP {response.status} {response.reason} "
                                                   f"from {response.url}", ErrorType.EXECUTION,
                                      **metadata)
        if kind == "application/pdf" or response.body[:5] == b"%PDF-":
            return ToolResult.failure(
                "web_fetch", f"{response.url} is a PDF document ({len(response.body)} bytes"
                f"{' or more' if response.truncated else ''}); web_fetch reads HTML and text "
                f"pages only", ErrorType.EXECUTION, **metadata)
        if not is_text(kind, response.body):
            return ToolResult.failure(
                "web_fetch", f"{response.url} is not a text page: "
                f"{describe_binary(kind, len(response.body), response.truncated, response.body)}",
                ErrorType.EXECUTION, **metadata)
        charset = response.charset
        if charset is None and kind in _HTML_TYPES:  # many pages say it only in a <meta> tag
            match = _META_CHARSET.search(response.body[:4096])
            charset = match.group(1).decode("ascii") if match else None
        page = decode(response.body, charset)
        title, fallback = "", False
        if kind in _HTML_TYPES or (not kind and "<html" in page[:2000].lower()):
            try:
                title, text, fallback = html_to_text(page, response.url)
            except ImportError as exc:
                return _missing("web_fetch", "trafilatura", exc)
            if not text:
                text = "[no main text found on this page]"
        else:
            text = page.strip()
        cut = len(text) - max_chars
        if cut > 0:
            text = text[:max_chars] + f"\n[... {cut} more characters cut (max_chars) ...]"
        if response.truncated:
            text += (f"\n[... the page was larger than {len(response.body)} bytes; only that "
                     f"much was read ...]")
        head = (f"# {title}\n" if title else "") + f"URL: {response.url}\n\n"
        metadata.update(title=title, text_chars=len(text), cut_chars=max(cut, 0),
                        plain_text_fallback=fallback)
        return ToolResult(tool_name="web_fetch", content=head + text, metadata=metadata)
