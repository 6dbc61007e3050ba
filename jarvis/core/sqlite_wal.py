"""The SQLite discipline the stores share: switching a file to WAL mode when several processes
may open it at once, and write transactions that take the write lock up front."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator


def enter_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put `conn`'s database in WAL mode, waiting up to `timeout` seconds for other openers.

    On a new file the switch needs an exclusive lock, and SQLite can answer "database is
    locked" at once, without calling the busy handler, when several processes (daemons,
    workers, CLI calls) create the same file together; so the switch is retried here.
    """
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        else:
            # SQLite answers with the old mode when it could not switch (another opener held
            # a lock): try again. An in-memory database stays "memory" for good.
            if str(mode).lower() in ("wal", "memory") or time.monotonic() >= deadline:
                return
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


@contextlib.contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction on `conn` (opened with isolation_level=None) that takes the write
    lock up front (BEGIN IMMEDIATE), so what it reads cannot change before it writes;
    committed when the block ends, rolled back when it raises (if SQLite has not already)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")
