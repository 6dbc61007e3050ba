"""The approvals store: parked runs, the requests they wait on, grants, and used link tokens.

Two dialects of one store: SQLite (`ApprovalStore`, `$JARVIS_HOME/approvals.db`, private
0600 like every other store, one discipline: WAL, a busy timeout, `BEGIN IMMEDIATE` around
every read-then-write) and PostgreSQL (`jarvis.approvals.store_postgres`, in the scheduler's
ledger when `[scheduler] store` names one, so a Celery worker on another machine can continue
a run another machine parked). The statements are shared (`ApprovalStoreBase`); each dialect
supplies its connection, its placeholder and how it locks a parked run's row.

Every change of state is a compare-and-set, so it happens once whoever races:
- a request is decided once (`pending` -> `approved` / `denied`), a link token used once;
- a parked run becomes `ready` in the transaction that answers its last pending request
  (its row is locked first, so two answers at once cannot both see the other pending);
- a continuation claims the run (`ready` -> `resumed`, epoch + 1) once; writes of a
  continuation carry its epoch, so a stale one changes nothing;
- expiry moves `pending` requests past their time to `expired`, and their run with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from jarvis.approvals.records import (
    APPROVED,
    DENIED,
    EXPIRED,
    PARKED,
    PENDING,
    READY,
    RESUMED,
    Approval,
    Grant,
    ParkedRun,
)
from jarvis.errors import JarvisError, UserError

SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS {p}parked_runs (
        run_id TEXT PRIMARY KEY, status TEXT NOT NULL, resumer TEXT NOT NULL, task_id TEXT,
        sched_run_id BIGINT, created_at DOUBLE PRECISION, updated_at DOUBLE PRECISION,
        expires_at DOUBLE PRECISION, epoch INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL,
        state_bytes INTEGER, outcome TEXT
    );
    CREATE INDEX IF NOT EXISTS {p}parked_runs_status ON {p}parked_runs (status, expires_at);
    CREATE TABLE IF NOT EXISTS {p}approvals (
        id TEXT PRIMARY KEY, run_id TEXT NOT NULL, call_id TEXT, tool TEXT, kind TEXT,
        request TEXT NOT NULL, status TEXT NOT NULL, created_at DOUBLE PRECISION,
        expires_at DOUBLE PRECISION, decided_at DOUBLE PRECISION, decided_by TEXT, reason TEXT,
        grant_id TEXT, task_id TEXT, notified TEXT
    );
    CREATE INDEX IF NOT EXISTS {p}approvals_run ON {p}approvals (run_id);
    CREATE INDEX IF NOT EXISTS {p}approvals_status ON {p}approvals (status, expires_at);
    CREATE TABLE IF NOT EXISTS {p}grants (
        id TEXT PRIMARY KEY, tool TEXT NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL,
        task_id TEXT, created_at DOUBLE PRECISION, expires_at DOUBLE PRECISION,
        created_by TEXT, revoked_at DOUBLE PRECISION
    );
    CREATE TABLE IF NOT EXISTS {p}link_tokens (
        nonce TEXT PRIMARY KEY, approval_id TEXT NOT NULL, used_at DOUBLE PRECISION
    )
    """,
)
MAX_LIST = 1000


class ApprovalError(JarvisError):
    """A decision that cannot be made: the request is answered already, expired, or unknown
    (a UserError where the person named something wrong)."""

    exit_code = 1

    def __init__(self, message: str, approval: Approval | None = None) -> None:
        super().__init__(message)
        self.approval = approval


class TokenUsed(ApprovalError):
    """A link token that was used before (a replay)."""


def _clean(text: str | None, limit: int = 2000) -> str | None:
    """Text a person or a tool gave, as the store keeps it: bounded, no NUL, valid UTF-8."""
    if text is None:
        return None
    from jarvis.core.text import replace

    return replace(str(text)[:limit].replace("\x00", "\ufffd"))


def _dumps(value: Any) -> str:
    from jarvis.core.text import replace

    # A lone surrogate (a model's "\udc80") cannot be stored as UTF-8: it becomes U+FFFD.
    return replace(json.dumps(value, ensure_ascii=False, default=str))


