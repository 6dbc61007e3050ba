"""Benchmark: indexing and query latency of SQLiteMemory, against a plain in-Python BM25.

    python bench/bench_memory.py                 # 100 000 chunks (the target size)
    python bench/bench_memory.py --chunks 5000   # a quick run

The corpus is generated English-like text: one Zipf distribution over a vocabulary whose most
frequent words are English function words (as in real text) followed by made-up content words.
It is written as files of ~100 chunks each and indexed with `jarvis.memory.indexer`
(read, hash, chunk, insert, FTS5), exactly as `jarvis memory index` does.

Queries are a mix of one-word and five-word queries: one content word drawn by corpus
frequency; five consecutive words from a random chunk (a remembered phrase, stop words
included); five content words drawn by corpus frequency (keywords). Latency is measured per
`retrieve(query, top_k=5)` call, after a short warm-up, in the same process and run as the
baseline: a straightforward BM25 (k1=1.2, b=0.75) over an in-memory inverted index of the same
chunks, same stop-word handling, no stemming. Overlap@5 says how often both agree.

Targets (issue 4): index 100 000 chunks < 60 s; median < 10 ms and p99 < 50 ms (wall time).
Retrieval quality on real text is measured by bench_retrieval.py.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import itertools
import math
import os
import random
import re
import shutil
import statistics
import sys
import tempfile
import time
from array import array
from collections import Counter
from pathlib import Path

from jarvis.memory.indexer import index_paths
from jarvis.memory.query import STOPWORDS, query_terms
from jarvis.memory.sqlite import SQLiteMemory

WORD = re.compile(r"[^\W_]+")
SYLLABLES = ["ka", "lo", "mi", "ne", "ra", "to", "su", "pe", "di", "an", "or", "el", "ur", "is",
             "ob", "ex", "ve", "ti", "qua", "ber", "mon", "gal", "sen", "tor", "wy", "zu", "fle",
             "gri", "pha", "cho"]
CHUNKS_PER_FILE = 100


class Corpus:
    """Zipf-distributed English-like words: stop words first, then made-up content words."""

    def __init__(self, seed: int, content_words: int = 40_000) -> None:
        self.rng = random.Random(seed)
        stop = sorted(STOPWORDS)
        self.rng.shuffle(stop)
        made: set[str] = set()
        while len(made) < content_words:
            word = "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 4)))
            if word not in STOPWORDS:
                made.add(word)
        self.content = sorted(made)
        self.rng.shuffle(self.content)
        self.vocab = stop + self.content
        self.cum = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(self.vocab))))
        first = len(stop)
        self.content_cum = [c - self.cum[first - 1] for c in self.cum[first:]]

    def text(self, chars: int) -> str:
        words = self.rng.choices(self.vocab, cum_weights=self.cum, k=chars // 6 + 50)
        out: list[str] = []
        i = length = 0
        while length < chars:
            n = self.rng.randint(8, 20)
            sentence = " ".join(words[i:i + n])
            i += n
            if i >= len(words):
                words += self.rng.choices(self.vocab, cum_weights=self.cum, k=1000)
            out.append(sentence.capitalize() + ".")
            out.append("\n\n" if self.rng.random() < 0.2 else " ")
            length += len(sentence) + 2
        return "".join(out)

    def content_words(self, k: int) -> list[str]:
        return self.rng.choices(self.content, cum_weights=self.content_cum, k=k)


def make_files(corpus: Corpus, folder: Path, chunks: int) -> int:
    files = max(1, round(chunks / CHUNKS_PER_FILE))
    per_file = chunks / files
    written = 0
    for i in range(files):
        # ~750 new characters per chunk: chunks end at sentence breaks, then overlap by 100.
        text = corpus.text(int(per_file * 750))
        (folder / f"doc{i:05d}.md").write_text(text, encoding="utf-8")
        written += len(text)
    return written


class PlainBM25:
    """The baseline: BM25 over a Python inverted index (arrays of doc ids and term counts)."""

    def __init__(self, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.doc_ids: dict[str, array] = {}
        self.tfs: dict[str, array] = {}
        self.lengths = array("i")
        for doc, text in enumerate(docs):
            counts = Counter(WORD.findall(text.lower()))
            self.lengths.append(sum(counts.values()))
            for term, tf in counts.items():
                ids = self.doc_ids.get(term)
                if ids is None:
                    ids = self.doc_ids[term] = array("i")
                    self.tfs[term] = array("i")
                ids.append(doc)
                self.tfs[term].append(tf)
        self.n = len(docs)
        self.avgdl = sum(self.lengths) / max(1, self.n)

    def search(self, query: str, top_k: int = 5) -> list[int]:
        scores: dict[int, float] = {}
        k1, b, avgdl, lengths = self.k1, self.b, self.avgdl, self.lengths
        for term in query_terms(query):
            ids = self.doc_ids.get(term)
            if ids is None:
                continue
            df = len(ids)
            idf = math.log(1 + (self.n - df + 0.5) / (df + 0.5))
            for doc, tf in zip(ids, self.tfs[term], strict=True):
                norm = k1 * (1 - b + b * lengths[doc] / avgdl)
                scores[doc] = scores.get(doc, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
        return [d for d, _ in heapq.nlargest(top_k, scores.items(), key=lambda kv: kv[1])]


def make_queries(corpus: Corpus, chunk_texts: list[str], count: int) -> list[tuple[str, str]]:
    rng = random.Random(corpus.rng.random())
    queries: list[tuple[str, str]] = []
    for i in range(count):
        kind = ("one-word", "five-word phrase", "one-word", "five keywords")[i % 4]
        if kind == "one-word":
            queries.append((kind, corpus.content_words(1)[0]))
        elif kind == "five keywords":
            queries.append((kind, " ".join(corpus.content_words(5))))
        else:
            words = WORD.findall(rng.choice(chunk_texts))
            start = rng.randrange(max(1, len(words) - 5))
            queries.append((kind, " ".join(words[start:start + 5])))
    return queries


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def timed(fn, queries: list[tuple[str, str]]) -> tuple[dict[str, list[float]], list, list[float]]:
    """Wall time per kind, the answers, and the CPU time (this thread's) of each query."""
    by_kind: dict[str, list[float]] = {}
    answers = []
    cpu: list[float] = []
    for kind, q in queries:
        t0, c0 = time.perf_counter(), time.thread_time()
        answers.append(fn(q))
        by_kind.setdefault(kind, []).append((time.perf_counter() - t0) * 1000)
        cpu.append((time.thread_time() - c0) * 1000)
    return by_kind, answers, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks to index")
    parser.add_argument("--queries", type=int, default=400, help="timed queries")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where to write the corpus and database (default: a temp dir)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jarvis-bench-memory-", dir=args.workdir))
    try:
        corpus = Corpus(args.seed)
        docs_dir = work / "docs"
        docs_dir.mkdir()
        t0 = time.perf_counter()
        written = make_files(corpus, docs_dir, args.chunks)
        gen_s = time.perf_counter() - t0

        memory = SQLiteMemory(work / "memory.db")
        summary = index_paths(memory, [docs_dir])
        index_s = summary.seconds
        again = index_paths(memory, [docs_dir])
        stats = memory.stats()
        with memory._reader() as conn:  # noqa: SLF001 - the bench reads the chunks back as-is
            rows = conn.execute("SELECT id, content FROM chunks ORDER BY id").fetchall()
        chunk_ids = [r[0] for r in rows]
        texts = [r[1] for r in rows]

        t0 = time.perf_counter()
        baseline = PlainBM25(texts)
        baseline_build_s = time.perf_counter() - t0

        queries = make_queries(corpus, texts, args.queries)
        warm = make_queries(corpus, texts, 20)
        for _, q in warm:
            memory.retrieve(q, top_k=5)
            baseline.search(q)
        gc.collect()
        gc.disable()  # the same for both sides: no collector pauses inside timings
        load = os.getloadavg()[0]
        fts_times, fts_answers, fts_cpu = timed(
            lambda q: [r.chunk_id for r in memory.retrieve(q, top_k=5)], queries)
        base_times, base_answers, base_cpu = timed(
            lambda q: [chunk_ids[d] for d in baseline.search(q)], queries)
        gc.enable()
        overlap = statistics.mean(
            len(set(a) & set(b)) / max(1, min(5, len(b)))
            for a, b in zip(fts_answers, base_answers, strict=True) if b)

        all_fts = [t for ts in fts_times.values() for t in ts]
        all_base = [t for ts in base_times.values() for t in ts]
        print(f"memory bench: {stats['chunks']} chunks in {summary.indexed} files "
              f"({written / 1e6:.0f} MB of text, generated in {gen_s:.1f} s), "
              f"{len(queries)} queries, seed {args.seed}")
        print(f"{'':34}{'jarvis (FTS5)':>15}{'plain BM25':>14}{'ratio':>9}")

        def row(label: str, ours: float, theirs: float | None, unit: str) -> None:
            ratio = f"{theirs / ours:8.1f}x" if theirs is not None and ours > 0 else ""
            other = f"{theirs:13.2f}{unit}" if theirs is not None else f"{'-':>14}"
            print(f"{label:34}{ours:14.2f}{unit}{other}{ratio}")

        row("index build (s)", index_s, baseline_build_s, "")
        row("re-index, nothing changed (s)", again.seconds, None, "")
        for kind in fts_times:
            row(f"{kind} median (ms)", statistics.median(fts_times[kind]),
                statistics.median(base_times[kind]), "")
            row(f"{kind} p99 (ms)", percentile(fts_times[kind], 0.99),
                percentile(base_times[kind], 0.99), "")
        row("all queries median (ms)", statistics.median(all_fts), statistics.median(all_base), "")
        row("all queries p99 (ms)", percentile(all_fts, 0.99), percentile(all_base, 0.99), "")
        row("all queries max (ms)", max(all_fts), max(all_base), "")
        row("all queries CPU median (ms)", statistics.median(fts_cpu),
            statistics.median(base_cpu), "")
        row("all queries CPU p99 (ms)", percentile(fts_cpu, 0.99), percentile(base_cpu, 0.99), "")
        print(f"load average {load:.1f} ({os.cpu_count()} CPUs); CPU = the thread's time, "
              f"what a query costs whatever the load")
        print(f"ratio = plain BM25 time / jarvis time (above 1: jarvis is faster). "
              f"top-5 overlap with plain BM25: {overlap:.0%}. "
              f"database: {stats['db_bytes'] / 1e6:.0f} MB")
        checks = [("index < 60 s", index_s < 60 * args.chunks / 100_000),
                  ("median < 10 ms", statistics.median(all_fts) < 10),
                  ("p99 < 50 ms", percentile(all_fts, 0.99) < 50)]
        scale = "" if args.chunks == 100_000 else " (index target scaled to --chunks)"
        print("targets" + scale + ": " + "; ".join(
            f"{name}: {'PASS' if ok else 'FAIL'}" for name, ok in checks))
        memory.close()
        return 0 if all(ok for _, ok in checks) else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
