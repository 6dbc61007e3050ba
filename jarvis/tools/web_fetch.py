"""web_fetch: a web page's main text (Markdown-ish), its title and its final URL.

The page comes through the same SSRF-safe client as http_request (`[tools.web_fetch]` has its
own allowed_hosts / blocked_hosts / max_bytes / timeout). HTML goes through trafilatura, which
drops navigation, ads and footers; plain text, Markdown and JSON are returned as they are;
PDFs and other binary bodies are refused with a description (type and size), never dumped.
trafilatura is the `web` extra: `pip install 'jarvis[web]'`.
"""

from __future__ import annotations

import html
import re
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.tools.http_request import (
    NetTool,
    decode,
    describe_binary,
    is_text,
    net_failure,
    response_metadata,
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


def html_to_text(page: str, url: str) -> tuple[str, str, bool]:
    """(title, main text as Markdown, whether the plain-text fallback was used) of an HTML
    page; raises ImportError without trafilatura."""
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

    text = trafilatura.extract(page, url=url, output_format="markdown", include_links=False,
                               include_images=False, include_tables=True, favor_recall=True,
                               include_comments=False, fast=elements > FAST_ELEMENTS) or ""
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
                        "and footers. PDFs and other binary files are refused.",
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
        )

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
