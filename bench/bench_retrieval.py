"""Benchmark: retrieval quality and latency on real text, against exact BM25 and the old search.

    python bench/bench_retrieval.py                       # 100 000 chunks, 400 queries
    python bench/bench_retrieval.py --chunks 10000        # a quick run
    python bench/bench_retrieval.py --db /tmp/r.db        # build once, then reuse the file

The corpus is documentation already on the machine (`realtext.py`): the docstrings of every
Python module of this interpreter (standard library and site-packages), then the .rst/.md/.txt
files of those trees, then /usr/share/doc, until --chunks chunks; each document is chunked and
stored as `jarvis memory index` does.

Queries are drawn from the corpus with the seed, a quarter of each kind: a section heading
(drawn from the distinct headings: Markdown/reST titles and documented names), a sentence of
a random chunk, 2-4 words of a random chunk (keywords; stop words and 1-2 letter words left
out) and one such word. Every query goes through `query_terms` as a search does.

Exact BM25 is FTS5's own ranking of `"w1" OR "w2" OR ...` over all the query's words (same
tokenizer, same stop words, no word dropped): `bm25()` over every matching chunk. Agreement is
the share of the top 5 a method returns that exact BM25 also ranks in its top 5 (a chunk tied
with the 5th counts), averaged over the queries that match anything.

Three methods per query, interleaved so they share the machine's load: exact BM25 (the quality
ceiling), the old search (kept below as it was: chunks with all the rare words first, then
some; words in more than 5% of the chunks dropped) and `SQLiteMemory.retrieve` (the new one).
Wall time and CPU time (the thread's) are both reported: on a quiet machine they are the same,
on a loaded one the CPU time is what the code costs. Targets (issue 28): agreement >= 95%,
p50 <= 10 ms, p99 <= 30 ms.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from realtext import collect, headings, sentences  # noqa: E402

from jarvis.memory.chunking import chunk_text  # noqa: E402
from jarvis.memory.query import STOPWORDS, fts_expression, query_terms  # noqa: E402
from jarvis.memory.sqlite import FileDocument, SQLiteMemory  # noqa: E402

WORD = re.compile(r"[^\W_]+")
KINDS = ("heading", "sentence", "keywords", "one word")
TOP_K = 5


# --- the old search (jarvis/memory/sqlite.py before issue 28), the baseline -------------------
OLD_COMMON_SHARE = 0.05
OLD_COMMON_MIN_DOCS = 2_000
OLD_OR_BUDGET = 4_000


def old_plan(conn: sqlite3.Connection, terms: list[str], total: int
             ) -> tuple[list[str], list[str]]:
    if len(terms) == 1:
        return [], terms
    limit = max(OLD_COMMON_MIN_DOCS, int(total * OLD_COMMON_SHARE))
    counted: list[tuple[str, int]] = []
    for term in terms:
        df = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)",
            (fts_expression([term], "OR"), limit + 1)).fetchone()[0]
        if df:
            counted.append((term, df))
    if not counted:
        return [], []
    rare = [(t, df) for t, df in counted if df <= limit]
    if not rare:
        least = min(counted, key=lambda item: item[1])[0]
        return ([t for t, _ in counted] if len(counted) > 1 else []), [least]
    chosen: list[str] = []
    total_df = 0
    for term, df in sorted(rare, key=lambda item: item[1]):
        if chosen and total_df + df > OLD_OR_BUDGET:
            break
        chosen.append(term)
        total_df += df
    keep = set(chosen)
    return ([t for t, _ in rare] if len(rare) > 1 else [], [t for t, _ in rare if t in keep])


def old_search(memory: SQLiteMemory, conn: sqlite3.Connection, terms: list[str], top_k: int,
               total: int) -> list[int]:
    and_terms, or_terms = old_plan(conn, terms, total)
    results: list[int] = []
    for stage in (fts_expression(and_terms, "AND") if and_terms else None,
                  fts_expression(or_terms, "OR") if or_terms else None):
        if stage is None or len(results) >= top_k:
            continue
        for r in memory._match(conn, stage, top_k, "", []):  # noqa: SLF001 - as it was
            if r.chunk_id not in results and len(results) < top_k:
                results.append(r.chunk_id)
    return results


# --- corpus, queries, exact BM25 ---------------------------------------------------------------
def build(memory: SQLiteMemory, chunks: int, seed: int) -> str:
    t0 = time.perf_counter()
    docs, kinds = collect(chunks, seed)
    collected = time.perf_counter() - t0
    t0 = time.perf_counter()
    batch: list[FileDocument] = []
    for i, doc in enumerate(docs):
        batch.append(FileDocument(doc.source, doc.text, chunk_text(doc.text), f"h{i}"))
        if len(batch) >= 500:
            memory.replace_files(batch)
            batch = []
    memory.replace_files(batch)
    parts = ", ".join(f"{kind} {n} documents {chars / 1e6:.1f} MB"
                      for kind, (n, chars) in kinds.items())
    return (f"corpus: {parts}; read in {collected:.0f} s, indexed in "
            f"{time.perf_counter() - t0:.0f} s")


def make_queries(conn: sqlite3.Connection, count: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    ids = [r[0] for r in conn.execute("SELECT id FROM chunks ORDER BY id")]
    heads: dict[str, str] = {}
    for (text,) in conn.execute("SELECT content FROM chunks"):
        for h in headings(text):
            heads.setdefault(" ".join(WORD.findall(h.lower())), h)
    distinct = sorted(heads.values())

    def text_of(chunk_id: int) -> str:
        return conn.execute("SELECT content FROM chunks WHERE id = ?", (chunk_id,)).fetchone()[0]

    def content_words(text: str) -> list[str]:
        return sorted({w.lower() for w in WORD.findall(text)
                       if len(w) > 2 and not w.isdigit() and w.lower() not in STOPWORDS})

    queries: list[tuple[str, str]] = []
    while len(queries) < count:
        kind = KINDS[len(queries) % len(KINDS)]
        if kind == "heading":
            query = rng.choice(distinct)
        elif kind == "sentence":
            found = sentences(text_of(rng.choice(ids)))
            if not found:
                continue
            query = rng.choice(found)
        else:
            words = content_words(text_of(rng.choice(ids)))
            n = 1 if kind == "one word" else rng.randint(2, 4)
            if len(words) < n:
                continue
            query = " ".join(rng.sample(words, n))
        try:
            if not query_terms(query):
                continue
        except Exception:  # noqa: BLE001 - over the word limit: not a query a search takes
            continue
        queries.append((kind, query))
    return queries


def exact(conn: sqlite3.Connection, terms: list[str]) -> list[tuple[int, float]]:
    """FTS5's BM25 over every matching chunk, all words: the top 50 with their scores."""
    return conn.execute("SELECT rowid, -rank FROM chunks_fts WHERE chunks_fts MATCH ? "
                        "ORDER BY rank LIMIT 50", (fts_expression(terms, "OR"),)).fetchall()


