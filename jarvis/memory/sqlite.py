"""SQLiteMemory: the default memory store, on sqlite-utils and SQLite FTS5.

Documents are split into overlapping chunks (`jarvis.memory.chunking`); each chunk row keeps
its document, position and line numbers, and an external-content FTS5 index over the chunk
text ranks matches with BM25. The tokenizer is `porter unicode61 remove_diacritics 2`:
English stemming ("running" finds "run"), Unicode word splitting, accents ignored.

Concurrency: WAL mode, a busy timeout, and `BEGIN IMMEDIATE` for every write. Writes go
through one connection under a lock; searches use a small pool of read connections, so a
search never waits for an index job that is writing, in this process or another.

Every document records who wrote it (`written_by`: person, indexed, model; `provenance`: the
run and what it had read, for a model's entry), so a run that reads it back knows what it
read (docs/trust.md). Schema 2 added these columns; older entries are "indexed" (files) or
"unknown" (text), which counts as untrusted.

Queries are plain text, never FTS5 syntax (see `jarvis.memory.query`). They are ranked by
FTS5's BM25 over all their words, without scoring every chunk that holds a common word (see
`jarvis.memory.ranking`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvis.core.events import EventBus, EventType
from jarvis.core.sqlite_wal import enter_wal
from jarvis.errors import UserError
from jarvis.memory import ranking
from jarvis.memory.chunking import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, Chunk, chunk_text
from jarvis.memory.query import check_query, query_terms
from jarvis.memory.types import MemoryStoreError, RetrievalResult

SCHEMA_VERSION = 2
WRITERS = ("person", "indexed", "model", "unknown")
TOKENIZER = "porter unicode61 remove_diacritics 2"
MAX_TOP_K = 100
MAX_CONTENT_CHARS = 50_000_000
MAX_METADATA_CHARS = 100_000
READ_POOL_SIZE = 4


@dataclass(slots=True)
class FileDocument:
    """A file ready to store: its text, chunks and content hash (see `replace_files`)."""

    source: str
    content: str
    chunks: list[Chunk]
    content_hash: str
    metadata: dict[str, Any] = field(default_factory=dict)
    doc_id: str = ""


class SQLiteMemory:
    """A full-text memory store in one SQLite file.

    Args:
        db_path: the database file (created with its folder if missing).
        bus: an EventBus for MEMORY_STORE and MEMORY_RETRIEVE events.
        chunk_size: maximum characters per chunk for `store`.
        chunk_overlap: characters shared by consecutive chunks.
        busy_timeout: seconds a write waits for another writer before failing.
    """

    def __init__(self, db_path: str | os.PathLike[str] = "memory.db", bus: EventBus | None = None,
                 *, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 chunk_overlap: int = DEFAULT_CHUNK_OVERLAP, busy_timeout: float = 30.0) -> None:
        from jarvis.memory.chunking import check_chunking

        check_chunking(chunk_size, chunk_overlap)
        self.db_path = Path(db_path).expanduser()
        self.bus = bus
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.busy_timeout = busy_timeout
        self._write_lock = threading.RLock()
        self._pool_lock = threading.Lock()
        self._readers: list[sqlite3.Connection] = []
        self._all_readers: list[sqlite3.Connection] = []
        self._totals: dict[int, tuple[int, int]] = {}  # id(reader) -> (data_version, chunks)
        self._closed = False
        try:
            from jarvis.core.paths import private_database

            private_database(self.db_path)  # 0600 (and so its -wal and -shm), whatever the umask
        except OSError as exc:
            what = "" if self.db_path.parent.is_dir() else "the folder for "
            raise UserError(f"cannot create {what}memory database {self.db_path}: "
                            f"{exc.strerror or exc}. Point memory.db_path (or "
                            f"JARVIS_MEMORY_DB) at a writable folder") from None
        self._writer = self._connect()
        self._db = self._database(self._writer)
        self._migrate()

    # --- connections -------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.db_path, timeout=self.busy_timeout,
                                   check_same_thread=False)
            enter_wal(conn, self.busy_timeout)
        except (sqlite3.DatabaseError, OSError) as exc:
            raise UserError(f"cannot open memory database {self.db_path}: {exc}. Point "
                            f"memory.db_path at a writable SQLite file") from None
        # NORMAL is durable across application crashes in WAL mode and much faster than FULL.
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    @staticmethod
    def _database(conn: sqlite3.Connection) -> Any:
        import sqlite_utils  # lazy: keeps `import jarvis.tools` cheap

        return sqlite_utils.Database(conn, execute_plugins=False)

    @contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        self._check_open()
        with self._pool_lock:
            conn = self._readers.pop() if self._readers else None
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=ON")
            with self._pool_lock:
                self._all_readers.append(conn)
        try:
            yield conn
        except sqlite3.DatabaseError as exc:
            raise MemoryStoreError(f"reading memory database {self.db_path} failed: {exc}") from None
        finally:
            with self._pool_lock:
                if not self._closed and len(self._readers) < READ_POOL_SIZE:
                    self._readers.append(conn)
                    conn = None  # type: ignore[assignment]
            if conn is not None:
                self._forget_reader(conn)

    def _forget_reader(self, conn: sqlite3.Connection) -> None:
        with self._pool_lock:
            if conn in self._all_readers:
                self._all_readers.remove(conn)
        self._totals.pop(id(conn), None)
        conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: BEGIN IMMEDIATE takes the write lock up front, so a
        read-then-write (hash check, then replace) cannot interleave with another writer."""
        self._check_open()
        with self._write_lock:
            conn = self._writer
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise MemoryStoreError(
                    f"memory database {self.db_path} stayed locked for {self.busy_timeout:g} s "
                    f"({exc}); another process is writing to it, try again when it is done"
                ) from None
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                # rollback() is a no-op if the error already ended the transaction.
                conn.rollback()
                if isinstance(exc, sqlite3.DatabaseError):
                    raise MemoryStoreError(
                        f"writing to memory database {self.db_path} failed: {exc}") from None
                raise

    def _check_open(self) -> None:
        if self._closed:
            raise UserError(f"memory store {self.db_path} is closed")

    def _migrate(self) -> None:
        if self._schema_version() == SCHEMA_VERSION:
            return  # the common case, without taking the write lock
        # BEGIN IMMEDIATE: two processes opening a new file at once take turns, and the
        # second finds the schema complete. sqlite-utils nests its own transactions as
        # savepoints inside this one.
        with self._write():
            version = self._schema_version()
            if version == SCHEMA_VERSION:
                return
            if version == 1:
                # Who wrote each entry: files were indexed; text entries cannot be told
                # apart (a person's or a model's), so they count as unknown (untrusted).
                self._writer.execute("ALTER TABLE documents ADD COLUMN written_by TEXT")
                self._writer.execute("ALTER TABLE documents ADD COLUMN provenance TEXT")
                self._writer.execute("UPDATE documents SET written_by = CASE kind WHEN 'file' "
                                     "THEN 'indexed' ELSE 'unknown' END")
                self._writer.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                return
            db = self._db
            db["documents"].create({
                "id": str, "source": str, "kind": str, "content_hash": str,
                "metadata": str, "chars": int, "chunk_count": int, "created_at": float,
                "written_by": str, "provenance": str,
            }, pk="id", not_null={"id", "source", "kind"}, if_not_exists=True)
            db["documents"].create_index(["source"], if_not_exists=True)
            db["chunks"].create({
                "id": int, "doc_id": str, "chunk_index": int, "start": int, "end": int,
                "line_start": int, "line_end": int, "content": str,
            }, pk="id", not_null={"doc_id", "content"},
                foreign_keys=[("doc_id", "documents", "id")], if_not_exists=True)
            db["chunks"].create_index(["doc_id", "chunk_index"], if_not_exists=True)
            if not db["chunks_fts"].exists():
                db["chunks"].enable_fts(["content"], create_triggers=True, tokenize=TOKENIZER)
            self._writer.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def _schema_version(self) -> int:
        version = self._writer.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UserError(f"memory database {self.db_path} has schema version {version}; "
                            f"this jarvis knows up to {SCHEMA_VERSION}. Upgrade jarvis")
        return version

    # --- writing -----------------------------------------------------------------------
    def store(self, content: str, source: str = "", metadata: dict[str, Any] | None = None,
              *, kind: str = "text", content_hash: str | None = None,
              written_by: str = "person", provenance: dict[str, Any] | None = None) -> str:
        """Chunk and store `content`; return the new document id.

        `source` names where the text came from (a file path, "conversation", ...); `metadata`
        is any JSON object kept with the document and usable as a retrieve() filter.
        `written_by` is who wrote it ("person", the default for a direct call; the
        memory_store tool passes "model" with `provenance` for a model's call).
        """
        if not isinstance(content, str):
            raise UserError(f"memory content must be a string, got {type(content).__name__}")
        if len(content) > MAX_CONTENT_CHARS:
            raise UserError(f"content is {len(content)} characters; the limit is "
                            f"{MAX_CONTENT_CHARS}. Split it or index the file instead")
        chunks = chunk_text(content, self.chunk_size, self.chunk_overlap)
        with self._write() as conn:
            doc_id = self._insert(conn, content, chunks, source, metadata, kind, content_hash,
                                  written_by, provenance)
        self._publish(EventType.MEMORY_STORE, {"doc_id": doc_id, "source": source,
                                               "chunks": len(chunks), "chars": len(content)})
        return doc_id

    def _insert(self, conn: sqlite3.Connection, content: str, chunks: Sequence[Chunk],
                source: str, metadata: dict[str, Any] | None, kind: str,
                content_hash: str | None, written_by: str = "person",
                provenance: dict[str, Any] | None = None) -> str:
        """Insert one document and its chunks inside the caller's write transaction."""
        if not isinstance(source, str):
            raise UserError(f"source must be a string, got {type(source).__name__}")
        if written_by not in WRITERS:
            raise UserError(f"written_by must be one of {', '.join(WRITERS)}, not {written_by!r}")
        meta_json = _metadata_json(metadata)
        provenance_json = json.dumps(provenance or {}, ensure_ascii=False, default=str)
        for label, value in (("content", content), ("source", source), ("metadata", meta_json)):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise UserError(f"{label} is not valid Unicode text (it has a lone surrogate "
                                f"character); send it as UTF-8") from None
        doc_id = uuid.uuid4().hex
        conn.execute(
            "INSERT INTO documents (id, source, kind, content_hash, metadata, chars, chunk_count,"
            " created_at, written_by, provenance) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (doc_id, source, kind, content_hash, meta_json, len(content), len(chunks), time.time(),
             written_by, provenance_json))
        # Plain executemany: at 100 000 chunks it is several times faster than a generic
        # insert_all, and the FTS index is kept current by the triggers sqlite-utils made.
        conn.executemany(
            "INSERT INTO chunks (doc_id, chunk_index, start, end, line_start, line_end, content)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(doc_id, c.index, c.start, c.end, c.line_start, c.line_end, c.text) for c in chunks])
        return doc_id

    def store_many(self, items: Sequence[tuple[str, str, dict[str, Any] | None]], *,
                   written_by: str = "person") -> list[str]:
        """Store several (content, source, metadata) documents in one transaction."""
        prepared = []
        for content, source, metadata in items:
            if not isinstance(content, str):
                raise UserError("memory content must be a string")
            prepared.append((content, chunk_text(content, self.chunk_size, self.chunk_overlap),
                             source, metadata))
        with self._write() as conn:
            ids = [self._insert(conn, content, chunks, source, metadata, "text", None, written_by)
                   for content, chunks, source, metadata in prepared]
        for doc_id, (content, chunks, source, _) in zip(ids, prepared, strict=True):
            self._publish(EventType.MEMORY_STORE, {"doc_id": doc_id, "source": source,
                                                   "chunks": len(chunks), "chars": len(content)})
        return ids

    def replace_files(self, files: Sequence[FileDocument]) -> None:
        """Store indexed files in one transaction, replacing what each source held before."""
        if not files:
            return
        with self._write() as conn:
            for f in files:
                # By source, inside the write lock: two indexers racing on one file still
                # leave exactly one document for it.
                old = [r[0] for r in conn.execute(
                    "SELECT id FROM documents WHERE source = ? AND kind = 'file'", (f.source,))]
                self._delete_docs(conn, old)
                f.doc_id = self._insert(conn, f.content, f.chunks, f.source, f.metadata, "file",
                                        f.content_hash, "indexed")
        for f in files:
            self._publish(EventType.MEMORY_STORE, {"doc_id": f.doc_id, "source": f.source,
                                                   "chunks": len(f.chunks),
                                                   "chars": len(f.content)})

    def remove_missing_files(self, folder: str, keep: set[str]) -> int:
        """Delete indexed files under `folder` whose source is not in `keep` (they vanished
        or can no longer be indexed). Returns how many were removed."""
        low, high = _folder_range(folder)
        with self._write() as conn:
            ids = [doc_id for doc_id, src in conn.execute(
                "SELECT id, source FROM documents WHERE kind = 'file' AND source >= ? AND "
                "source < ?", (low, high)) if src not in keep]
            return self._delete_docs(conn, ids)

    def delete(self, doc_id: str) -> bool:
        """Delete one document and its chunks; returns whether it existed."""
        with self._write() as conn:
            return self._delete_docs(conn, [doc_id]) > 0

    def delete_source(self, source: str) -> int:
        """Delete every document from `source`, or from under it when it is a folder path
        (`/notes` also removes `/notes/a.md`). Returns how many documents were removed."""
        if not isinstance(source, str) or not source:
            raise UserError("source must be a non-empty string")
        low, high = _folder_range(source)
        with self._write() as conn:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM documents WHERE source = ? OR (kind = 'file' AND source >= ? "
                "AND source < ?)", (source, low, high))]
            return self._delete_docs(conn, ids)

    @staticmethod
    def _delete_docs(conn: sqlite3.Connection, ids: Sequence[str]) -> int:
        removed = 0
        for doc_id in ids:
            conn.execute("DELETE FROM chunks WHERE doc_id = ?", (doc_id,))
            removed += conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,)).rowcount
        return removed

    def clear(self) -> None:
        """Delete everything."""
        with self._write() as conn:
            # Without the delete trigger, emptying the index is one 'delete-all' instead of
            # one index update per chunk; the trigger comes back in the same transaction.
            trigger = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND "
                                   "name = 'chunks_ad'").fetchone()[0]
            conn.execute('DROP TRIGGER "chunks_ad"')
            conn.execute("DELETE FROM chunks")
            conn.execute("DELETE FROM documents")
            conn.execute("INSERT INTO chunks_fts(chunks_fts) VALUES ('delete-all')")
            conn.execute(trigger)

    # --- reading -----------------------------------------------------------------------
    def count(self) -> int:
        """How many documents are stored."""
        with self._reader() as conn:
            return conn.execute("SELECT count(*) FROM documents").fetchone()[0]

    def is_empty(self) -> bool:
        with self._reader() as conn:
            return conn.execute("SELECT 1 FROM chunks LIMIT 1").fetchone() is None

    def stats(self) -> dict[str, Any]:
        """Documents, chunks, sources, characters and the file size."""
        with self._reader() as conn:
            docs, chars = conn.execute(
                "SELECT count(*), coalesce(sum(chars), 0) FROM documents").fetchone()
            chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
            sources = conn.execute("SELECT count(DISTINCT source) FROM documents").fetchone()[0]
            files = conn.execute("SELECT count(*) FROM documents WHERE kind = 'file'").fetchone()[0]
            writers = dict(conn.execute("SELECT coalesce(written_by, 'unknown'), count(*) FROM "
                                        "documents GROUP BY 1").fetchall())
        size = sum(p.stat().st_size for p in (self.db_path, _sibling(self.db_path, "-wal"))
                   if p.exists())
        # backend and count: the keys OpenJarvis's `memory.stats()` has.
        return {"backend": "sqlite", "count": docs, "db_path": str(self.db_path),
                "documents": docs, "files": files, "chunks": chunks, "sources": sources,
                "chars": chars, "db_bytes": size,
                "written_by": {w: writers.get(w, 0) for w in WRITERS}}

    def sources(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The stored sources with their document and chunk counts, most chunks first."""
        with self._reader() as conn:
            rows = conn.execute(
                "SELECT source, count(*), sum(chunk_count), sum(chars) FROM documents "
                "GROUP BY source ORDER BY sum(chunk_count) DESC, source LIMIT ?", (limit,))
            return [{"source": s, "documents": d, "chunks": c, "chars": n} for s, d, c, n in rows]

    def documents(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The newest stored documents: id, source, kind, chars, created_at, written_by
        (no text)."""
        with self._reader() as conn:
            rows = conn.execute(
                "SELECT id, source, kind, chars, created_at, coalesce(written_by, 'unknown') "
                "FROM documents ORDER BY created_at DESC, id LIMIT ?", (max(0, int(limit)),))
            return [{"id": i, "source": s, "kind": k, "chars": c, "created_at": t,
                     "written_by": w} for i, s, k, c, t, w in rows]

    def document(self, doc_id: str) -> str | None:
        """A stored document's text (rebuilt from its chunks), or None if there is none."""
        with self._reader() as conn:
            if conn.execute("SELECT 1 FROM documents WHERE id = ?", (doc_id,)).fetchone() is None:
                return None
            rows = conn.execute("SELECT start, content FROM chunks WHERE doc_id = ? "
                                "ORDER BY chunk_index", (doc_id,)).fetchall()
        text = ""
        for start, content in rows:
            # Chunks overlap; each one is the document's text from its `start` on.
            text = text[:start] + content if start is not None else text + content
        return text

    def file_hash(self, source: str) -> tuple[str, str] | None:
        """(document id, content hash) of the file indexed as `source`, if any."""
        with self._reader() as conn:
            row = conn.execute("SELECT id, content_hash FROM documents WHERE source = ? AND "
                               "kind = 'file' LIMIT 1", (source,)).fetchone()
        return (row[0], row[1]) if row else None

    def retrieve(self, query: str, top_k: int = 5, source: str | None = None,
                 metadata: dict[str, Any] | None = None) -> list[RetrievalResult]:
        """The `top_k` chunks that best match the plain-text `query`, best first.

        `source` keeps only chunks from that source (or from under that folder); `metadata`
        keeps only documents whose metadata has those key/value pairs. A query without words
        (empty, only punctuation) matches nothing and returns [].
        """
        started = time.perf_counter()
        query = check_query(query)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise UserError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}")
        where, params = _filters(source, metadata)
        terms = query_terms(query)
        results: list[RetrievalResult] = []
        if terms:
            with self._reader() as conn:
                results = self._search(conn, terms, top_k, where, params)
        self._publish(EventType.MEMORY_RETRIEVE, {
            "query": query[:200], "top_k": top_k, "results": len(results),
            "sources": sorted({r.source for r in results}),
            "latency_seconds": time.perf_counter() - started})
        return results

    def _search(self, conn: sqlite3.Connection, terms: list[str], top_k: int, where: str,
                params: list[Any]) -> list[RetrievalResult]:
        """BM25 over every word of the query; `jarvis.memory.ranking` bounds the work."""
        def count(expression: str, cap: int) -> int:
            return conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM chunks_fts WHERE chunks_fts MATCH ? LIMIT ?)",
                (expression, cap)).fetchone()[0]

        def match(expression: str, limit: int) -> list[RetrievalResult]:
            return self._match(conn, expression, limit, where, params)

        return ranking.best(terms, top_k, count, match, self._chunk_total(conn))

    def _chunk_total(self, conn: sqlite3.Connection) -> int:
        # data_version changes when another connection commits, so the cached count is
        # refreshed exactly when it could have changed.
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        cached = self._totals.get(id(conn))
        if cached is not None and cached[0] == version:
            return cached[1]
        total = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        self._totals[id(conn)] = (version, total)
        return total

    def _match(self, conn: sqlite3.Connection, expression: str, top_k: int, where: str,
               params: list[Any]) -> list[RetrievalResult]:
        if where:
            sql = ("SELECT c.id, c.doc_id, c.chunk_index, c.start, c.end, c.line_start, "
                   "c.line_end, c.content, d.source, d.metadata, d.written_by, d.provenance, "
                   "f.rank FROM chunks_fts f "
                   "JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.doc_id "
                   f"WHERE chunks_fts MATCH ? {where} ORDER BY f.rank LIMIT ?")
            args: list[Any] = [expression, *params, top_k]
        else:
            # Rank inside FTS5 first, then join only the winners.
            sql = ("SELECT c.id, c.doc_id, c.chunk_index, c.start, c.end, c.line_start, "
                   "c.line_end, c.content, d.source, d.metadata, d.written_by, d.provenance, "
                   "f.rank FROM "
                   "(SELECT rowid, rank FROM chunks_fts WHERE chunks_fts MATCH ? "
                   "ORDER BY rank LIMIT ?) f "
                   "JOIN chunks c ON c.id = f.rowid JOIN documents d ON d.id = c.doc_id "
                   "ORDER BY f.rank")
            args = [expression, top_k]
        # Terms are always quoted: an error here is a damaged file, never user input.
        rows = conn.execute(sql, args).fetchall()
        return [RetrievalResult(
            content=content, source=src, score=-rank,
            metadata=json.loads(meta) if meta else {}, chunk_index=index, doc_id=doc_id,
            chunk_id=chunk_id, start=start, end=end, line_start=line_start, line_end=line_end,
            written_by=writer if writer in WRITERS else "unknown",
            provenance=_provenance(prov))
            for chunk_id, doc_id, index, start, end, line_start, line_end, content, src, meta,
            writer, prov, rank in rows]

    # --- lifecycle ---------------------------------------------------------------------
    def _publish(self, event: EventType, data: dict[str, Any]) -> None:
        if self.bus is not None:
            self.bus.publish(event, data)

    def close(self) -> None:
        """Close every connection. The store cannot be used afterwards."""
        with self._pool_lock:
            if self._closed:
                return
            self._closed = True
            readers, self._all_readers, self._readers = self._all_readers, [], []
        for conn in readers:
            conn.close()
        with self._write_lock:
            self._writer.close()

    def __enter__(self) -> SQLiteMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SQLiteMemory({str(self.db_path)!r})"


