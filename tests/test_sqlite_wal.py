"""enter_wal: a new SQLite file switched to WAL while another process holds it waits its turn
instead of failing with "database is locked" (several daemons or CLI calls opening a fresh
scheduler, memory or run-log file together)."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from jarvis.core.sqlite_wal import enter_wal


def _holder(path) -> sqlite3.Connection:
    """A connection in the middle of a read transaction on a new rollback-journal file."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("CREATE TABLE t (x)")
    conn.execute("BEGIN")
    conn.execute("SELECT * FROM t").fetchall()
    return conn


def test_the_switch_waits_for_a_lock_held_longer_than_sqlites_own_busy_wait(tmp_path):
    path = tmp_path / "fresh.db"
    holder = _holder(path)
    conn = sqlite3.connect(path, timeout=0.01)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        conn.execute("PRAGMA journal_mode=WAL")  # what a plain switch does
    threading.Timer(0.3, holder.execute, ("COMMIT",)).start()
    started = time.monotonic()
    enter_wal(conn, timeout=10)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert 0.2 < time.monotonic() - started < 5
    holder.close()
    conn.close()


def test_a_lock_never_released_fails_after_the_timeout(tmp_path):
    path = tmp_path / "fresh.db"
    holder = _holder(path)
    conn = sqlite3.connect(path, timeout=0.01)
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        enter_wal(conn, timeout=0.5)
    assert time.monotonic() - started < 3
    holder.close()
    conn.close()


def test_an_in_memory_database_returns_at_once():
    conn = sqlite3.connect(":memory:")
    started = time.monotonic()
    enter_wal(conn, timeout=10)
    assert time.monotonic() - started < 1
