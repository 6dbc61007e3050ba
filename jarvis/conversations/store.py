"""ConversationStore: conversations and their turns, in the run log's SQLite file.

A conversation is a sequence of runs sharing history. Each turn keeps what the model was
asked (`query`), the person's own words in it (`person_text`: the same text for a typed
question; for a message that came in from Telegram or e-mail, without its forwarded or
attached parts), the answer and the id of its run in the run log. The conversation keeps its
provenance (`trust`: the trust state of its runs so far, JSON) so that content read in an
earlier turn keeps counting in later ones.

The tables live beside the run log's (`[runs] db_path`, default JARVIS_HOME/runs.db) with their
own schema version (table `conversation_schema`), so the two evolve apart. One SQLite
discipline, as everywhere: WAL, a busy timeout, BEGIN IMMEDIATE around read-then-write.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jarvis.errors import ConfigError, UserError

MAX_TEXT_CHARS = 200_000  # per stored text: the history budget cuts further when it is used
MAX_TITLE_CHARS = 80

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        source TEXT,
        key TEXT UNIQUE,
        title TEXT,
        agent TEXT,
        tools TEXT,
        turns INTEGER NOT NULL DEFAULT 0,
        trust TEXT,
        metadata TEXT
    );
    CREATE INDEX IF NOT EXISTS conversations_updated ON conversations(updated_at);
    CREATE TABLE IF NOT EXISTS conversation_turns (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL,
        position INTEGER NOT NULL,
        created_at REAL NOT NULL,
        run_id TEXT,
        query TEXT,
        person_text TEXT,
        answer TEXT,
        metadata TEXT,
        UNIQUE (conversation_id, position)
    );
    """,
)


@dataclass(slots=True)
class Turn:
    """One question and its answer in a conversation."""

    position: int
    query: str
    answer: str
    created_at: float = 0.0
    run_id: str | None = None
    person_text: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, "created_at": self.created_at,
                "run_id": self.run_id, "query": self.query, "person_text": self.person_text,
                "answer": self.answer, "metadata": dict(self.metadata)}


@dataclass(slots=True)
class ConversationRecord:
    """A conversation's row (without its turns)."""

    id: str
    created_at: float
    updated_at: float
    source: str | None = None
    key: str | None = None
    title: str | None = None
    agent: str | None = None
    tools: list[str] | None = None
    turns: int = 0
    trust: dict[str, Any] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "created_at": self.created_at, "updated_at": self.updated_at,
                "source": self.source, "key": self.key, "title": self.title,
                "agent": self.agent, "tools": self.tools, "turns": self.turns,
                "trust": self.trust, "metadata": dict(self.metadata)}


def new_conversation_id() -> str:
    return uuid.uuid4().hex[:12]


def _cut(text: str | None, limit: int = MAX_TEXT_CHARS) -> str | None:
    if text is None:
        return text
    text = _escaped(text)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters not stored]"


def _escaped(text: str) -> str:
    """`text` with lone surrogates (a model's `"\\udc80"` escape: not valid Unicode, which
    SQLite cannot store) written as the six characters `\\udc80`, as the run log does."""
    from jarvis.core.text import escape

    return escape(text)[0]


def _json(value: Any) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, ensure_ascii=False, default=str)
    from jarvis.core.text import has_lone_surrogate

    if has_lone_surrogate(text):  # default=str may make text of anything: escape it as JSON
        text = json.dumps(json.loads(text), default=str)
    return text


def _loads(value: str | None, default: Any) -> Any:
    if not value:
        return default
    try:
        return json.loads(value)
    except ValueError:
        return default


def title_of(query: str) -> str:
    """A conversation's title: its first question on one line, cut."""
    text = " ".join(_escaped(query).split())
    return text if len(text) <= MAX_TITLE_CHARS else text[:MAX_TITLE_CHARS - 1] + "…"


_COLUMNS = ("id", "created_at", "updated_at", "source", "key", "title", "agent", "tools",
            "turns", "trust", "metadata")


