"""The run log: every ask (CLI, SDK, scheduler) as a row in SQLite under JARVIS_HOME.

A run holds the query, agent, model, engine, source, outcome, timings, usage, the message
transcript and metadata; each tool call is a row in `tool_calls` (arguments, result, latency,
cost). A run is written once, when it ends (success, error or interruption), so the ask
itself never waits on the database. WAL mode and a busy timeout let the scheduler's workers
and the CLI write side by side; `synchronous = NORMAL` (the other stores' setting) makes a
commit a write to the WAL without an fsync: a power cut can lose the last runs, never the
file's consistency. Written with plain sqlite3 statements (a served request records one run:
sqlite-utils' per-insert table introspection cost more than the SQL). Turned off by
`[runs] enabled = false` or JARVIS_RUN_LOG=0.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from jarvis.errors import UserError

MAX_STORED_CHARS = 200_000  # per text field: a run log must not grow without bound

# Each entry upgrades the schema by one version (PRAGMA user_version).
MIGRATIONS: list[str] = [
    """
    CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        finished_at REAL,
        duration_seconds REAL,
        source TEXT,
        query TEXT,
        agent TEXT,
        model TEXT,
        engine TEXT,
        tools TEXT,
        status TEXT,
        error TEXT,
        content TEXT,
        turns INTEGER,
        prompt_tokens INTEGER,
        completion_tokens INTEGER,
        total_tokens INTEGER,
        messages TEXT,
        metadata TEXT
    );
    CREATE INDEX IF NOT EXISTS runs_created ON runs(created_at);
    CREATE TABLE IF NOT EXISTS tool_calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL REFERENCES runs(id),
        position INTEGER,
        call_id TEXT,
        tool_name TEXT,
        arguments TEXT,
        content TEXT,
        success INTEGER,
        error_type TEXT,
        latency_seconds REAL,
        cost_usd REAL
    );
    CREATE INDEX IF NOT EXISTS tool_calls_run ON tool_calls(run_id);
    """,
    # A tool's recent calls, for the budget's estimates (tool_history).
    "CREATE INDEX IF NOT EXISTS tool_calls_tool ON tool_calls(tool_name, id)",
]


RUN_COLUMNS = ("id", "created_at", "finished_at", "duration_seconds", "source", "query", "agent",
               "model", "engine", "tools", "status", "error", "content", "turns", "prompt_tokens",
               "completion_tokens", "total_tokens", "messages", "metadata")
CALL_COLUMNS = ("run_id", "position", "call_id", "tool_name", "arguments", "content", "success",
                "error_type", "latency_seconds", "cost_usd")
_INSERT_RUN = (f"INSERT OR REPLACE INTO runs ({', '.join(RUN_COLUMNS)}) "
               f"VALUES ({', '.join('?' * len(RUN_COLUMNS))})")
_INSERT_CALL = (f"INSERT INTO tool_calls ({', '.join(CALL_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(CALL_COLUMNS))})")


def new_run_id() -> str:
    return uuid.uuid4().hex[:16]


def _cut(value: Any) -> Any:
    if isinstance(value, str) and len(value) > MAX_STORED_CHARS:
        return value[:MAX_STORED_CHARS] + f"\n[... {len(value) - MAX_STORED_CHARS} characters cut]"
    return value


def _json(value: Any) -> str:
    # default=str can make text from any object: escaped again, as JSON escapes this time.
    text = json.dumps(value, ensure_ascii=False, default=str)
    from jarvis.core.text import has_lone_surrogate

    if has_lone_surrogate(text):
        text = json.dumps(json.loads(text), default=str)  # ensure_ascii: \udc80 escapes
    return _cut(text)


def _has_lone_surrogate(value: Any) -> bool:
    """Whether any text in `value` holds a lone surrogate: one C-speed serialization and
    search (the walk that escapes them copies every message, so it runs only when needed)."""
    from jarvis.core.text import has_lone_surrogate

    try:
        return has_lone_surrogate(json.dumps(value, ensure_ascii=False, default=str))
    except (ValueError, RecursionError):  # a cycle, say: the walk decides
        return True


def _cell(value: Any) -> Any:
    """A value SQLite stores as is; anything else (a dict, a list, an object a tool handed
    back) as JSON text, as sqlite-utils stored it."""
    if value is None or isinstance(value, (str, int, float, bytes)):
        return value
    return _json(value)


class RunLog:
    """Read and write runs in one SQLite file (created on first write)."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path).expanduser()
        self._lock = threading.Lock()
        self._db: Any = None

    def _open(self, create: bool) -> Any:
        if self._db is not None:
            return self._db
        if not create and not self.db_path.exists():
            return None
        try:
            return self._connect()
        except (sqlite3.DatabaseError, OSError) as exc:
            from jarvis.errors import ConfigError

            if not create and self._read_only_folder():
                # Reading (runs list/show) needs no write: open the file as it is.
                return self._connect_read_only()
            off = "or turn logging off with [runs] enabled = false in config.toml"
            if self.db_path.is_file() and not self._read_only_folder():
                advice = f"Move the file aside (a new one is made), {off}"
            else:  # moving the file would not help: the folder is missing or read-only
                advice = (f"Make the folder {self.db_path.parent} writable, point [runs] "
                          f"db_path (or JARVIS_RUNS_DB) at a folder that is, {off}")
            raise ConfigError(f"cannot use the run log {self.db_path}: {exc}. {advice}") from exc

    def _read_only_folder(self) -> bool:
        import os

        folder = self.db_path.parent
        return folder.is_dir() and not os.access(folder, os.W_OK)

    def _connect_read_only(self) -> Any:
        """The run log opened read-only and as immutable (no -wal/-shm files are made): a
        file in a read-only folder is still listed and shown."""
        from urllib.parse import quote

        conn = sqlite3.connect(f"file:{quote(str(self.db_path))}?mode=ro&immutable=1", uri=True,
                               check_same_thread=False, isolation_level=None)
        self._db = conn
        return conn

    def _connect(self) -> Any:
        from jarvis.core.paths import private_database
        from jarvis.core.sqlite_wal import enter_wal

        private_database(self.db_path)  # 0600 (and so its -wal and -shm), whatever the umask
        conn = sqlite3.connect(str(self.db_path), timeout=10, check_same_thread=False,
                               isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        enter_wal(conn, 10)
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Statement by statement: executescript would commit our transaction early.
                for statement in filter(str.strip, script.split(";")):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        self._db = conn
        return conn

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # --- writing -----------------------------------------------------------------------------
    def record(self, run: dict[str, Any], tool_calls: list[dict[str, Any]]) -> str:
        """Store one finished run and its tool calls in one transaction; returns the run id.

        Text that is not valid Unicode (a lone surrogate, from a model's `"\\udc80"` escape
        or a command-line byte that is not UTF-8) cannot be stored as it is: each one is
        written as the six characters `\\udc80`, and the run's metadata says how many
        (`escaped_characters`)."""
        escaped = escaped_calls = 0
        if _has_lone_surrogate((run, tool_calls)):
            from jarvis.core.text import escape

            run, escaped = escape(run)
            tool_calls, escaped_calls = escape(tool_calls)
        if escaped or escaped_calls:
            run["metadata"] = dict(run.get("metadata") or {}, escaped_characters=(
                f"{escaped + escaped_calls} lone surrogate(s) (text that is not valid "
                f"Unicode) stored as \\uXXXX escapes"))
        run_id = run.get("id") or new_run_id()
        usage = run.get("usage") or {}
        row = {
            "id": run_id,
            "created_at": run.get("created_at", time.time()),
            "finished_at": run.get("finished_at", time.time()),
            "duration_seconds": run.get("duration_seconds"),
            "source": run.get("source"),
            "query": _cut(run.get("query")),
            "agent": run.get("agent"),
            "model": run.get("model"),
            "engine": run.get("engine"),
            "tools": _json(run.get("tools") or []),
            "status": run.get("status", "ok"),
            "error": _cut(run.get("error")),
            "content": _cut(run.get("content")),
            "turns": run.get("turns", 0),
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0),
            "messages": _json(run.get("messages") or []),
            "metadata": _json(run.get("metadata") or {}),
        }
        calls = [{
            "run_id": run_id,
            "position": i,
            "call_id": c.get("call_id"),
            "tool_name": c.get("tool_name"),
            "arguments": _json(c.get("arguments")),
            "content": _cut(c.get("content")),
            "success": 1 if c.get("success") else 0,
            "error_type": c.get("error_type"),
            "latency_seconds": c.get("latency_seconds"),
            "cost_usd": c.get("cost_usd"),
        } for i, c in enumerate(tool_calls)]
        values = [_cell(row[name]) for name in RUN_COLUMNS]
        call_values = [[_cell(c[name]) for name in CALL_COLUMNS] for c in calls]
        with self._lock:
            conn = self._open(create=True)
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(_INSERT_RUN, values)
                conn.execute("DELETE FROM tool_calls WHERE run_id = ?", [run_id])
                if call_values:
                    conn.executemany(_INSERT_CALL, call_values)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return run_id

    def set_status(self, run_id: str, status: str, error: str | None = None) -> bool:
        """Change a recorded run's status (a parked run that expired); False when the run is
        not in this log."""
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return False
            conn.execute("BEGIN IMMEDIATE")
            try:
                changed = conn.execute("UPDATE runs SET status = ?, error = coalesce(?, error), "
                                       "finished_at = ? WHERE id = ?",
                                       [status, _cut(error), time.time(), run_id]).rowcount
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return bool(changed)

    # --- reading -----------------------------------------------------------------------------
    def list(self, limit: int = 20, source: str | None = None) -> list[dict[str, Any]]:
        """The newest runs first (without transcripts)."""
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return []
            where, params = ("WHERE source = ?", [source]) if source else ("", [])
            rows = conn.execute(
                "SELECT id, created_at, duration_seconds, source, query, agent, model, engine, "
                "status, error, turns, total_tokens, "
                "(SELECT COUNT(*) FROM tool_calls t WHERE t.run_id = runs.id) AS tool_calls "
                f"FROM runs {where} ORDER BY created_at DESC LIMIT ?", [*params, limit]).fetchall()
            names = ["id", "created_at", "duration_seconds", "source", "query", "agent", "model",
                     "engine", "status", "error", "turns", "total_tokens", "tool_calls"]
        return [dict(zip(names, r, strict=True)) for r in rows]

    def tool_history(self, tool_name: str, limit: int = 50) -> list[tuple[Any, Any]]:
        """(latency_seconds, cost_usd) of the tool's last `limit` calls that ran (newest first):
        what budgets estimate a call by, across processes (jarvis.tools.budget)."""
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                return []
            return conn.execute(
                "SELECT latency_seconds, cost_usd FROM tool_calls WHERE tool_name = ? AND "
                "(error_type IS NULL OR error_type IN ('timeout', 'execution', 'transport')) "
                "ORDER BY id DESC LIMIT ?", [tool_name, int(limit)]).fetchall()

    def get(self, run_id: str) -> dict[str, Any]:
        """One run with its transcript and tool calls; an unambiguous id prefix is enough."""
        if not run_id.strip():
            raise UserError("give a run id (or a prefix of one); `jarvis runs list` shows them")
        with self._lock:
            conn = self._open(create=False)
            if conn is None:
                raise UserError(f"no run {run_id!r}: the run log at {self.db_path} is empty")
            pattern = run_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            matches = _dicts(conn.execute("SELECT * FROM runs WHERE id LIKE ? ESCAPE '\\' "
                                          "ORDER BY created_at DESC LIMIT 5", [pattern]))
            if not matches:
                raise UserError(f"no run {run_id!r} in {self.db_path}; `jarvis runs list` shows "
                                f"the recent ones")
            exact = [m for m in matches if m["id"] == run_id]
            if not exact and len(matches) > 1:
                raise UserError(f"run id prefix {run_id!r} is ambiguous: "
                                f"{', '.join(m['id'] for m in matches)}")
            run = dict(exact[0] if exact else matches[0])
            calls = _dicts(conn.execute("SELECT * FROM tool_calls WHERE run_id = ? ORDER BY "
                                        "position", [run["id"]]))
        for key in ("tools", "messages", "metadata"):
            run[key] = _loads(run.get(key))
        run["usage"] = {k: run.pop(k) for k in ("prompt_tokens", "completion_tokens",
                                                "total_tokens")}
        for call in calls:
            call["arguments"] = _loads(call.get("arguments"))
            call["success"] = bool(call.get("success"))
            call.pop("run_id", None)
            call.pop("id", None)
        run["tool_calls"] = calls
        return run


def _dicts(cursor: sqlite3.Cursor) -> list[dict[str, Any]]:
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def run_log_path(config: Any) -> Path:
    """Where the run log lives: [runs] db_path, else JARVIS_HOME/runs.db."""
    from jarvis.core.paths import jarvis_home

    configured = config.runs.db_path
    return config.resolve_path(configured) if configured else jarvis_home() / "runs.db"


def run_log_enabled(config: Any) -> bool:
    return bool(config.runs.enabled)
