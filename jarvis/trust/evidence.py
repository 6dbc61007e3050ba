"""What the guard compares a call against: the person's own words and the links already seen.

- `words(text)`: the tokens of a text (maximal runs of letters and digits), after decoding
  percent-escapes, so `Z%C3%BCrich` is the token `Zürich`.
- `Evidence`: indexes built from the person's texts (their tokens in a few spellings, the
  host names they wrote) and from links found in results that carry no private data.
- `covered_by_person(text, evidence)`: every token of `text` is one of the person's, and
  what lies between tokens is short punctuation (not a second channel for bits).
- `url_covered(url, evidence)`: a link seen verbatim, or a host the person named with a path
  and query made of the person's words.

Nothing here resolves a name or opens a connection: it is all string work, cheap enough to
run before every egress call of a run that needs it. (urllib.parse and html are imported on
first use: the executor imports this module, and a run that reads nothing needs neither.)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from urllib.parse import SplitResult


def unquote(text: str, errors: str = "replace") -> str:
    from urllib.parse import unquote as _unquote

    return _unquote(text, errors=errors)


def urlsplit(url: str) -> Any:
    from urllib.parse import urlsplit as _urlsplit

    return _urlsplit(url)

# A token: a maximal run of letters and digits (any script). "_" is not a letter here.
_TOKEN = re.compile(r"[^\W_]+")
IGNORED_TOKENS = frozenset({"http", "https", "www"})
# Non-token characters allowed between two tokens (or at either end) of a covered text: a
# longer run could encode bits in punctuation the person never wrote.
MAX_GAP = 3
# Characters that may stand between them: ASCII punctuation and space (a zero-width or
# look-alike character from the rest of Unicode is a bit channel), plus what the person wrote.
ASCII_GAPS = frozenset(" \t\r\n!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# Absolute URLs in text; trailing punctuation is trimmed in `_variants`.
_URL = re.compile(r"(?i)\bhttps?://[^\s<>\"'`\\^{}|\x00-\x1f]+")
# href/src attributes of HTML, resolved against the page's own URL.
_ATTR = re.compile(r"""(?i)\b(?:href|src)\s*=\s*["']([^"'<>\s]{1,4000})["']""")
# A host as people write it: labels with dots (example.com, 127.0.0.1), localhost, a port.
_HOST = re.compile(r"(?i)(?<![\w.-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+"
                   r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?|localhost)(?::(\d{1,5}))?(?![\w-])")
_TRAIL = ".,;:!?'\")]}>*_~"
MAX_LINKS_PER_TEXT = 5_000
MAX_SCAN_CHARS = 4_000_000
# Standard request headers a model may add without them counting as data it composed: a
# handful of fixed values, at most a few bits of choice.
PLAIN_HEADERS: dict[str, frozenset[str]] = {
    "accept": frozenset({"*/*", "application/json", "text/html", "text/plain",
                         "application/xml", "text/html,application/xhtml+xml",
                         "application/json, text/plain, */*"}),
    "content-type": frozenset({"application/json", "text/plain", "application/xml",
                               "application/x-www-form-urlencoded",
                               "application/json; charset=utf-8", "text/plain; charset=utf-8"}),
}


def words(text: str) -> list[str]:
    """The tokens of `text`, percent-escapes decoded first (`+` stays as it is)."""
    if "%" in text:
        text = unquote(text, errors="replace")
    return _TOKEN.findall(text)


def _forms(token: str) -> tuple[str, ...]:
    # The person's spelling, and the spellings a model writes it in without choosing bits:
    # all lower case, all upper case, capitalized.
    return (token, token.lower(), token.upper(), token.capitalize())


def _split(url: str) -> tuple[str, SplitResult | None]:
    """(the URL as compared, its parts): surrounding space and the #fragment (never sent)
    removed, the scheme and host lower-cased; parts None when it does not parse."""
    head = url.strip().partition("#")[0]
    try:
        parts = urlsplit(head)
    except ValueError:
        return head, None
    scheme, netloc = parts.scheme, parts.netloc
    if scheme and netloc and (scheme != scheme.lower() or netloc != netloc.lower()):
        head = parts._replace(scheme=scheme.lower(), netloc=netloc.lower()).geturl()
    return head, parts


def normalize_url(url: str) -> str:
    """A URL as compared: surrounding space and the #fragment (never sent) removed, the
    scheme and host lower-cased."""
    return _split(url)[0]


def _host_of(parts: SplitResult) -> tuple[str, str]:
    try:
        host = (parts.hostname or "").lower().rstrip(".")
        port = parts.port
    except ValueError:
        return "", ""
    if not host:
        return "", ""
    shown = f"[{host}]" if ":" in host else host
    return host, f"{shown}:{port}" if port is not None else shown


def url_host(url: str) -> tuple[str, str]:
    """(host, host[:port]) of an absolute URL, lower case, the port only when the URL gives
    one; ("", "") when it has none. String work only: no name is resolved."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return "", ""
    return _host_of(parts)


def _variants(candidate: str) -> list[str]:
    """A URL found in text and its forms without trailing punctuation and unbalanced
    closing brackets (a sentence's full stop, a Markdown link's parenthesis)."""
    out = [candidate]
    text = candidate
    while text and text[-1] in _TRAIL:
        closing = text[-1]
        opening = {")": "(", "]": "[", "}": "{", ">": "<"}.get(closing)
        text = text[:-1]
        if opening is not None and text.count(opening) >= text.count(closing) + 1:
            out.append(text + closing)  # balanced: the bracket may belong to the URL
        out.append(text)
    return out


