"""Snippets of a search hit: the part of a chunk around its first match, with where each
match of the query's words is, so a listing can show a few lines instead of a 1 000-character
chunk and highlight what matched."""

from __future__ import annotations

import re
from collections.abc import Callable

from jarvis.memory.query import query_terms

_SPACE = re.compile(r"\s+")


def _pattern(query: str) -> re.Pattern[str] | None:
    """Words of the query as word beginnings ("plan" finds "planning"; FTS5 stems likewise)."""
    terms = sorted(query_terms(query, strict=False), key=len, reverse=True)
    if not terms:
        return None
    return re.compile(r"(?<![^\W_])(?:" + "|".join(re.escape(t) for t in terms) + r")[^\W_]*",
                      re.IGNORECASE)


def snippet(text: str, query: str, width: int = 240) -> tuple[str, list[tuple[int, int]]]:
    """(about `width` characters of `text` around its first match of `query`'s words, with
    whitespace folded and "…" where it was cut; the (start, end) of every match in it)."""
    flat = _SPACE.sub(" ", text).strip()
    pattern = _pattern(query)
    first = pattern.search(flat) if pattern is not None else None
    start = 0
    if first is not None and first.start() > width // 3:
        start = flat.rfind(" ", 0, first.start() - width // 3) + 1
    end = min(len(flat), start + width)
    if end < len(flat):
        cut = flat.rfind(" ", start, end)
        end = cut if cut > start + width // 2 else end
    shown = ("…" if start > 0 else "") + flat[start:end] + ("…" if end < len(flat) else "")
    spans = [m.span() for m in pattern.finditer(shown)] if pattern is not None else []
    return shown, spans


def highlighted(text: str, spans: list[tuple[int, int]], mark: Callable[[str], str],
                plain: Callable[[str], str] = str) -> str:
    """`text` with each span passed through `mark` (e.g. a terminal colour) and the rest
    through `plain` (e.g. making escape sequences visible)."""
    out, last = [], 0
    for start, end in spans:
        out.append(plain(text[last:start]))
        out.append(mark(text[start:end]))
        last = end
    out.append(plain(text[last:]))
    return "".join(out)
