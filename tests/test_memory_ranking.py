"""The memory's ranking against exact BM25 on real text: the docstrings of the standard
library's top-level modules, about 2 000 chunks of 600 characters. Exact BM25 is FTS5's own
ranking of every query word OR-ed together over every matching chunk (bench/bench_retrieval.py
measures the same at 100 000 chunks).

RARE_BUDGET is lowered to this corpus' size, so that most queries take the bounded paths
(rare and common words, common words only) that a 100 000-chunk store takes."""

from __future__ import annotations

import ast
import random
import re
import sqlite3
import sysconfig
from collections import Counter
from pathlib import Path

import pytest

from jarvis.memory import ranking
from jarvis.memory.query import STOPWORDS, fts_expression, query_terms
from jarvis.memory.sqlite import SQLiteMemory

WORD = re.compile(r"[^\W_]+")
BUDGET = 150  # rare words together in at most this many chunks (100 000 chunks: 4 000)


def docstrings(path: Path) -> str:
    """A module's docstrings as Markdown-like text: its name, then each documented class and
    function under a `##` heading (what pydoc shows)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parts = [f"# {path.stem}", ast.get_docstring(tree) or ""]
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node)
            if doc:
                parts.append(f"## {node.name}\n\n{doc}")
    return "\n\n".join(p for p in parts if p)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    mem = SQLiteMemory(tmp_path_factory.mktemp("ranking") / "memory.db", chunk_size=600,
                       chunk_overlap=60)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    mem.store_many([(docstrings(path), path.name, None) for path in sorted(stdlib.glob("*.py"))])
    yield mem
    mem.close()


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ranking, "RARE_BUDGET", BUDGET)


def chunk_texts(mem: SQLiteMemory) -> list[str]:
    with mem._reader() as conn:
        return [r[0] for r in conn.execute("SELECT content FROM chunks ORDER BY id")]


def queries(texts: list[str], count: int = 240) -> list[str]:
    """Headings, sentences and keywords (1-4 words) drawn from the chunks."""
    rng = random.Random(28)
    out: list[str] = []
    while len(out) < count:
        text = rng.choice(texts)
        kind = len(out) % 4
        if kind == 0:
            found = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
        elif kind == 1:
            found = [s for s in re.findall(r"[A-Z][^.!?\n]{15,160}[.!?]", text)
                     if len(WORD.findall(s)) >= 4]
        else:
            words = sorted({w.lower() for w in WORD.findall(text)
                            if len(w) > 2 and not w.isdigit() and w.lower() not in STOPWORDS})
            n = rng.randint(2, 4) if kind == 2 else 1
            found = [" ".join(rng.sample(words, n))] if len(words) >= n else []
        if found and query_terms(rng.choice(found), strict=False):
            out.append(rng.choice(found))
    return [q for q in out if len(query_terms(q, strict=False)) <= 64]


def exact(conn: sqlite3.Connection, terms: list[str]) -> list[tuple[int, float]]:
    """FTS5's BM25 over every chunk holding any word: every match, best first."""
    return conn.execute("SELECT rowid, -rank FROM chunks_fts WHERE chunks_fts MATCH ? "
                        "ORDER BY rank", (fts_expression(terms, "OR"),)).fetchall()


def counter(conn: sqlite3.Connection):
    def count(expression: str, cap: int) -> int:
        return conn.execute("SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts "
                            "MATCH ? LIMIT ?)", (expression, cap)).fetchone()[0]
    return count


def agreement(got: list[tuple[int, float]], ref: list[tuple[int, float]], k: int = 5) -> float:
    """Share of `got` that exact BM25 ranks in its top k (a chunk tied with the k-th counts)."""
    kth = ref[:k][-1][1]
    scores = dict(ref)
    return sum(1 for c, _ in got[:k] if scores.get(c, -1.0) >= kth - 1e-9) / min(k, len(ref))


def test_scores_are_exact_and_top5_agrees_with_exact_bm25(store: SQLiteMemory, small_budget):
    texts = chunk_texts(store)
    assert len(texts) > 1500  # a moderate real corpus, not a toy
    kinds: Counter[str] = Counter()
    agree: list[float] = []
    with store._reader() as conn:
        for query in queries(texts):
            terms = query_terms(query)
            kinds[ranking.plan(terms, counter(conn), len(texts)).kind] += 1
            got = [(r.chunk_id, r.score) for r in store.retrieve(query, top_k=5)]
            ref = exact(conn, terms)
            assert len(got) == min(5, len(ref)), query
            scores = dict(ref)
            for chunk_id, score in got:  # every score is the chunk's BM25 for the whole query
                assert score == pytest.approx(scores[chunk_id], rel=1e-9), query
            assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
            if ref:
                agree.append(agreement(got, ref))
    # The bounded paths are what is tested: most queries mix rare and common words.
    assert kinds["split"] >= 80 and kinds["common"] >= 3 and kinds["one"] >= 30, kinds
    assert sum(agree) / len(agree) >= 0.95, (sum(agree) / len(agree), kinds)


def test_a_store_within_the_budget_is_ranked_exactly(store: SQLiteMemory):
    """~2 000 chunks, fewer than RARE_BUDGET: every query is FTS5's exact ranking."""
    texts = chunk_texts(store)
    assert len(texts) <= ranking.RARE_BUDGET
    with store._reader() as conn:
        for query in queries(texts)[:100]:
            got = [(r.chunk_id, r.score) for r in store.retrieve(query, top_k=5)]
            assert got == [(c, pytest.approx(s)) for c, s in exact(conn, query_terms(query))[:5]]