def _approval(row: dict[str, Any]) -> Approval:
    return Approval(id=row["id"], run_id=row["run_id"], call_id=row["call_id"] or "",
                    tool=row["tool"] or "", kind=row["kind"] or "",
                    request=json.loads(row["request"]), status=row["status"],
                    created_at=row["created_at"] or 0.0, expires_at=row["expires_at"] or 0.0,
                    decided_at=row["decided_at"], decided_by=row["decided_by"],
                    reason=row["reason"], grant_id=row["grant_id"], task_id=row["task_id"],
                    notified=json.loads(row["notified"]) if row["notified"] else None)


def _parked(row: dict[str, Any], with_state: bool = True) -> ParkedRun:
    return ParkedRun(run_id=row["run_id"], state=json.loads(row["state"]) if with_state else {},
                     status=row["status"], resumer=row["resumer"], task_id=row["task_id"],
                     sched_run_id=row["sched_run_id"], created_at=row["created_at"] or 0.0,
                     updated_at=row["updated_at"] or 0.0, expires_at=row["expires_at"] or 0.0,
                     epoch=row["epoch"] or 0, state_bytes=row["state_bytes"] or 0,
                     outcome=row["outcome"])


def _grant(row: dict[str, Any]) -> Grant:
    return Grant(id=row["id"], tool=row["tool"], kind=row["kind"], value=row["value"],
                 task_id=row["task_id"], created_at=row["created_at"] or 0.0,
                 expires_at=row["expires_at"], created_by=row["created_by"] or "cli",
                 revoked_at=row["revoked_at"])