def agreement(got: list[int], ref: list[tuple[int, float]]) -> float:
    top = ref[:TOP_K]
    kth = top[-1][1]
    scores = dict(ref)
    same = sum(1 for c in got[:TOP_K] if c in dict(top) or scores.get(c, -1e300) >= kth - 1e-9)
    return same / len(top)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(fn):  # (result, wall ms, cpu ms)
    w, c = time.perf_counter(), time.thread_time()
    out = fn()
    return out, (time.perf_counter() - w) * 1000, (time.thread_time() - c) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks of real text")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--db", type=Path, default=None,
                        help="keep the database here and reuse it when it exists")
    parser.add_argument("--workdir", type=Path, default=None, help="temp dir parent")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jarvis-bench-retrieval-", dir=args.workdir))
    db = args.db or work / "memory.db"
    try:
        fresh = not db.exists()
        memory = SQLiteMemory(db)
        note = build(memory, args.chunks, args.seed) if fresh else f"corpus: reused {db}"
        stats = memory.stats()
        with memory._reader() as conn:  # noqa: SLF001 - the bench reads the store as-is
            total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            queries = make_queries(conn, args.queries, args.seed)
            for _, q in queries[:20]:  # warm the page cache and the statement cache
                terms = query_terms(q)
                exact(conn, terms)
                old_search(memory, conn, terms, TOP_K, total)
                memory.retrieve(q, top_k=TOP_K)
            load_before = os.getloadavg()
            rows: list[tuple[str, float, float, float, float, float, float, float, float]] = []
            gc.collect()
            gc.disable()
            for kind, q in queries:
                terms = query_terms(q)
                ref, ew, ec = timed(lambda: exact(conn, terms))  # noqa: B023
                old, ow, oc = timed(lambda: old_search(memory, conn, terms, TOP_K, total))  # noqa: B023
                new, nw, nc = timed(lambda: [r.chunk_id for r in memory.retrieve(q, top_k=TOP_K)])  # noqa: B023
                if ref:
                    rows.append((kind, agreement(old, ref), agreement(new, ref),
                                 ew, ow, nw, ec, oc, nc))
            gc.enable()
            load_after = os.getloadavg()
        memory.close()

        print(f"retrieval bench: {stats['chunks']} chunks ({stats['chars'] / 1e6:.0f} MB of real "
              f"text), {len(rows)} of {len(queries)} queries match, seed {args.seed}")
        print(note)
        print(f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after "
              f"({os.cpu_count()} CPUs)")
        print(f"{'':22}{'agreement':>20}{'wall p50 / p99 ms':>32}{'CPU p50 / p99 ms':>32}")
        print(f"{'':22}{'old':>8}{'new':>8}{'exact':>12}{'old':>10}{'new':>10}"
              f"{'exact':>12}{'old':>10}{'new':>10}")
        groups = [(kind, [r for r in rows if r[0] == kind]) for kind in KINDS] + [("all", rows)]

        def pair(values: list[float]) -> str:
            return f"{statistics.median(values):.1f}/{percentile(values, 0.99):.1f}"

        for label, group in groups:
            if not group:
                continue
            cols = list(zip(*group, strict=True))
            print(f"{label + f' ({len(group)})':22}{statistics.mean(cols[1]):8.1%}"
                  f"{statistics.mean(cols[2]):8.1%}{pair(cols[3]):>12}{pair(cols[4]):>10}"
                  f"{pair(cols[5]):>10}{pair(cols[6]):>12}{pair(cols[7]):>10}{pair(cols[8]):>10}")
        cols = list(zip(*rows, strict=True))
        new_agree = statistics.mean(cols[2])
        med, p99 = statistics.median, (lambda v: percentile(v, 0.99))
        ratios = (f"new / old: agreement {new_agree / statistics.mean(cols[1]):.2f}x; time p50 "
                  f"{med(cols[5]) / med(cols[4]):.1f}x wall, {med(cols[8]) / med(cols[7]):.1f}x "
                  f"CPU; p99 {p99(cols[5]) / p99(cols[4]):.1f}x wall, "
                  f"{p99(cols[8]) / p99(cols[7]):.1f}x CPU\n"
                  f"new / exact: time p50 {med(cols[5]) / med(cols[3]):.2f}x wall, "
                  f"{med(cols[8]) / med(cols[6]):.2f}x CPU; p99 {p99(cols[5]) / p99(cols[3]):.2f}x "
                  f"wall, {p99(cols[8]) / p99(cols[6]):.2f}x CPU")
        print(ratios)
        print(f"new, max: wall {max(cols[5]):.1f} ms, CPU {max(cols[8]):.1f} ms; "
              f"identical top 5 (as sets): {sum(r[2] == 1 for r in rows) / len(rows):.1%}")
        checks = [("agreement >= 95%", new_agree >= 0.95)]
        for label, p50, p99 in (("wall", cols[5], cols[5]), ("CPU", cols[8], cols[8])):
            checks.append((f"{label} p50 <= 10 ms", statistics.median(p50) <= 10))
            checks.append((f"{label} p99 <= 30 ms", percentile(p99, 0.99) <= 30))
        print("targets: " + "; ".join(f"{n}: {'PASS' if ok else 'FAIL'}" for n, ok in checks))
        return 0 if all(ok for _, ok in checks) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