def test_exact_among_chunks_with_a_rare_word(store: SQLiteMemory, small_budget):
    """With rare and common words, the answer is exactly BM25's top k among the chunks that
    hold a rare word (the merge of the two FTS5 rankings loses nothing)."""
    texts = chunk_texts(store)
    checked = 0
    with store._reader() as conn:
        count = counter(conn)
        for query in queries(texts):
            terms = query_terms(query)
            plan = ranking.plan(terms, count, len(texts))
            if plan.kind != "split":
                continue
            holders = {r[0] for r in conn.execute(
                "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?",
                (ranking.any_of(plan.rare),))}
            every = exact(conn, plan.rare + plan.common)
            ref = [(c, s) for c, s in every if c in holders]
            for k in (1, 5, 20):
                got = [(r.chunk_id, r.score) for r in store.retrieve(query, top_k=k)]
                # No chunk with a rare word that beats the last one returned is missing (when
                # fewer than k hold one, chunks of common words only fill up).
                assert len(got) == min(k, len(every))
                last = got[-1][1]
                assert {c for c, s in ref if s > last + 1e-9} <= {c for c, _ in got}, (query, k)
                mine = [s for c, s in got if c in holders]
                assert mine == pytest.approx([s for _, s in ref[:len(mine)]], rel=1e-9)
            checked += 1
    assert checked >= 60


def test_filters_rank_within_the_chosen_source(store: SQLiteMemory, small_budget):
    """With a source filter the same BM25 scores rank only that source's chunks."""
    texts = chunk_texts(store)
    agree: list[float] = []
    with store._reader() as conn:
        for query in queries(texts)[:120]:
            terms = query_terms(query)
            for source in ("argparse.py", "typing.py"):
                got = [(r.chunk_id, r.score) for r in store.retrieve(query, 5, source=source)]
                ids = {r[0] for r in conn.execute(
                    "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.doc_id "
                    "WHERE d.source = ?", (source,))}
                ref = [(c, s) for c, s in exact(conn, terms) if c in ids]
                assert {c for c, _ in got} <= ids
                scores = dict(ref)
                assert all(s == pytest.approx(scores[c], rel=1e-9) for c, s in got)
                if ref:
                    agree.append(agreement(got, ref))
    assert len(agree) >= 100 and sum(agree) / len(agree) >= 0.9


def test_common_words_still_weigh(store: SQLiteMemory, small_budget):
    """Leaving common words out (as the search before did) changes the top 5; here they count."""
    texts = chunk_texts(store)
    changed = 0
    with store._reader() as conn:
        count = counter(conn)
        for query in queries(texts):
            terms = query_terms(query)
            plan = ranking.plan(terms, count, len(texts))
            if plan.kind != "split":
                continue
            rare_only = [c for c, _ in exact(conn, plan.rare)[:5]]
            got = [r.chunk_id for r in store.retrieve(query, top_k=5)]
            changed += set(got) != set(rare_only)
    assert changed >= 20


@pytest.mark.parametrize("which", ["common", "rare"])
def test_work_is_bounded_for_64_words(store: SQLiteMemory, monkeypatch: pytest.MonkeyPatch,
                                      which: str):
    """64 words, the most common or rare ones of the corpus: few statements, at most
    MAX_SCORED_TERMS words in any ranked expression and a capped count for each word."""
    # A budget that 64 rare words (1 chunk each) fit in, for 64 words: 2000 * 8 / 64 = 250.
    monkeypatch.setattr(ranking, "RARE_BUDGET", BUDGET if which == "common" else 2000)
    texts = chunk_texts(store)
    words = Counter(w.lower() for t in texts for w in WORD.findall(t)
                    if len(w) > 2 and w.lower() not in STOPWORDS and not w.isdigit())
    ordered = [w for w, _ in words.most_common()]
    picked = ordered[:64] if which == "common" else ordered[-64:]
    terms = query_terms(" ".join(picked))
    assert len(terms) == 64
    counted: list[int] = []
    ranked: list[str] = []
    with store._reader() as conn:
        count = counter(conn)

        def capped(expression: str, cap: int) -> int:
            counted.append(cap)
            return count(expression, cap)

        def match(expression: str, limit: int):
            ranked.append(expression)
            return store._match(conn, expression, limit, "", [])

        found = ranking.best(terms, 5, capped, match, len(texts))
    assert len(found) == 5
    assert len(counted) <= 64 + ranking.MAX_COMMON_TERMS
    assert all(cap <= len(texts) + 1 for cap in counted)
    assert len(ranked) <= 3
    assert all(e.count('"') // 2 <= ranking.MAX_SCORED_TERMS for e in ranked)
    assert ranking.rare_budget(64) < ranking.RARE_BUDGET


@pytest.mark.parametrize("query", [
    '"machine" NEAR(learning) content:data', "AND OR NOT NEAR", "x" * 64 + " data",
    "*data* ^value (list", "data " * 80, "\x00data\x00 value", "données valeur 数据",
])
def test_hostile_queries_on_the_bounded_paths(store: SQLiteMemory, small_budget, query: str):
    results = store.retrieve(query, top_k=5)
    assert isinstance(results, list)
    with store._reader() as conn:
        ref = exact(conn, query_terms(query))
    if ref:
        assert results and agreement([(r.chunk_id, r.score) for r in results], ref) >= 0.6
