"""The approvals store in PostgreSQL: the scheduler's shared ledger (`[scheduler] store =
"postgresql://..."`), tables prefixed `jarvis_` beside the scheduler's, so a run one machine
parked can be continued by a Celery worker on another (jarvis.approvals.store has the
statements; this is the connection, the placeholder and the row lock). psycopg is imported
when a store is opened, never by `import jarvis`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from jarvis.approvals.store import SCHEMA, ApprovalStoreBase
from jarvis.errors import JarvisError, UserError

_SCHEMA_LOCK = 0x6A61727669730010  # pg_advisory_xact_lock key: "jarvis" + 16


class StoreUnavailable(JarvisError):
    """The shared ledger could not be reached (network, server down)."""


class PostgresApprovalStore(ApprovalStoreBase):
    """One connection per process, shared by its threads (like the scheduler's store)."""

    PREFIX = "jarvis_"
    MARK = "%s"

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        try:
            import psycopg
        except ImportError:
            raise UserError("the PostgreSQL approvals store needs psycopg: "
                            "pip install 'jarvis[postgres]'") from None
        from jarvis.security.redact import redact_url

        self._psycopg = psycopg
        self.url = url
        self.path = redact_url(url)
        self.connect_timeout = connect_timeout
        self._lock = threading.RLock()
        self._conn: Any = None
        self._pid = 0
        with self._tx() as tx:
            tx("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in filter(str.strip, SCHEMA[0].split(";")):
                tx(self._sql(statement))

    def _connection(self) -> Any:
        if self._conn is not None and self._pid != os.getpid():
            self._conn = None  # inherited over fork: never touch the parent's socket
        if self._conn is None or self._conn.closed:
            from psycopg.rows import dict_row

            try:
                self._conn = self._psycopg.connect(
                    self.url, autocommit=True, row_factory=dict_row,
                    connect_timeout=max(1, int(self.connect_timeout)))
            except self._psycopg.Error as exc:
                raise StoreUnavailable(f"cannot connect to the approvals store {self.path}: "
                                       f"{self._said(exc)}") from None
            self._pid = os.getpid()
        return self._conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        psycopg = self._psycopg
        with self._lock:
            conn = self._connection()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    def execute(sql: str, params: tuple = ()) -> list[dict[str, Any]]:
                        cur.execute(sql, params)
                        return list(cur.fetchall()) if cur.description else []

                    yield execute
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                with contextlib.suppress(Exception):
                    conn.close()
                self._conn = None
                raise StoreUnavailable(f"the approvals store {self.path} failed: "
                                       f"{self._said(exc)}") from None

    def _said(self, exc: BaseException) -> str:
        """The driver's error on one line, without the URL's password."""
        from urllib.parse import urlsplit

        text = " ".join(str(exc).split())[:500]
        password = urlsplit(self.url).password
        return text.replace(password, "***") if password else text

    def _read(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        with self._tx() as tx:
            return tx(sql, params)

    def _lock_run(self, tx: Any, run_id: str) -> None:
        tx("SELECT run_id FROM jarvis_parked_runs WHERE run_id = %s FOR UPDATE", (run_id,))

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                with contextlib.suppress(Exception):
                    self._conn.close()
            self._conn = None