class ApprovalStoreBase:
    """The statements both dialects share (see the module docstring)."""

    PREFIX = ""  # table name prefix ("jarvis_" in the shared PostgreSQL ledger)
    MARK = "?"  # the driver's placeholder
    path: Any = None

    # --- the dialect's pieces --------------------------------------------------------------
    def _tx(self) -> contextlib.AbstractContextManager[Any]:
        """A write transaction yielding `execute(sql, params) -> rows (list of dicts)`."""
        raise NotImplementedError

    def _read(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _lock_run(self, tx: Any, run_id: str) -> None:
        """Lock the parked run's row until the transaction ends (SQLite: the whole file is
        locked by BEGIN IMMEDIATE already)."""

    def close(self) -> None:
        raise NotImplementedError

    def _sql(self, template: str) -> str:
        return template.format(p=self.PREFIX).replace("?", self.MARK)

    # --- parking ---------------------------------------------------------------------------
    def park(self, run: ParkedRun, approvals: list[Approval], *,
             epoch: int | None = None) -> ParkedRun | None:
        """Store a parked run and its requests in one transaction. A run parking for the
        first time is inserted (epoch 1); a continuation that parks again passes the `epoch`
        it holds and replaces the state only if that is still the run's (None: fenced)."""
        state = _dumps(run.state)
        run.state_bytes = len(state.encode("utf-8"))
        now = time.time()
        with self._tx() as tx:
            if epoch is None:
                run.epoch = 1
                tx(self._sql("INSERT INTO {p}parked_runs (run_id, status, resumer, task_id, "
                             "sched_run_id, created_at, updated_at, expires_at, epoch, state, "
                             "state_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)"),
                   (run.run_id, PARKED, run.resumer, run.task_id, run.sched_run_id,
                    run.created_at, now, run.expires_at, state, run.state_bytes))
            else:
                rows = tx(self._sql("UPDATE {p}parked_runs SET status = ?, state = ?, "
                                    "state_bytes = ?, expires_at = ?, updated_at = ?, "
                                    "epoch = epoch + 1, outcome = NULL WHERE run_id = ? AND "
                                    "status = ? AND epoch = ? RETURNING epoch"),
                          (PARKED, state, run.state_bytes, run.expires_at, now, run.run_id,
                           RESUMED, epoch))
                if not rows:
                    return None
                run.epoch = rows[0]["epoch"]
            for a in approvals:
                tx(self._sql("INSERT INTO {p}approvals (id, run_id, call_id, tool, kind, "
                             "request, status, created_at, expires_at, task_id) VALUES "
                             "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                   (a.id, run.run_id, a.call_id, a.tool, a.kind, _dumps(a.request), PENDING,
                    a.created_at, a.expires_at, a.task_id))
        run.status = PARKED
        return run

    def get_run(self, run_id: str, *, with_state: bool = True) -> ParkedRun | None:
        rows = self._read(self._sql("SELECT * FROM {p}parked_runs WHERE run_id = ?"), (run_id,))
        return _parked(rows[0], with_state) if rows else None

    def runs(self, run_ids: list[str]) -> dict[str, ParkedRun]:
        """The parked runs among `run_ids` (without their state), by id."""
        if not run_ids:
            return {}
        marks = ", ".join("?" * len(run_ids))
        rows = self._read(self._sql(f"SELECT * FROM {{p}}parked_runs WHERE run_id IN ({marks})"),
                          tuple(run_ids))
        return {r["run_id"]: _parked(r, with_state=False) for r in rows}

    def ready(self, resumer: str, limit: int = 50) -> list[ParkedRun]:
        """Runs of `resumer` whose requests are all answered (without their state), oldest
        first: what that resumer continues next."""
        rows = self._read(self._sql("SELECT * FROM {p}parked_runs WHERE status = ? AND "
                                    "resumer = ? ORDER BY updated_at LIMIT ?"),
                          (READY, resumer, max(1, min(int(limit), MAX_LIST))))
        return [_parked(r, with_state=False) for r in rows]

    def claim(self, run_id: str, *, again: bool = False) -> ParkedRun | None:
        """Take a run whose requests are all answered for its continuation: `ready` ->
        `resumed`, epoch + 1, once. `again`: also a run already `resumed` (the scheduler's
        ledger decided this continuation is the one: the earlier one died). None: it is not
        there to take (still waiting, taken, or expired)."""
        allowed = (READY, RESUMED) if again else (READY,)
        marks = ", ".join("?" * len(allowed))
        with self._tx() as tx:
            rows = tx(self._sql(f"UPDATE {{p}}parked_runs SET status = ?, epoch = epoch + 1, "
                                f"updated_at = ? WHERE run_id = ? AND status IN ({marks}) "
                                f"RETURNING *"), (RESUMED, time.time(), run_id, *allowed))
        return _parked(rows[0]) if rows else None

    def finish(self, run_id: str, epoch: int, outcome: str) -> bool:
        """Say how a continuation ended (only the continuation holding `epoch` can)."""
        with self._tx() as tx:
            rows = tx(self._sql("UPDATE {p}parked_runs SET outcome = ?, updated_at = ? WHERE "
                                "run_id = ? AND status = ? AND epoch = ? RETURNING run_id"),
                      (_clean(outcome, 200), time.time(), run_id, RESUMED, epoch))
        return bool(rows)

    # --- requests --------------------------------------------------------------------------
    def get(self, approval_id: str) -> Approval:
        """One request by id, or by a unique prefix of at least 4 characters (UserError)."""
        text = str(approval_id or "").strip().lower()
        if not (4 <= len(text) <= 64) or not all(c in "0123456789abcdef" for c in text):
            raise UserError(f"{str(approval_id)[:70]!r} is not an approval id (hexadecimal, "
                            f"as `jarvis approvals list` shows them)")
        rows = self._read(self._sql("SELECT * FROM {p}approvals WHERE id = ?"), (text,))
        if not rows:
            rows = self._read(self._sql("SELECT * FROM {p}approvals WHERE id LIKE ? ORDER BY "
                                        "created_at DESC LIMIT 5"), (text + "%",))
        if not rows:
            raise UserError(f"no approval request {text!r}; `jarvis approvals list` shows them")
        if len(rows) > 1:
            raise UserError(f"approval id prefix {text!r} is ambiguous: "
                            f"{', '.join(r['id'] for r in rows)}")
        return _approval(rows[0])

    def list(self, status: str | None = None, *, run_id: str | None = None,
             limit: int = 100) -> list[Approval]:
        """Requests, newest first (pending ones, or all with `status=None`)."""
        where, params = [], []
        if status:
            where.append("status = ?")
            params.append(status)
        if run_id:
            where.append("run_id = ?")
            params.append(run_id)
        sql = "SELECT * FROM {p}approvals" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY created_at DESC LIMIT ?"
        params.append(max(1, min(int(limit), MAX_LIST)))
        return [_approval(r) for r in self._read(self._sql(sql), tuple(params))]

    def of_run(self, run_id: str) -> list[Approval]:
        rows = self._read(self._sql("SELECT * FROM {p}approvals WHERE run_id = ? ORDER BY "
                                    "created_at"), (run_id,))
        return [_approval(r) for r in rows]

    def decide(self, approval_id: str, approve: bool, *, by: str, reason: str | None = None,
               grants: Sequence[Grant] = (), nonce: str | None = None,
               now: float | None = None) -> tuple[Approval, ParkedRun | None]:
        """Answer a pending request, once: (the request as decided, its run when this answer
        made it ready to continue). ApprovalError when it was answered already, expired, or
        (with a link token's `nonce`) the token was used before; the grants the person chose
        are stored in the same transaction."""
        now = now or time.time()
        approval = self.get(approval_id)
        status = APPROVED if approve else DENIED
        with self._tx() as tx:
            self._lock_run(tx, approval.run_id)
            if nonce is not None:
                used = tx(self._sql("INSERT INTO {p}link_tokens (nonce, approval_id, used_at) "
                                    "VALUES (?, ?, ?) ON CONFLICT (nonce) DO NOTHING "
                                    "RETURNING nonce"), (nonce, approval.id, now))
                if not used:
                    raise TokenUsed("this approval link was used already; a link works once",
                                    approval)
            rows = tx(self._sql("SELECT * FROM {p}approvals WHERE id = ?"), (approval.id,))
            current = _approval(rows[0])
            if current.status == PENDING and current.expires_at <= now:
                self._expire(tx, [current.run_id], now)
                raise ApprovalError(f"approval {current.id} expired at "
                                    f"{_when(current.expires_at)} before it was answered; its "
                                    f"run ended recorded 'expired'", current)
            if current.status != PENDING:
                raise ApprovalError(_answered(current), current)
            for grant in grants:
                self._insert_grant(tx, grant)
            granted = ",".join(g.id for g in grants) or None
            tx(self._sql("UPDATE {p}approvals SET status = ?, decided_at = ?, decided_by = ?, "
                         "reason = ?, grant_id = ? WHERE id = ? AND status = ?"),
               (status, now, _clean(by, 200), _clean(reason), granted, approval.id, PENDING))
            left = tx(self._sql("SELECT count(*) AS n FROM {p}approvals WHERE run_id = ? AND "
                                "status = ?"), (approval.run_id, PENDING))[0]["n"]
            ready = None
            if not left:
                rows = tx(self._sql("UPDATE {p}parked_runs SET status = ?, updated_at = ? "
                                    "WHERE run_id = ? AND status = ? RETURNING *"),
                          (READY, now, approval.run_id, PARKED))
                ready = _parked(rows[0], with_state=False) if rows else None
        current.status, current.decided_at, current.decided_by = status, now, by
        current.reason, current.grant_id = reason, granted
        return current, ready

    def mark_notified(self, approval_id: str, record: dict[str, Any]) -> None:
        with self._tx() as tx:
            tx(self._sql("UPDATE {p}approvals SET notified = ? WHERE id = ?"),
               (_dumps(record), approval_id))

    def expire_due(self, now: float | None = None) -> list[ParkedRun]:
        """Requests past their time become `expired`, and their runs (if still waiting) with
        them; returns those runs (their continuation: ending them recorded `expired`)."""
        now = now or time.time()
        due = self._read(self._sql("SELECT DISTINCT run_id FROM {p}approvals WHERE status = ? "
                                   "AND expires_at <= ?"), (PENDING, now))
        if not due:
            return []
        with self._tx() as tx:
            return self._expire(tx, [r["run_id"] for r in due], now)

    def _expire(self, tx: Any, run_ids: list[str], now: float) -> list[ParkedRun]:
        expired = []
        for run_id in run_ids:
            self._lock_run(tx, run_id)
            tx(self._sql("UPDATE {p}approvals SET status = ?, decided_at = ? WHERE run_id = ? "
                         "AND status = ? AND expires_at <= ?"), (EXPIRED, now, run_id, PENDING,
                                                                 now))
            rows = tx(self._sql("UPDATE {p}parked_runs SET status = ?, updated_at = ?, "
                                "outcome = ? WHERE run_id = ? AND status = ? RETURNING *"),
                      (EXPIRED, now, "expired: nobody answered in time", run_id, PARKED))
            expired.extend(_parked(r, with_state=False) for r in rows)
        return expired

    def expired_runs(self, run_ids: list[str]) -> list[str]:
        """Which of these runs have expired (their continuation ends them)."""
        return [r.run_id for r in self.runs(run_ids).values() if r.status == EXPIRED]

    # --- grants ----------------------------------------------------------------------------
    def add_grant(self, grant: Grant) -> Grant:
        with self._tx() as tx:
            self._insert_grant(tx, grant)
        return grant

    def _insert_grant(self, tx: Any, grant: Grant) -> None:
        tx(self._sql("INSERT INTO {p}grants (id, tool, kind, value, task_id, created_at, "
                     "expires_at, created_by) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
           (grant.id, grant.tool, grant.kind, grant.value, grant.task_id, grant.created_at,
            grant.expires_at, grant.created_by))

    def grants(self, *, include_inactive: bool = False) -> list[Grant]:
        rows = self._read(self._sql("SELECT * FROM {p}grants ORDER BY created_at"))
        found = [_grant(r) for r in rows]
        return found if include_inactive else [g for g in found if g.active()]

    def revoke_grant(self, grant_id: str) -> Grant:
        text = str(grant_id or "").strip().lower()
        with self._tx() as tx:
            rows = tx(self._sql("UPDATE {p}grants SET revoked_at = ? WHERE id = ? AND "
                                "revoked_at IS NULL RETURNING *"), (time.time(), text))
            if not rows:
                known = tx(self._sql("SELECT id FROM {p}grants WHERE id = ?"), (text,))
                raise UserError(f"grant {text[:40]!r} was revoked already" if known else
                                f"no grant {text[:40]!r}; `jarvis grants list` shows them")
        return _grant(rows[0])


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _answered(approval: Approval) -> str:
    if approval.status == EXPIRED:
        return f"approval {approval.id} expired before it was answered"
    by = f" by {approval.decided_by}" if approval.decided_by else ""
    at = f" at {_when(approval.decided_at)}" if approval.decided_at else ""
    return f"approval {approval.id} was {approval.status} already{by}{at}"


class ApprovalStore(ApprovalStoreBase):
    """The SQLite dialect (default: `$JARVIS_HOME/approvals.db`, or `[approvals] db_path`)."""

    def __init__(self, db_path: str | os.PathLike[str] | None = None, *,
                 busy_timeout: float = 15.0) -> None:
        from jarvis.core.paths import private_database, state_path

        path = state_path(db_path or None, "approvals.db")
        self.path = path
        try:
            info = path.stat() if path.exists() else None
            if info is not None and info.st_uid != os.geteuid():
                raise UserError(f"{path} belongs to another user (uid {info.st_uid}): its "
                                f"approval requests are theirs to answer")
            private_database(path)
            conn = sqlite3.connect(str(path), timeout=busy_timeout, check_same_thread=False,
                                   isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise UserError(f"cannot open the approvals database {path}: "
                            f"{getattr(exc, 'strerror', None) or exc}") from None
        self._conn = conn
        self._lock = threading.RLock()
        try:
            from jarvis.core.sqlite_wal import enter_wal

            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            enter_wal(conn, busy_timeout)
            conn.execute("PRAGMA synchronous = NORMAL")
            with self._tx() as tx:
                if conn.execute("PRAGMA user_version").fetchone()[0] < 1:
                    for statement in filter(str.strip, SCHEMA[0].split(";")):
                        tx(self._sql(statement))
                    conn.execute("PRAGMA user_version = 1")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise UserError(f"cannot use the approvals database {path}: {exc}; move it away "
                            f"(a new one is made) or set [approvals] db_path") from None

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        from jarvis.core.sqlite_wal import immediate

        with self._lock, immediate(self._conn) as conn:

            def execute(sql: str, params: tuple = ()) -> list[dict[str, Any]]:
                cursor = conn.execute(sql, params)
                if cursor.description is None:
                    return []
                cols = [d[0] for d in cursor.description]
                return [dict(zip(cols, row, strict=True)) for row in cursor.fetchall()]

            yield execute

    def _read(self, sql: str, params: tuple = ()) -> list[dict[str, Any]]:
        with self._lock:
            cursor = self._conn.execute(sql, params)
            cols = [d[0] for d in cursor.description]
            return [dict(zip(cols, row, strict=True)) for row in cursor.fetchall()]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