def _record(row: tuple) -> ConversationRecord:
    data = dict(zip(_COLUMNS, row, strict=True))
    data["tools"] = _loads(data["tools"], None)
    data["trust"] = _loads(data["trust"], None)
    data["metadata"] = _loads(data["metadata"], {})
    return ConversationRecord(**data)


class ConversationStore:
    """Conversations in one SQLite file; safe to share between threads and processes."""

    def __init__(self, db_path: str | Path, *, busy_timeout: float = 10.0) -> None:
        self.db_path = Path(db_path).expanduser()
        self._busy_timeout = busy_timeout
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None

    # --- plumbing ----------------------------------------------------------------------------
    def _connection(self, create: bool = True) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not create and not self.db_path.exists():
            return None
        try:
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.db_path), timeout=self._busy_timeout,
                                   check_same_thread=False, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            from jarvis.core.sqlite_wal import enter_wal

            enter_wal(conn, self._busy_timeout)
            self._conn = conn
            self._migrate(conn)
        except (sqlite3.DatabaseError, OSError) as exc:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            raise ConfigError(f"cannot keep conversations in {self.db_path}: {exc}; point "
                              f"[runs] db_path at a writable file (conversations live beside "
                              f"the run log)") from None
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        with self._immediate(conn):
            conn.execute("CREATE TABLE IF NOT EXISTS conversation_schema (version INTEGER)")
            row = conn.execute("SELECT version FROM conversation_schema").fetchone()
            version = row[0] if row else 0
            if row is None:
                conn.execute("INSERT INTO conversation_schema (version) VALUES (0)")
            for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in filter(str.strip, script.split(";")):
                    conn.execute(statement)
                conn.execute("UPDATE conversation_schema SET version = ?", (number,))

    @staticmethod
    def _immediate(conn: sqlite3.Connection) -> Any:
        from jarvis.core.sqlite_wal import immediate

        return immediate(conn)

    def _write(self) -> Any:
        import contextlib

        @contextlib.contextmanager
        def locked() -> Iterator[sqlite3.Connection]:
            with self._lock:
                conn = self._connection()
                assert conn is not None
                with self._immediate(conn):
                    yield conn

        return locked()

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            conn = self._connection(create=False)
            if conn is None:
                return []
            return conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ConversationStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # --- conversations -----------------------------------------------------------------------
    def create(self, *, source: str | None = None, key: str | None = None,
               title: str | None = None, agent: str | None = None,
               tools: list[str] | None = None, trust: dict[str, Any] | None = None,
               metadata: dict[str, Any] | None = None) -> ConversationRecord:
        """A new, empty conversation."""
        now = time.time()
        record = ConversationRecord(new_conversation_id(), now, now, source, key,
                                    title and title_of(title), agent, tools, 0, trust,
                                    dict(metadata or {}))
        with self._write() as conn:
            conn.execute(f"INSERT INTO conversations ({', '.join(_COLUMNS)}) VALUES "
                         f"({', '.join('?' * len(_COLUMNS))})", self._row(record))
        return record

    @staticmethod
    def _row(r: ConversationRecord) -> tuple:
        return (r.id, r.created_at, r.updated_at, r.source, r.key, r.title, r.agent,
                _json(r.tools), r.turns, _json(r.trust), _json(r.metadata))

    def for_key(self, key: str, **create: Any) -> ConversationRecord:
        """The conversation kept under `key` (an inbound sender's chat), made on first use."""
        with self._write() as conn:
            row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM conversations WHERE key = ?",
                               (key,)).fetchone()
            if row is not None:
                return _record(row)
            now = time.time()
            title = create.get("title")
            record = ConversationRecord(new_conversation_id(), now, now, create.get("source"),
                                        key, title and title_of(title), create.get("agent"),
                                        create.get("tools"), 0, create.get("trust"),
                                        dict(create.get("metadata") or {}))
            conn.execute(f"INSERT INTO conversations ({', '.join(_COLUMNS)}) VALUES "
                         f"({', '.join('?' * len(_COLUMNS))})", self._row(record))
            return record

    def get(self, conversation_id: str) -> ConversationRecord:
        """One conversation; an unambiguous id prefix is enough."""
        if not isinstance(conversation_id, str) or not conversation_id.strip():
            raise UserError("give a conversation id (or a prefix of one); `jarvis conversations "
                            "list` shows them")
        pattern = (conversation_id.replace("\\", "\\\\").replace("%", "\\%")
                   .replace("_", "\\_") + "%")
        rows = self._read(f"SELECT {', '.join(_COLUMNS)} FROM conversations WHERE id LIKE ? "
                          f"ESCAPE '\\' ORDER BY updated_at DESC LIMIT 5", (pattern,))
        exact = [r for r in rows if r[0] == conversation_id]
        if not rows:
            raise UserError(f"no conversation {conversation_id!r}; `jarvis conversations list` "
                            f"shows them")
        if not exact and len(rows) > 1:
            raise UserError(f"conversation id prefix {conversation_id!r} is ambiguous: "
                            f"{', '.join(r[0] for r in rows)}")
        return _record(exact[0] if exact else rows[0])

    def latest(self, *, keyed: bool = False) -> ConversationRecord | None:
        """The conversation used most recently: of those without a key (typed at this
        machine), or with `keyed` of all."""
        where = "" if keyed else "WHERE key IS NULL"
        rows = self._read(f"SELECT {', '.join(_COLUMNS)} FROM conversations {where} "
                          f"ORDER BY updated_at DESC, rowid DESC LIMIT 1")
        return _record(rows[0]) if rows else None

    def list(self, limit: int = 20, source: str | None = None) -> list[ConversationRecord]:
        """The most recently used conversations first."""
        where, params = ("WHERE source = ?", (source,)) if source else ("", ())
        rows = self._read(f"SELECT {', '.join(_COLUMNS)} FROM conversations {where} "
                          f"ORDER BY updated_at DESC, rowid DESC LIMIT ?", (*params, int(limit)))
        return [_record(r) for r in rows]

    def delete(self, conversation_id: str) -> ConversationRecord:
        """Delete a conversation and its turns (its runs stay in the run log)."""
        record = self.get(conversation_id)
        with self._write() as conn:
            conn.execute("DELETE FROM conversation_turns WHERE conversation_id = ?", (record.id,))
            conn.execute("DELETE FROM conversations WHERE id = ?", (record.id,))
        return record

    # --- turns -------------------------------------------------------------------------------
    def add_turn(self, conversation_id: str, *, query: str, answer: str,
                 run_id: str | None = None, person_text: str | None = None,
                 trust: dict[str, Any] | None = None, title: str | None = None,
                 metadata: dict[str, Any] | None = None) -> Turn:
        """Append a turn; `trust` becomes the conversation's provenance, merged with what is
        stored (it only ever grows)."""
        now = time.time()
        with self._write() as conn:
            row = conn.execute("SELECT turns, title FROM conversations WHERE id = ?",
                               (conversation_id,)).fetchone()
            if row is None:
                raise UserError(f"no conversation {conversation_id!r} (deleted meanwhile?)")
            position = int(row[0]) + 1
            conn.execute("INSERT INTO conversation_turns (conversation_id, position, created_at, "
                         "run_id, query, person_text, answer, metadata) VALUES "
                         "(?, ?, ?, ?, ?, ?, ?, ?)",
                         (conversation_id, position, now, run_id, _cut(query),
                          _cut(person_text) if person_text != query else None, _cut(answer),
                          _json(metadata or {})))
            new_title = row[1] or (title_of(title or person_text or query))
            if trust is not None:
                # Another process may have added a turn since this run started (two messages
                # of one chat at once): what made the conversation tainted or private then
                # must not be lost by writing this run's state over it.
                from jarvis.conversations.provenance import merged_state

                current = conn.execute("SELECT trust FROM conversations WHERE id = ?",
                                       (conversation_id,)).fetchone()
                trust = merged_state(_loads(current[0] if current else None, None), trust)
                conn.execute("UPDATE conversations SET turns = ?, updated_at = ?, title = ?, "
                             "trust = ? WHERE id = ?",
                             (position, now, new_title, _json(trust), conversation_id))
            else:
                conn.execute("UPDATE conversations SET turns = ?, updated_at = ?, title = ? "
                             "WHERE id = ?", (position, now, new_title, conversation_id))
        return Turn(position, query, answer, now, run_id, person_text, dict(metadata or {}))

    def answer_turn(self, run_id: str, answer: str,
                    trust: dict[str, Any] | None = None) -> str | None:
        """Give the turn of run `run_id` its answer (a run that parked for the person's
        approval and was continued: jarvis.approvals), and merge `trust` into its
        conversation's provenance. Returns the conversation's id, or None when no turn is that
        run's."""
        with self._write() as conn:
            row = conn.execute("SELECT conversation_id FROM conversation_turns WHERE run_id = ? "
                               "ORDER BY position DESC LIMIT 1", (run_id,)).fetchone()
            if row is None:
                return None
            conn.execute("UPDATE conversation_turns SET answer = ? WHERE conversation_id = ? AND "
                         "run_id = ?", (_cut(answer), row[0], run_id))
            if trust is not None:
                from jarvis.conversations.provenance import merged_state

                current = conn.execute("SELECT trust FROM conversations WHERE id = ?",
                                       (row[0],)).fetchone()
                # The stored state (its person's words) with every mark of the run's added.
                stored = _loads(current[0] if current else None, None) or {}
                conn.execute("UPDATE conversations SET trust = ?, updated_at = ? WHERE id = ?",
                             (_json(merged_state(trust, stored) if stored else trust),
                              time.time(), row[0]))
            return str(row[0])

    def set_trust(self, conversation_id: str, trust: dict[str, Any]) -> None:
        with self._write() as conn:
            conn.execute("UPDATE conversations SET trust = ?, updated_at = ? WHERE id = ?",
                         (_json(trust), time.time(), conversation_id))

    def turns(self, conversation_id: str, *, limit: int | None = None) -> list[Turn]:
        """The turns oldest first (with `limit`: only the newest `limit`, still oldest first)."""
        sql = ("SELECT position, query, answer, created_at, run_id, person_text, metadata "
               "FROM conversation_turns WHERE conversation_id = ? ORDER BY position DESC")
        params: tuple = (conversation_id,)
        if limit is not None:
            sql += " LIMIT ?"
            params += (int(limit),)
        return [self._turn(r) for r in reversed(self._read(sql, params))]

    def newest_turns(self, conversation_id: str, *, batch: int = 64) -> Iterator[Turn]:
        """The turns newest first, read a batch at a time (history assembly stops early)."""
        before = None
        while True:
            sql = ("SELECT position, query, answer, created_at, run_id, person_text, metadata "
                   "FROM conversation_turns WHERE conversation_id = ?")
            params: tuple = (conversation_id,)
            if before is not None:
                sql += " AND position < ?"
                params += (before,)
            rows = self._read(sql + " ORDER BY position DESC LIMIT ?", (*params, batch))
            for row in rows:
                yield self._turn(row)
            if len(rows) < batch:
                return
            before = rows[-1][0]

    @staticmethod
    def _turn(row: tuple) -> Turn:
        position, query, answer, created, run_id, person_text, metadata = row
        return Turn(position, query or "", answer or "", created or 0.0, run_id,
                    person_text if person_text is not None else query,
                    _loads(metadata, {}))


def conversation_store_path(config: Any) -> Path:
    """Where conversations live: beside the run log ([runs] db_path, else JARVIS_HOME/runs.db)."""
    from jarvis.runlog import run_log_path

    return run_log_path(config)


def open_conversations(config: Any) -> ConversationStore:
    return ConversationStore(conversation_store_path(config))
