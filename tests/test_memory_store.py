"""SQLiteMemory: storing, chunking, BM25 retrieval, filters, events, hostile queries, WAL."""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest

from jarvis.core.events import EventBus, EventType
from jarvis.errors import UserError
from jarvis.memory.chunking import chunk_text
from jarvis.memory.query import MAX_QUERY_CHARS, query_terms
from jarvis.memory.sqlite import SQLiteMemory
from jarvis.memory.types import MemoryBackend, RetrievalResult


@pytest.fixture
def mem(tmp_path: Path):
    store = SQLiteMemory(tmp_path / "memory.db")
    yield store
    store.close()


def fill(store: SQLiteMemory) -> None:
    store.store("Machine learning models improve through experience and data.", source="ml.md",
                metadata={"topic": "ai", "year": 2024, "draft": False})
    store.store("The garden needs watering every morning in summer.", source="garden.md",
                metadata={"topic": "home"})
    store.store("Crème brûlée is a French dessert with caramelised sugar.", source="food.md")
    store.store("Running a marathon takes months of training.", source="sport.md")


def test_reference_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    from jarvis.tools.retrieval import RetrievalTool

    backend = SQLiteMemory(db_path="./memory.db")
    backend.store("Machine learning is a field of artificial intelligence.", source="notes.md")
    retrieval = RetrievalTool(backend=backend)
    result = retrieval.execute(query="machine learning")
    assert result.success
    assert "notes.md" in result.content and "chunk 1" in result.content
    assert (tmp_path / "memory.db").exists()
    backend.close()


def test_store_and_retrieve_ranks_with_bm25(mem: SQLiteMemory):
    fill(mem)
    results = mem.retrieve("machine learning data", top_k=3)
    assert results[0].source == "ml.md"
    assert isinstance(results[0], RetrievalResult)
    assert results[0].score > 0
    assert results[0].metadata == {"topic": "ai", "year": 2024, "draft": False}
    assert results[0].chunk_index == 0 and results[0].line_start == 1
    assert isinstance(mem, MemoryBackend)


def test_more_matching_words_rank_higher(mem: SQLiteMemory):
    mem.store("apples and pears", source="a")
    mem.store("apples, pears and plums", source="b")
    mem.store("plums only", source="c")
    assert mem.retrieve("apples pears plums")[0].source == "b"


def test_stemming_and_diacritics(mem: SQLiteMemory):
    fill(mem)
    assert mem.retrieve("run")[0].source == "sport.md"           # running -> run
    assert mem.retrieve("trained")[0].source == "sport.md"       # training / trained -> train
    assert mem.retrieve("creme brulee")[0].source == "food.md"   # accents ignored
    assert mem.retrieve("CRÈME")[0].source == "food.md"


def test_filters_by_source_and_metadata(mem: SQLiteMemory):
    fill(mem)
    mem.store("Machine shop notes.", source="/home/u/notes/shop.md")
    assert {r.source for r in mem.retrieve("machine", source="ml.md")} == {"ml.md"}
    assert {r.source for r in mem.retrieve("machine", source="/home/u/notes")} == {
        "/home/u/notes/shop.md"}
    mem.store("Machine notes next door.", source="/home/u/notes0/other.md")
    assert {r.source for r in mem.retrieve("machine", source="/home/u/notes/")} == {
        "/home/u/notes/shop.md"}
    assert [r.source for r in mem.retrieve("machine", metadata={"topic": "ai"})] == ["ml.md"]
    assert [r.source for r in mem.retrieve("machine", metadata={"year": 2024})] == ["ml.md"]
    assert [r.source for r in mem.retrieve("machine", metadata={"draft": False})] == ["ml.md"]
    assert mem.retrieve("machine", metadata={"topic": "home"}) == []
    assert mem.retrieve("machine", metadata={'we"ird\\key': 1}) == []
    with pytest.raises(UserError):
        mem.retrieve("machine", metadata={"topic": ["a"]})