def extract_links(text: str, base_url: str | None = None) -> list[str]:
    """Absolute URLs in `text` (HTML entities decoded, fragments dropped), plus href/src
    attributes resolved against `base_url` when one is given (an HTML page's own URL)."""
    if not text:
        return []
    text = text[:MAX_SCAN_CHARS]
    found: list[str] = []
    if "&" in text:
        import html

        text = html.unescape(text)
    for match in _URL.finditer(text):
        found.extend(_variants(match.group()))
        if len(found) >= MAX_LINKS_PER_TEXT:
            break
    if base_url and ("href" in text or "src" in text):
        from urllib.parse import urljoin

        for match in _ATTR.finditer(text):
            try:
                found.append(urljoin(base_url, match.group(1)))
            except ValueError:
                continue
            if len(found) >= 2 * MAX_LINKS_PER_TEXT:
                break
    return [normalize_url(u) for u in found if u.lower().startswith(("http://", "https://"))]


def named_hosts(text: str) -> set[str]:
    """Host names the text names: `example.com`, `wttr.in`, `127.0.0.1:8123`, `localhost`,
    each as host and, when a port is written, as host:port (lower case, `www.` dropped)."""
    out: set[str] = set()
    for match in _HOST.finditer(text[:MAX_SCAN_CHARS]):
        host = match.group(1).lower()
        if "." not in host and host != "localhost":
            continue
        port = match.group(2)
        for name in {host, host.removeprefix("www.")}:
            out.add(f"{name}:{port}" if port else name)
    return out


class Evidence:
    """Indexes of the person's words and of links seen, grown text by text."""

    __slots__ = ("person_forms", "person_counts", "person_gaps", "person_hosts", "links")

    def __init__(self) -> None:
        self.person_forms: set[str] = set()
        self.person_counts: dict[str, int] = {}  # lower-case token -> times the person wrote it
        self.person_gaps: set[str] = set()  # the non-ASCII characters between their words
        self.person_hosts: set[str] = set()
        self.links: set[str] = set()

    def add_person_text(self, text: str) -> None:
        counts = self.person_counts
        for token in words(text):
            self.person_forms.update(_forms(token))
            counts[token.lower()] = counts.get(token.lower(), 0) + 1
        self.person_gaps.update(c for c in _TOKEN.sub("", text) if c not in ASCII_GAPS)
        self.person_hosts |= named_hosts(text)
        for link in extract_links(text):
            self.links.add(link)
            _, hostport = url_host(link)
            if hostport:
                self.person_hosts.add(hostport)
                self.person_hosts.add(hostport.removeprefix("www."))

    def add_links(self, links: Iterable[str]) -> None:
        self.links.update(links)

    def host_named(self, hostport: str, host: str) -> bool:
        """Whether the person wrote this host (with its port when the URL has one)."""
        named = self.person_hosts
        return hostport in named or hostport.removeprefix("www.") in named or (
            hostport == host and host.removeprefix("www.") in named)


def budget() -> dict[str, int]:
    """A new count of the person's words one egress used: each may be used as often as they
    wrote it. Without this bound a call could spell any data in their words, each a digit in
    base (number of words): "which of your words, in which order" carries the secret, and
    the receiver decodes it."""
    return {}


def covered_by_person(text: str, evidence: Evidence, used: dict[str, int] | None = None) -> bool:
    """Whether every token of `text` is one of the person's (http, https and www aside), no
    run of other characters between them is longer than MAX_GAP nor holds a character
    outside ASCII punctuation and space that the person did not write, and (with `used`,
    from `budget()`, shared by every piece of one egress and counted here) no word is used
    more often than the person wrote it."""
    if "%" in text:
        text = unquote(text, errors="replace")
    forms = evidence.person_forms
    last = 0
    for match in _TOKEN.finditer(text):
        if match.start() - last > MAX_GAP or not _plain_gap(text[last:match.start()], evidence):
            return False
        token = match.group()
        lower = token.lower()
        if lower in IGNORED_TOKENS:
            last = match.end()
            continue
        if token not in forms:
            return False
        if used is not None:
            times = used.get(lower, 0) + 1
            if times > evidence.person_counts.get(lower, 0):
                return False
            used[lower] = times
        last = match.end()
    return len(text) - last <= MAX_GAP and _plain_gap(text[last:], evidence)


def _plain_gap(gap: str, evidence: Evidence) -> bool:
    return all(c in ASCII_GAPS or c in evidence.person_gaps for c in gap)


def url_covered(url: str, evidence: Evidence, used: dict[str, int] | None = None) -> str | None:
    """How a URL is covered ("link": seen verbatim in the person's words or a result without
    private data; "person": a host the person named, the rest made of their words, using up
    `used` as covered_by_person does), or None."""
    normal, parts = _split(url)
    if normal in evidence.links:
        return "link"
    if parts is None:
        return None
    host, hostport = _host_of(parts)
    if not host or not evidence.host_named(hostport, host):
        return None
    if parts.username or parts.password:
        return None  # credentials in a URL are data the person did not write here
    # "/", "?", "&", "=" and "+" are punctuation between the person's words like any other.
    rest = parts.path + ("?" + parts.query if parts.query else "")
    return "person" if covered_by_person(rest, evidence, used) else None
