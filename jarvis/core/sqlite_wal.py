"""Switching a SQLite file to WAL mode when several processes may open it at once."""

from __future__ import annotations

import sqlite3
import time


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
