"""Plain-text queries: turn whatever a model or a user typed into safe FTS5 terms.

A query is never passed to FTS5 as query syntax. It is cut into words (Unicode letters and
digits), each word becomes a quoted FTS5 string, and the strings are joined by AND or OR here.
So quotes, NEAR, `*`, `^`, column filters (`content:x`), parentheses, NUL bytes and the words
AND/OR/NOT are all just text: an operator word is searched as a word.
"""

from __future__ import annotations

import re
import unicodedata

from jarvis.errors import UserError

MAX_QUERY_CHARS = 4_000
MAX_TERMS = 64
MAX_TERM_CHARS = 64

# Letters and digits only: `_` and everything else separates words, as in FTS5's unicode61.
_WORD = re.compile(r"[^\W_]+")

# Common English function words. They are dropped from a query that has other words, so
# "what did I write about gardening" searches for "write" and "gardening".
STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its itself
just me more most my myself no nor not now of off on once only or other our ours ourselves out
over own same she should so some such than that the their theirs them themselves then there
these they this those through to too under until up very was we were what when where which
while who whom why will with would you your yours yourself yourselves
""".split())


def check_query(query: object) -> str:
    """The query as a string within the size limit; raise UserError otherwise."""
    if not isinstance(query, str):
        raise UserError(f"a memory query must be a string, got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise UserError(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}. "
                        f"Search with the key words only.")
    return query


def query_terms(query: str, max_terms: int = MAX_TERMS, strict: bool = True) -> list[str]:
    """The distinct words of `query`, lower-cased, stop words dropped when others remain.

    With `strict`, more than `max_terms` distinct words is a UserError; without it the first
    `max_terms` are kept (for long prompts used as queries by the context injection).
    """
    text = unicodedata.normalize("NFC", query).lower()
    words: list[str] = []
    seen: set[str] = set()
    for match in _WORD.finditer(text):
        word = match.group()[:MAX_TERM_CHARS]
        if word not in seen:
            seen.add(word)
            words.append(word)
    content = [w for w in words if w not in STOPWORDS]
    terms = content or words
    if len(terms) > max_terms:
        if strict:
            raise UserError(f"query has {len(terms)} distinct words; the limit is {max_terms}. "
                            f"Search with the key words only.")
        terms = terms[:max_terms]
    return terms


def fts_string(term: str) -> str:
    """One term as an FTS5 string literal (a quoted phrase, never an operator)."""
    return '"' + term.replace('"', '""') + '"'


def fts_expression(terms: list[str], operator: str) -> str:
    """Join quoted terms with AND or OR."""
    if operator not in ("AND", "OR"):
        raise ValueError(f"operator must be AND or OR, got {operator!r}")
    return f" {operator} ".join(fts_string(t) for t in terms)