def test_delete_clear_count(mem: SQLiteMemory):
    doc = mem.store("alpha beta gamma", source="x")
    mem.store("alpha delta", source="y")
    assert mem.count() == 2
    assert mem.delete(doc) is True
    assert mem.delete(doc) is False
    assert [r.source for r in mem.retrieve("alpha")] == ["y"]
    assert mem.delete_source("y") == 1
    assert mem.count() == 0 and mem.is_empty()
    mem.store("alpha", source="z")
    mem.clear()
    assert mem.count() == 0 and mem.retrieve("alpha") == []
    mem.store("alpha again", source="w")
    mem.delete_source("w")  # the delete trigger is back after clear()
    mem.store("alpha once more", source="v")
    assert [r.source for r in mem.retrieve("alpha")] == ["v"]
    with mem._write() as conn:  # FTS5 raises if the index and the chunks disagree
        conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('integrity-check', 1)")


def test_long_text_is_chunked_with_positions(mem: SQLiteMemory):
    paragraphs = [f"Paragraph {i} talks about topic{i} in some detail. " * 4 for i in range(40)]
    text = "\n\n".join(paragraphs)
    mem.store(text, source="long.md")
    stats = mem.stats()
    assert stats["documents"] == 1 and stats["chunks"] > 5
    hit = mem.retrieve("topic33")[0]
    assert hit.chunk_index > 0
    assert text[hit.start:hit.end] == hit.content
    assert hit.line_start == text.count("\n", 0, hit.start) + 1
    assert "topic33" in hit.content
    assert hit.position.startswith(f"chunk {hit.chunk_index + 1}, line")


def test_chunking_overlaps_and_covers_everything():
    text = " ".join(f"w{i}" for i in range(3000))
    chunks = chunk_text(text, size=200, overlap=40)
    assert all(len(c.text) <= 200 for c in chunks)
    words = {w for c in chunks for w in c.text.split()}
    assert words == set(text.split())  # nothing lost, no word cut in half
    for a, b in zip(chunks, chunks[1:], strict=False):
        assert b.start < a.end  # consecutive chunks share text
    assert chunk_text("   \n  ") == []
    with pytest.raises(UserError):
        chunk_text("x", size=100, overlap=80)


def test_events_are_published(tmp_path: Path):
    bus = EventBus()
    seen = []
    bus.subscribe(None, lambda e: seen.append((e.type, e.data)))
    store = SQLiteMemory(tmp_path / "m.db", bus=bus)
    doc = store.store("hello world", source="s")
    store.retrieve("hello")
    store.close()
    assert seen[0][0] is EventType.MEMORY_STORE and seen[0][1]["doc_id"] == doc
    assert seen[1][0] is EventType.MEMORY_RETRIEVE
    assert seen[1][1]["results"] == 1 and seen[1][1]["sources"] == ["s"]


def test_wal_mode_and_schema(mem: SQLiteMemory, tmp_path: Path):
    conn = sqlite3.connect(tmp_path / "memory.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    schema = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'chunks_fts'").fetchone()[0]
    assert "porter unicode61 remove_diacritics 2" in schema
    conn.close()


def test_reopen_keeps_data(tmp_path: Path):
    store = SQLiteMemory(tmp_path / "m.db")
    store.store("persistent fact about otters", source="s")
    store.close()
    again = SQLiteMemory(tmp_path / "m.db")
    assert again.retrieve("otters")[0].source == "s"
    again.close()
    with pytest.raises(UserError, match="closed"):
        again.retrieve("otters")


