"""Ranking: FTS5's BM25 over every word of a query, without scoring every chunk that holds a
common word.

The answer is defined as FTS5's own ranking of `"w1" OR "w2" OR ...` with all the query's
words: `bm25()` (k1 1.2, b 0.75) summed over the words a chunk holds. FTS5 finds that top-k by
scoring every chunk that holds any of the words, about a microsecond each plus more per word
present. A word found in a quarter of 100 000 chunks makes that 25 ms, a sentence of common
words a tenth of a second. Leaving the common words out (the way stop words are) is fast but
changes the order: they still carry a fair share of BM25's weight. Instead:

- The rare words (the rarest, together found in at most RARE_BUDGET chunks, fewer for long
  queries) decide which chunks are ranked, and FTS5 ranks those with every word:
  `(rare) AND (common)` scores the chunks that also hold a common word with all their words,
  `(rare)` scores the others. Merged, the two are exactly BM25's top-k among the chunks that
  hold a rare word (see `_merge`). A chunk with common words only is ranked only when fewer
  than k chunks hold a rare word: it rarely beats one with a rare word, which weighs several
  times more (on real text the top 5 stay the same for ~99% of results;
  bench/bench_retrieval.py).
- A query of common words only ranks the chunks that hold all of them, exactly; when fewer
  than k do, the chunks that hold its rarest word, as above.
- One word ranks every chunk that holds it: BM25 has no shortcut there.

Every score returned is the chunk's exact BM25 score for the whole query. Counting is cheap
(FTS5 counts tens of millions of matches a second) and capped: each word's chunks are counted
up to RARE_BUDGET + 1 first, and at most MAX_COMMON_TERMS common words and MAX_SCORED_TERMS
words in all are scored (each word present costs FTS5 time per ranked chunk).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from jarvis.memory.query import fts_string

# The chunks ranked with every word: those holding the rarest words, up to this many.
RARE_BUDGET = 4_000
# ... for queries of up to this many words; a longer one ranks proportionally fewer chunks.
BUDGET_WORDS = 8
# Common words (each in more than RARE_BUDGET chunks) scored, the first ones of the query.
MAX_COMMON_TERMS = 16
# Words scored in all, the rare ones first.
MAX_SCORED_TERMS = 32


class Ranked(Protocol):
    chunk_id: int
    score: float


R = TypeVar("R", bound=Ranked)
# count(expression, cap): how many chunks match, at most cap. The other callable, match
# (expression, limit), returns the best `limit` chunks for an FTS5 expression, best first,
# each scored with FTS5's BM25 for the words in that expression.
Count = Callable[[str, int], int]


@dataclass(slots=True)
class Plan:
    """Which words decide the ranked chunks (`rare`) and which only add to scores (`common`).
    `kind` is "none" (no word in any chunk), "one" (a single word), "rare" (every word is
    rare: one exact ranking), "split" (rare and common words) or "common" (common only)."""

    kind: str
    rare: list[str] = field(default_factory=list)
    common: list[str] = field(default_factory=list)


def any_of(terms: Sequence[str]) -> str:
    return "(" + " OR ".join(fts_string(t) for t in terms) + ")"


def all_of(terms: Sequence[str]) -> str:
    return "(" + " AND ".join(fts_string(t) for t in terms) + ")"


def rare_budget(words: int) -> int:
    """How many chunks the rare words of a query of `words` words may hold: RARE_BUDGET, less
    for long queries (each word a chunk holds costs FTS5 time when it ranks that chunk)."""
    return RARE_BUDGET * BUDGET_WORDS // max(BUDGET_WORDS, words)


def plan(terms: Sequence[str], count: Count, chunks: int) -> Plan:
    """Sort the query's words into rare and common by how many chunks hold them (`chunks`:
    how many the store has)."""
    if len(terms) == 1:
        return Plan("one", rare=list(terms))
    budget = rare_budget(len(terms))
    counted = [(t, n) for t in terms if (n := count(fts_string(t), budget + 1))]
    if not counted:
        return Plan("none")
    rare = sorted(((t, n) for t, n in counted if n <= budget), key=lambda tn: tn[1])
    common = [t for t, n in counted if n > budget][:MAX_COMMON_TERMS]
    words = ([t for t, _ in rare] + common)[:MAX_SCORED_TERMS]
    if len(words) == 1:
        return Plan("one", rare=words)
    chosen: list[str] = []
    total = 0
    for term, n in rare[:MAX_SCORED_TERMS]:
        if total + n > budget:
            break
        chosen.append(term)
        total += n
    others = words[len(chosen):]
    if not chosen:
        return Plan("common", common=others)
    return Plan("split" if others else "rare", rare=chosen, common=others)


def best(terms: Sequence[str], top_k: int, count: Count,
         match: Callable[[str, int], Sequence[R]], chunks: int) -> list[R]:
    """The `top_k` best chunks for the plain-text query words `terms`, best first."""
    if chunks <= rare_budget(len(terms)):
        # A small store: ranking every matching chunk costs less than counting them first.
        return list(match(any_of(terms), top_k))
    p = plan(terms, count, chunks)
    if p.kind == "none":
        return []
    if p.kind in ("one", "rare"):
        return list(match(any_of(p.rare), top_k))
    if p.kind == "common":
        found = list(match(all_of(p.common), top_k))
        if len(found) >= top_k:
            return found
        # Fewer chunks hold every word than asked for: rank those with the rarest one.
        least = min(p.common, key=lambda t: count(fts_string(t), chunks + 1))
        p = Plan("split", rare=[least], common=[t for t in p.common if t != least])
    with_common = match(f"{any_of(p.rare)} AND {any_of(p.common)}", top_k)
    rare_only = match(any_of(p.rare), top_k)
    found = _merge(with_common, rare_only, top_k)
    if len(rare_only) < top_k:
        # Every chunk with a rare word is in and more are wanted: the others hold common words
        # only, and their score for the common words is their whole score.
        found = _merge(found, best(p.common, top_k, count, match, chunks), top_k)
    return found


def _merge(first: Sequence[R], second: Sequence[R], top_k: int) -> list[R]:
    """The best `top_k` of two rankings; a chunk in both keeps its score in `first`.

    For rare and common words, `first` is `(rare) AND (common)`: the chunks holding both,
    scored with every word (exact), and `second` is `(rare)`: all chunks with a rare word,
    scored with the rare words alone (exact for a chunk without a common word, too low for
    the others). Together they give the exact top-k among the chunks holding a rare word. A
    chunk of `second` that holds a common word but is missing from `first` scores at most the
    k-th score of `first` (else it would be in it), and at least its score in `second`: it
    can never push out a chunk of `first`. A chunk without a common word has its exact score.
    If `first` has fewer than k chunks, it has them all, and `second` the rest.
    """
    seen = {r.chunk_id for r in first}
    merged = list(first) + [r for r in second if r.chunk_id not in seen]
    merged.sort(key=lambda r: -r.score)  # stable: on a tie, `first` comes first
    return merged[:top_k]