def _provenance(text: str | None) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _folder_range(folder: str) -> tuple[str, str]:
    """[low, high) holding exactly the strings under `folder/`, so the source index is used:
    "0" is the character right after "/"."""
    prefix = folder.rstrip("/") + "/"
    return prefix, prefix[:-1] + "0"


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _metadata_json(metadata: dict[str, Any] | None) -> str:
    if metadata is None:
        return "{}"
    if not isinstance(metadata, dict):
        raise UserError(f"metadata must be a JSON object (dict), got {type(metadata).__name__}")
    try:
        text = json.dumps(metadata, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UserError(f"metadata must be JSON-serializable: {exc}") from None
    if len(text) > MAX_METADATA_CHARS:
        raise UserError(f"metadata is {len(text)} characters as JSON; the limit is "
                        f"{MAX_METADATA_CHARS}")
    return text


def _filters(source: str | None, metadata: dict[str, Any] | None) -> tuple[str, list[Any]]:
    """SQL conditions (starting with AND) for the source and metadata filters."""
    clauses: list[str] = []
    params: list[Any] = []
    if source is not None:
        if not isinstance(source, str) or not source:
            raise UserError("source filter must be a non-empty string")
        folder = source.rstrip("/") + "/"
        clauses.append("(d.source = ? OR substr(d.source, 1, ?) = ?)")
        params += [source, len(folder), folder]
    if metadata:
        if not isinstance(metadata, dict):
            raise UserError("metadata filter must be a dict of key -> value")
        for key, value in metadata.items():
            if not isinstance(key, str) or not key or len(key) > 200:
                raise UserError(f"metadata filter key must be a short string, got {key!r}")
            if value is not None and not isinstance(value, (str, int, float, bool)):
                raise UserError(f"metadata filter value for {key!r} must be a string, number, "
                                f"boolean or null")
            path = '$."' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
            if value is None:
                clauses.append("json_extract(d.metadata, ?) IS NULL")
                params.append(path)
            elif isinstance(value, bool):
                # JSON true/false come back from json_extract as 1/0.
                clauses.append("json_type(d.metadata, ?) = ?")
                params += [path, "true" if value else "false"]
            else:
                clauses.append("json_extract(d.metadata, ?) = ?")
                params += [path, value]
    return ("AND " + " AND ".join(clauses)) if clauses else "", params