def test_bad_arguments_are_clear_errors(mem: SQLiteMemory):
    with pytest.raises(UserError, match="top_k"):
        mem.retrieve("x", top_k=0)
    with pytest.raises(UserError, match="top_k"):
        mem.retrieve("x", top_k=10_000)
    with pytest.raises(UserError, match="limit"):
        mem.retrieve("x" * (MAX_QUERY_CHARS + 1))
    with pytest.raises(UserError, match="string"):
        mem.retrieve(None)  # type: ignore[arg-type]
    with pytest.raises(UserError, match="metadata"):
        mem.store("x", metadata=["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(UserError, match="distinct words"):
        mem.retrieve(" ".join(f"word{i}" for i in range(100)))


def test_not_a_database_is_a_clear_error(tmp_path: Path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UserError, match="cannot open memory database"):
        SQLiteMemory(bad)


HOSTILE_QUERIES = [
    "", " ", "\x00", "a\x00b machine", '"', '""', '"machine', 'machine"', "'", "''",
    "machine AND", "AND", "OR", "NOT", "AND OR NOT", "machine OR", "NOT machine", "- machine",
    "NEAR(machine learning)", "NEAR(machine learning, 2)", "NEAR(", "NEAR)", "near machine",
    "machine*", "*", "**", "*machine", "mach* lear*", "^machine", "+machine", "machine +",
    "content:machine", "content : machine", "source:ml.md", "{content}: machine",
    "-content:machine", "chunks_fts:machine", "rank:1", "rowid:1",
    "(", ")", "((machine", "machine))", "(((((((((((((((((((((((((((((", ")(",
    "machine (learning", '"machine learning"', '"machine" "learning"', "'machine learning'",
    "machine; DROP TABLE chunks; --", "'; DELETE FROM documents; --", "\\", "\\\\machine",
    "%", "_", "machine%", "%machine%", "[machine]", "{machine}", "<machine>", "machine:",
    ":", ":::", "@@@", "###", "$$$", "\n\n\t", "\r\n machine \r\n", "\u200b", "\ufeffmachine",
    "😀", "machine 😀 learning", "机器学习", "Maschinelles Lernen", "μηχανική", "ملاحظات",
    "e\u0301", "ＭＡＣＨＩＮＥ", "x" * 64, "x" * 500, "machine " * 60, "\ud800",
    "Machine Learning?!", "what is machine learning?", "1e10", "0", "-1", "NULL", "null",
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_hostile_queries_never_break_the_store(mem: SQLiteMemory, query: str):
    fill(mem)
    results = mem.retrieve(query, top_k=5)
    assert isinstance(results, list)
    if "machine" in query.lower() and "\u200b" not in query:
        assert results and results[0].source == "ml.md"


def test_operator_words_are_searched_as_words(mem: SQLiteMemory):
    mem.store("Keep the NEAR field and the OR gate apart.", source="words")
    mem.store("Nothing special here at all.", source="other")
    assert [r.source for r in mem.retrieve("NEAR")] == ["words"]
    assert [r.source for r in mem.retrieve("near OR gate")] == ["words"]


def test_query_terms_are_plain_words():
    assert query_terms('content:"machine" NEAR(x*)') == ["content", "machine", "near", "x"]
    assert query_terms("what is the answer") == ["answer"]
    assert query_terms("the of") == ["the", "of"]  # only stop words: keep them
    assert query_terms("") == []


def test_fuzzed_queries_never_raise_sql_errors(mem: SQLiteMemory):
    fill(mem)
    rng = random.Random(1234)
    alphabet = list('"\'()*:^+-{}[]<>NEARORANDNOT \x00\\;,.%_\n\t') + ["machine", "é", "😀",
                                                                    "content", "NEAR(", "AND"]
    for _ in range(400):
        query = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        try:
            mem.retrieve(query, top_k=rng.randint(1, 10))
        except UserError as exc:  # only the documented limit may refuse a query
            assert "distinct words" in str(exc) or "limit" in str(exc)


def test_common_words_do_not_drown_rare_ones(mem: SQLiteMemory, monkeypatch: pytest.MonkeyPatch):
    from jarvis.memory import ranking

    monkeypatch.setattr(ranking, "RARE_BUDGET", 5)  # "common" is in 41 chunks: a common word
    mem.store_many([(f"common filler text number {i}", f"f{i}", None) for i in range(40)])
    mem.store("common zebra sighting", source="zebra")
    assert mem.retrieve("common zebra", top_k=1)[0].source == "zebra"
    # A query of only common words still answers.
    assert len(mem.retrieve("common filler", top_k=3)) == 3


def test_search_is_not_blocked_by_an_open_write_transaction(tmp_path: Path):
    """A real concurrent writer (another connection, another thread) holds a write
    transaction open; searches keep answering from the last committed state."""
    path = tmp_path / "m.db"
    reader_store = SQLiteMemory(path)
    reader_store.store("committed fact about a walrus", source="old")
    writer_store = SQLiteMemory(path)
    in_transaction = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            from jarvis.memory.chunking import chunk_text as chunks
            from jarvis.memory.sqlite import FileDocument

            docs = [FileDocument(f"/tmp/new{i}.md", f"pending walrus {i}",
                                 chunks(f"pending walrus {i}"), f"h{i}") for i in range(50)]
            with writer_store._write() as conn:
                for doc in docs:
                    writer_store._insert(conn, doc.content, doc.chunks, doc.source, None,
                                         "file", doc.content_hash)
                in_transaction.set()
                assert release.wait(10)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)
            in_transaction.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert in_transaction.wait(10)
    for _ in range(20):
        results = reader_store.retrieve("walrus", top_k=10)
        assert [r.source for r in results] == ["old"]  # uncommitted rows are invisible
    release.set()
    thread.join(10)
    assert not errors
    assert len(reader_store.retrieve("walrus", top_k=100)) == 51
    reader_store.close()
    writer_store.close()


def test_store_is_usable_from_many_threads(mem: SQLiteMemory):
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(10):
                mem.store(f"thread {n} note {i} about lemurs", source=f"t{n}")
                mem.retrieve("lemurs", top_k=3)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert mem.count() == 60


def test_invalid_unicode_content_is_a_clear_error(mem: SQLiteMemory):
    with pytest.raises(UserError, match="surrogate"):
        mem.store("bad \ud800 text")
    with pytest.raises(UserError, match="surrogate"):
        mem.store("fine", source="\udfff")
    assert mem.count() == 0


def test_many_processes_opening_a_new_file_at_once(tmp_path: Path):
    """First opens race to create the schema; BEGIN IMMEDIATE makes them take turns."""
    import subprocess
    import sys

    path = tmp_path / "fresh.db"
    code = ("import sys; from jarvis.memory.sqlite import SQLiteMemory; "
            "m = SQLiteMemory(sys.argv[1]); m.store('hello from ' + sys.argv[2], source=sys.argv[2]); "
            "m.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"p{i}"],
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    store = SQLiteMemory(path)
    assert sorted(r.source for r in store.retrieve("hello", top_k=10)) == ["p0", "p1", "p2", "p3"]
    store.close()


def test_a_long_held_write_lock_is_a_clear_error(tmp_path: Path):
    from jarvis.core.types import ErrorType
    from jarvis.memory.types import MemoryStoreError
    from jarvis.tools.memory_tools import MemoryStoreTool

    path = tmp_path / "m.db"
    store = SQLiteMemory(path, busy_timeout=0.2)
    store.store("before the lock", source="s")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's long write transaction
    try:
        with pytest.raises(MemoryStoreError, match="stayed locked"):
            store.store("during the lock", source="s")
        failed = MemoryStoreTool(backend=store).execute(content="during the lock")
        assert not failed.success and failed.error_type is ErrorType.EXECUTION
        assert [r.content for r in store.retrieve("lock")] == ["before the lock"]  # reads work
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.store("after the lock", source="s")
    assert store.count() == 2
    store.close()


def test_delete_source_takes_a_folder_of_files_but_not_its_neighbours(mem: SQLiteMemory):
    from jarvis.memory.chunking import chunk_text as chunks
    from jarvis.memory.sqlite import FileDocument

    files = ["/n/a.md", "/n/sub/b.md", "/n0/c.md", "/n-x/d.md", "/n"]
    mem.replace_files([FileDocument(f, f"text {f}", chunks(f"text {f}"), "h") for f in files])
    assert mem.delete_source("/n") == 3  # /n itself, /n/a.md, /n/sub/b.md
    assert sorted(s["source"] for s in mem.sources()) == ["/n-x/d.md", "/n0/c.md"]
