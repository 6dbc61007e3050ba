"""PostgresStore: the scheduler's ledger in PostgreSQL, shared by daemons and workers on
several machines (`[scheduler] store = "postgresql://user@host:port/db"`, `jarvis[postgres]`).

The same records, policies and plain queries as the SQLite store (jarvis.scheduler.store;
both build on jarvis.scheduler.store_common), with PostgreSQL's tools for concurrency instead
of one file lock, so claims, leases and finishes are this module's own:
- claims lock the rows they take with `SELECT ... FOR UPDATE SKIP LOCKED`, so daemons never
  wait on each other, and every task row is locked before one of its runs is started;
- new runs are `INSERT ... ON CONFLICT DO NOTHING` on the unique (task, occurrence, attempt)
  key: an occurrence is recorded once whoever claims it;
- leases are measured on the database clock (`now()`), so hosts with skewed clocks agree on
  when a lease expired;
- runs sent to Celery workers are fenced by an epoch (see jarvis.scheduler.ledger.DispatchLedger).
Schema changes go through numbered migrations, applied under an advisory lock.

Tables are prefixed `jarvis_` so the ledger can share a database with other things.
psycopg is imported when a store is opened, never by `import jarvis`.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from jarvis.errors import UserError
from jarvis.scheduler.addresses import redact, redact_error
from jarvis.scheduler.records import Run, Task, finished_status
from jarvis.scheduler.store_common import (
    FINISHED,
    MAX_ANSWER_CHARS,
    MAX_ERROR_CHARS,
    Claim,
    StoreBase,
    StoreUnavailable,
    TaskBusyError,
    TaskIdTaken,
    TaskNotFoundError,
    _clip,
    _run,
    _task,
    _task_row,
    plan_claim,
    quota_refused,
    storable,
)
from jarvis.scheduler.store_postgres_parked import NOW, PostgresParkedRuns

# A task with a run in one of these is not started again ("parked": waiting for the person).
ACTIVE = "('running', 'dispatched', 'parked')"
MAX_LOG_ENTRY_CHARS = 1_000_000

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE jarvis_tasks (
        id text PRIMARY KEY, prompt text NOT NULL, schedule_type text NOT NULL,
        schedule_value text NOT NULL, timezone text, agent text, tools text,
        approved_tools text, status text NOT NULL, next_run float8, last_run float8,
        last_outcome text, created_at float8, updated_at float8, anchor float8,
        timeout_seconds float8, max_retries integer, retry_backoff_seconds float8,
        on_crash text, grace_seconds float8, metadata text
    );
    CREATE INDEX jarvis_tasks_due ON jarvis_tasks (status, next_run);
    CREATE TABLE jarvis_runs (
        id bigserial PRIMARY KEY, task_id text NOT NULL, scheduled_for float8 NOT NULL,
        attempt integer NOT NULL, status text NOT NULL, trigger text, run_after float8,
        claimed_by text, lease_until float8, started_at float8, finished_at float8,
        answer text, error text, error_type text, run_log_id text,
        skipped_count integer NOT NULL DEFAULT 0, skipped_until float8,
        epoch integer NOT NULL DEFAULT 0, dispatched_at float8,
        CONSTRAINT jarvis_runs_occurrence UNIQUE (task_id, scheduled_for, attempt)
    );
    CREATE INDEX jarvis_runs_task_status ON jarvis_runs (task_id, status);
    CREATE INDEX jarvis_runs_pending ON jarvis_runs (status, run_after);
    CREATE INDEX jarvis_runs_leases ON jarvis_runs (status, lease_until)
        WHERE status IN ('running', 'dispatched');
    -- Run log entries of runs done on workers, so any machine sharing the ledger can read them.
    CREATE TABLE jarvis_run_logs (
        id text PRIMARY KEY, run_id bigint, created_at float8, entry text NOT NULL
    );
    """,
    # Result delivery to channels: the task's channel, and how each run's delivery went.
    """
    ALTER TABLE jarvis_tasks ADD COLUMN notify text;
    ALTER TABLE jarvis_runs ADD COLUMN delivery text;
    """,
    # What the run that created a task had read (docs/trust.md).
    """
    ALTER TABLE jarvis_tasks ADD COLUMN trust text;
    """,
    # Fencing side effects and dispatch without storms: when a dispatched run's message was
    # really sent (NULL: claimed, never sent), and the side effects of scheduled runs.
    """
    ALTER TABLE jarvis_runs ADD COLUMN sent_at float8;
    CREATE TABLE jarvis_effects (
        key text PRIMARY KEY, run_id bigint, attempt integer NOT NULL,
        epoch integer NOT NULL DEFAULT 0, tool text NOT NULL, target text, status text NOT NULL,
        detail text, created_at float8, updated_at float8
    );
    CREATE INDEX jarvis_effects_run ON jarvis_effects (run_id);
    """,
    # Runs that park waiting for the person (jarvis.approvals).
    """
    ALTER TABLE jarvis_runs ADD COLUMN parked_at float8;
    ALTER TABLE jarvis_runs ADD COLUMN resumes integer NOT NULL DEFAULT 0;
    """,
    # The workspace (config.toml) a task was created in: its runs use that config (issue 25;
    # after 3, 4 and 5, so a ledger upgraded by main still upgrades).
    """
    ALTER TABLE jarvis_tasks ADD COLUMN workspace text;
    """,
)
_MIGRATION_LOCK = 0x6A61727669730001  # pg_advisory_xact_lock key: "jarvis" + 1
_QUOTA_LOCK = 0x6A61727669730002  # serializes quota-checked task inserts


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UserError("the PostgreSQL scheduler store needs psycopg: "
                        "pip install 'jarvis[postgres]'") from None
    return psycopg


def _slim_entry(entry: dict[str, Any], size: int) -> str:
    """A run log entry too big for the ledger: without its transcript (and, if that is not
    enough, without its tool calls' contents), saying so; the worker's run log has it all."""
    note = (f"cut for the ledger: the entry has {size} characters, over {MAX_LOG_ENTRY_CHARS}; "
            f"the worker's own run log (`jarvis runs show`) has all of it")
    slim = {k: v for k, v in entry.items() if k != "messages"}
    slim["omitted"] = "messages; " + note
    text = json.dumps(slim, ensure_ascii=False, default=str)
    if len(text) > MAX_LOG_ENTRY_CHARS:
        slim["tool_calls"] = [{k: c.get(k) for k in ("tool_name", "success", "error_type")}
                              for c in entry.get("tool_calls") or []][:1000]
        slim["query"] = str(entry.get("query") or "")[:10_000]
        slim["content"] = str(entry.get("content") or "")[:100_000]
        slim["omitted"] = "messages, tool call arguments and results; " + note
        text = json.dumps(slim, ensure_ascii=False, default=str)
    return text


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class PostgresStore(PostgresParkedRuns, StoreBase):
    """Tasks and runs in PostgreSQL; one connection per process, shared by its threads."""

    TASKS, RUNS, EFFECTS, MARK = "jarvis_tasks", "jarvis_runs", "jarvis_effects", "%s"
    TASK_ORDER = "created_at, id"

    def __init__(self, url: str, *, connect_timeout: float = 10.0) -> None:
        self._psycopg = _psycopg()
        self.url = url
        self.path = redact(url)
        self.connect_timeout = connect_timeout
        self._lock = threading.RLock()
        self._conn: Any = None
        self._pid = 0
        self._migrate()

    # --- plumbing ----------------------------------------------------------------------
    def _connection(self) -> Any:
        if self._conn is not None and self._pid != os.getpid():
            # Inherited over fork (a Celery prefork child): never touch the parent's socket.
            self._conn = None
        if self._conn is None or self._conn.closed:
            from psycopg.rows import dict_row

            try:
                self._conn = self._psycopg.connect(self.url, autocommit=True, row_factory=dict_row,
                                                   connect_timeout=max(1, int(self.connect_timeout)))
            except self._psycopg.Error as exc:
                raise StoreUnavailable(f"cannot connect to the scheduler store {self.path}: "
                                       f"{redact_error(_one_line(exc), self.url)}") from None
            self._pid = os.getpid()
        return self._conn

    @contextlib.contextmanager
    def _tx(self) -> Iterator[Any]:
        """A transaction and a cursor on it; a lost connection becomes StoreUnavailable and is
        re-opened by the next call."""
        psycopg = self._psycopg
        with self._lock:
            conn = self._connection()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                with contextlib.suppress(Exception):
                    conn.close()
                self._conn = None
                raise StoreUnavailable(f"the scheduler store {self.path} failed: "
                                       f"{redact_error(_one_line(exc), self.url)}") from None

    _write = _tx

    def _query(self, sql: str, params: tuple | dict = ()) -> list[dict[str, Any]]:
        with self._tx() as cur:
            cur.execute(sql, params)
            return list(cur.fetchall()) if cur.description else []

    def _migrate(self) -> None:
        with self._tx() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            cur.execute("CREATE TABLE IF NOT EXISTS jarvis_schema (version integer NOT NULL)")
            cur.execute("SELECT version FROM jarvis_schema")
            row = cur.fetchone()
            version = row["version"] if row else 0
            if row is None:
                cur.execute("INSERT INTO jarvis_schema (version) VALUES (0)")
            for number, script in enumerate(MIGRATIONS, start=1):
                if version < number:
                    cur.execute(script)
                    cur.execute("UPDATE jarvis_schema SET version = %s", (number,))

    @property
    def schema_version(self) -> int:
        return self._query("SELECT version FROM jarvis_schema")[0]["version"]

    def db_now(self) -> float:
        """The database clock (what leases are measured with)."""
        return self._query(f"SELECT {NOW} AS t")[0]["t"]

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                with contextlib.suppress(Exception):
                    self._conn.close()
            self._conn = None

    # --- tasks -------------------------------------------------------------------------
    def add_task(self, task: Task, *, max_live: int | None = None) -> Task:
        """Store a new task. With `max_live`, refuse (QuotaError) when its creator (metadata
        created_by) already has that many active or paused tasks; counted under a lock that
        every such insert takes, so concurrent creators cannot overshoot."""
        row = _task_row(task)
        row["updated_at"] = task.created_at
        names = ", ".join(row)
        marks = ", ".join(f"%({k})s" for k in row)
        with self._tx() as cur:
            if max_live is not None:
                creator = (task.metadata or {}).get("created_by", "person")
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (_QUOTA_LOCK,))
                cur.execute("SELECT count(*) AS n FROM jarvis_tasks WHERE status IN ('active', "
                            "'paused') AND coalesce(metadata::jsonb ->> 'created_by', 'person') "
                            "= %s", (creator,))
                live = cur.fetchone()["n"]
                if live >= max_live:
                    raise quota_refused(live, max_live)
            cur.execute(f"INSERT INTO jarvis_tasks ({names}) VALUES ({marks}) "
                        f"ON CONFLICT (id) DO NOTHING", row)
            if cur.rowcount != 1:
                raise TaskIdTaken(f"task id {task.id} is taken")
        return task

    def _locked_task(self, cur: Any, task_id: str, *, skip_locked: bool = False) -> Task | None:
        """The task with its row locked until the transaction ends (None: no such task, or
        with `skip_locked`, another transaction holds it)."""
        cur.execute("SELECT * FROM jarvis_tasks WHERE id = %s FOR UPDATE"
                    + (" SKIP LOCKED" if skip_locked else ""), (task_id,))
        row = cur.fetchone()
        return None if row is None else _task(row)

    def _delete_runs(self, run_ids: list[int]) -> int:
        with self._tx() as cur:
            cur.execute(f"DELETE FROM jarvis_runs WHERE id = ANY(%s) AND {FINISHED}", (run_ids,))
            deleted = cur.rowcount
            cur.execute("DELETE FROM jarvis_run_logs WHERE run_id = ANY(%s)", (run_ids,))
            cur.execute("DELETE FROM jarvis_effects WHERE run_id = ANY(%s) AND NOT EXISTS "
                        "(SELECT 1 FROM jarvis_runs r WHERE r.id = jarvis_effects.run_id)",
                        (run_ids,))
        return deleted

    def _holds(self, cur: Any, run_id: int, epoch: int, owner: str | None) -> bool:
        cur.execute("SELECT 1 FROM jarvis_runs WHERE id = %s AND epoch = %s AND claimed_by = %s "
                    "AND status = 'running'", (run_id, epoch, owner))
        return cur.fetchone() is not None

    # --- runs --------------------------------------------------------------------------
    def next_wake(self) -> float | None:
        """When something next becomes due (a task occurrence or a queued retry)."""
        rows = self._query(
            "SELECT min(t) AS t FROM ("
            "(SELECT next_run AS t FROM jarvis_tasks WHERE status = 'active' AND next_run IS "
            f"NOT NULL AND NOT EXISTS (SELECT 1 FROM jarvis_runs r WHERE r.task_id = "
            f"jarvis_tasks.id AND r.status IN {ACTIVE}) ORDER BY next_run LIMIT 1) UNION ALL "
            "(SELECT run_after AS t FROM jarvis_runs WHERE status = 'pending' AND NOT EXISTS "
            "(SELECT 1 FROM jarvis_runs r WHERE r.task_id = jarvis_runs.task_id AND r.status "
            f"IN {ACTIVE}) ORDER BY run_after LIMIT 1)) due")
        return rows[0]["t"] if rows else None

    def claim_due(self, *, now: float, owner: str, lease_seconds: float, limit: int,
                  default_grace: float) -> list[Claim]:
        """Claim up to `limit` due occurrences and queued retries to run in this process."""
        return self._claim(now=now, owner=owner, seconds=lease_seconds, limit=limit,
                           default_grace=default_grace, dispatch=False)

    def claim_for_dispatch(self, *, now: float, owner: str, dispatch_seconds: float, limit: int,
                           default_grace: float) -> list[Claim]:
        """Claim up to `limit` due runs as "dispatched" (epoch 1) for workers; one not started
        by a worker within `dispatch_seconds` is sent again (`redispatch_expired`)."""
        return self._claim(now=now, owner=owner, seconds=dispatch_seconds, limit=limit,
                           default_grace=default_grace, dispatch=True)

    def _claim(self, *, now: float, owner: str, seconds: float, limit: int,
               default_grace: float, dispatch: bool) -> list[Claim]:
        claims: list[Claim] = []
        if limit <= 0:
            return claims
        with self._tx() as cur:
            cur.execute("SELECT * FROM jarvis_runs WHERE status = 'pending' AND run_after <= %s "
                        "ORDER BY run_after LIMIT %s FOR UPDATE SKIP LOCKED", (now, limit))
            for row in cur.fetchall():
                if len(claims) >= limit or any(c.task.id == row["task_id"] for c in claims):
                    continue  # one run per task at a time
                task = self._startable(cur, row["task_id"])
                if task is None:
                    continue
                run = self._take(cur, row["id"], owner=owner, now=now, seconds=seconds,
                                 dispatch=dispatch)
                cur.execute("UPDATE jarvis_tasks SET last_run = %s, updated_at = %s WHERE id = %s",
                            (now, now, task.id))
                claims.append(Claim(task, run))
            room = limit - len(claims)
            if room <= 0:
                return claims
            cur.execute(
                "SELECT * FROM jarvis_tasks WHERE status = 'active' AND next_run <= %s AND NOT "
                f"EXISTS (SELECT 1 FROM jarvis_runs r WHERE r.task_id = jarvis_tasks.id AND "
                f"r.status IN {ACTIVE}) ORDER BY next_run LIMIT %s FOR UPDATE SKIP LOCKED",
                (now, room + len(claims)))
            taken = {c.task.id for c in claims}
            candidates = [_task(r) for r in cur.fetchall() if r["id"] not in taken]
            if candidates:
                # A fresh statement sees runs committed while we waited for the row locks.
                cur.execute(f"SELECT DISTINCT task_id FROM jarvis_runs WHERE task_id = ANY(%s) "
                            f"AND status IN {ACTIVE}", ([t.id for t in candidates],))
                busy = {r["task_id"] for r in cur.fetchall()}
                ready = [t for t in candidates if t.id not in busy][:room]
                claims += self._claim_tasks(cur, ready, now=now, owner=owner, seconds=seconds,
                                            default_grace=default_grace, dispatch=dispatch)
        return claims

    def _startable(self, cur: Any, task_id: str) -> Task | None:
        """The task, locked, if no run of it is going; else None (skip it this time)."""
        task = self._locked_task(cur, task_id, skip_locked=True)
        if task is None:
            return None
        # A fresh statement sees runs committed while we waited for the lock.
        cur.execute(f"SELECT 1 FROM jarvis_runs WHERE task_id = %s AND status IN {ACTIVE} LIMIT 1",
                    (task_id,))
        return None if cur.fetchone() else task

    def _take(self, cur: Any, run_id: int, *, owner: str, now: float, seconds: float,
              dispatch: bool) -> Run:
        if dispatch:
            cur.execute(f"UPDATE jarvis_runs SET status = 'dispatched', epoch = epoch + 1, "
                        f"claimed_by = %s, lease_until = {NOW} + %s, dispatched_at = {NOW}, "
                        f"sent_at = NULL WHERE id = %s RETURNING *", (owner, seconds, run_id))
        else:
            cur.execute(f"UPDATE jarvis_runs SET status = 'running', claimed_by = %s, "
                        f"lease_until = {NOW} + %s, started_at = %s WHERE id = %s RETURNING *",
                        (owner, seconds, now, run_id))
        return _run(cur.fetchone())

    def _claim_tasks(self, cur: Any, tasks: list[Task], *, now: float, owner: str,
                     seconds: float, default_grace: float, dispatch: bool) -> list[Claim]:
        """Claim the latest due occurrence of each (locked, idle) task in a few set-based
        statements (a round trip per task would cost ~0.3 ms each under load)."""
        plans, skipped_rows, run_rows = [], [], []
        for task in tasks:
            plan = plan_claim(task, now, default_grace)
            if plan.skipped:
                skipped_rows.append((task.id, plan.skipped_from, now, plan.skipped_error,
                                     plan.skipped, plan.skipped_to))
            if plan.run_at is not None:
                run_rows.append((task.id, plan.run_at))
            plans.append((task, plan))
        if skipped_rows:
            cur.executemany(
                "INSERT INTO jarvis_runs (task_id, scheduled_for, attempt, status, trigger, "
                "finished_at, error, error_type, skipped_count, skipped_until) "
                "VALUES (%s, %s, 1, 'skipped', 'schedule', %s, %s, 'missed', %s, %s) "
                "ON CONFLICT ON CONSTRAINT jarvis_runs_occurrence DO NOTHING", skipped_rows)
        started: dict[str, Run] = {}
        if run_rows:
            # One set-based statement for all the runs, one for all the tasks.
            ids, times = [r[0] for r in run_rows], [r[1] for r in run_rows]
            if dispatch:
                cur.execute(
                    "INSERT INTO jarvis_runs (task_id, scheduled_for, attempt, status, trigger, "
                    "claimed_by, lease_until, dispatched_at, epoch) SELECT u.t, u.s, 1, "
                    f"'dispatched', 'schedule', %s, {NOW} + %s, {NOW}, 1 FROM "
                    "unnest(%s::text[], %s::float8[]) AS u(t, s) "
                    "ON CONFLICT ON CONSTRAINT jarvis_runs_occurrence DO NOTHING RETURNING *",
                    (owner, seconds, ids, times))
            else:
                cur.execute(
                    "INSERT INTO jarvis_runs (task_id, scheduled_for, attempt, status, trigger, "
                    "claimed_by, lease_until, started_at) SELECT u.t, u.s, 1, 'running', "
                    f"'schedule', %s, {NOW} + %s, %s FROM unnest(%s::text[], %s::float8[]) "
                    "AS u(t, s) ON CONFLICT ON CONSTRAINT jarvis_runs_occurrence DO NOTHING "
                    "RETURNING *", (owner, seconds, now, ids, times))
            # No row for a task: this occurrence was already recorded (clock moved back, or
            # the task was resumed): it never runs twice.
            for row in cur.fetchall():
                started[row["task_id"]] = _run(row)
        updates: list[list[Any]] = [[], [], [], [], []]
        claims = []
        for task, plan in plans:
            run = started.get(task.id) if plan.run_at is not None else None
            if run is not None:
                claims.append(Claim(task, run))
            status, outcome = plan.task_after(task, started=run is not None)
            for column, value in zip(updates, (task.id, plan.catch_up.next_run, status, outcome,
                                               run is not None), strict=True):
                column.append(value)
        if plans:
            cur.execute(
                "UPDATE jarvis_tasks t SET next_run = u.n, status = u.st, last_outcome = u.o, "
                "last_run = CASE WHEN u.c THEN %s ELSE t.last_run END, updated_at = %s "
                "FROM unnest(%s::text[], %s::float8[], %s::text[], %s::text[], %s::bool[]) "
                "AS u(id, n, st, o, c) WHERE t.id = u.id", (now, now, *updates))
        return claims

    def claim_manual(self, task: Task, *, now: float, owner: str, lease_seconds: float) -> Claim:
        """Claim a run of `task` right now, outside its schedule (`jarvis schedule run`).

        Raises TaskBusyError while a run of the task is going on or sent to a worker (the same
        no-overlap rule as scheduled runs): checked under the task's row lock, which every
        claimer of the task takes, in the transaction that inserts the run."""
        with self._tx() as cur:
            if self._locked_task(cur, task.id) is None:
                raise TaskNotFoundError(task.id)
            cur.execute(f"SELECT * FROM jarvis_runs WHERE task_id = %s AND status IN {ACTIVE} "
                        f"ORDER BY id LIMIT 1", (task.id,))
            busy = cur.fetchone()
            if busy is not None:
                raise TaskBusyError(task.id, _run(busy))
            cur.execute(
                "INSERT INTO jarvis_runs (task_id, scheduled_for, attempt, status, trigger, "
                f"claimed_by, lease_until, started_at) VALUES (%s, %s, 1, 'running', 'manual', "
                f"%s, {NOW} + %s, %s) RETURNING *", (task.id, now, owner, lease_seconds, now))
            run = _run(cur.fetchone())
            cur.execute("UPDATE jarvis_tasks SET last_run = %s, updated_at = %s WHERE id = %s",
                        (now, now, task.id))
            return Claim(task, run)

    def heartbeat(self, owner: str, lease_until: float) -> int:
        """Extend the lease of every run `owner` holds, measured on the database clock (the
        caller's `lease_until` only says how long from now)."""
        seconds = max(1.0, lease_until - time.time())
        with self._tx() as cur:
            cur.execute(f"UPDATE jarvis_runs SET lease_until = {NOW} + %s WHERE claimed_by = %s "
                        "AND status = 'running'", (seconds, owner))
            return cur.rowcount

    def finish_run(self, run_id: int, owner: str, *, now: float, success: bool,
                   answer: str | None = None, error: str | None = None,
                   error_type: str | None = None, run_log_id: str | None = None,
                   retry: bool = True) -> Run | None:
        """Record the end of a run this owner holds (None: it is no longer ours)."""
        with self._tx() as cur:
            return self._finish(cur, "id = %s AND claimed_by = %s", (run_id, owner), now=now,
                                success=success, answer=answer, error=error,
                                error_type=error_type, run_log_id=run_log_id, retry=retry)

    def _finish(self, cur: Any, where: str, params: tuple, *, now: float | None, success: bool,
                answer: str | None, error: str | None, error_type: str | None,
                run_log_id: str | None, retry: bool,
                min_retry_delay: float = 0.0) -> Run | None:
        status = finished_status(success, error_type)
        finished = "%s" if now is not None else NOW
        values: tuple = (status,) + ((now,) if now is not None else ())
        cur.execute(
            f"UPDATE jarvis_runs SET status = %s, finished_at = {finished}, answer = %s, "
            f"error = %s, error_type = %s, run_log_id = %s, lease_until = NULL "
            f"WHERE {where} AND status = 'running' RETURNING *",
            values + (_clip(answer, MAX_ANSWER_CHARS), _clip(error, MAX_ERROR_CHARS),
                      error_type, run_log_id) + params)
        row = cur.fetchone()
        if row is None:
            return None
        run = _run(row)
        self._after_attempt(cur, run, now=run.finished_at or time.time(),
                            retry=retry and status == "failed", crashed=False,
                            min_retry_delay=min_retry_delay)
        return run

    def recover(self, *, now: float, **_: Any) -> list[Run]:
        """Record runs whose lease expired on the database clock as failed ("crashed") and
        apply each task's on_crash policy. Process liveness is never judged from here: the
        owner may be on another machine or in another PID namespace."""
        recovered: list[Run] = []
        with self._tx() as cur:
            cur.execute(f"SELECT id FROM jarvis_runs WHERE status = 'running' AND lease_until < "
                        f"{NOW} ORDER BY id FOR UPDATE SKIP LOCKED")
            for row in cur.fetchall():
                if self._repark(cur, row["id"]):
                    cur.execute("SELECT * FROM jarvis_runs WHERE id = %s", (row["id"],))
                    recovered.append(_run(cur.fetchone()))
                    continue
                cur.execute(
                    "UPDATE jarvis_runs SET status = 'failed', finished_at = %s, epoch = epoch + 1, "
                    "error_type = 'crashed', error = 'interrupted: ' || coalesce(claimed_by, '?') "
                    "|| ' stopped renewing its lease during this run (its process or machine "
                    "died); nothing was recorded from it', lease_until = NULL "
                    "WHERE id = %s RETURNING *", (now, row["id"]))
                run = _run(cur.fetchone())
                self._after_attempt(cur, run, now=now, retry=True, crashed=True)
                recovered.append(run)
        return recovered

    def record_delivery(self, run_id: int, delivery: dict[str, Any]) -> Run:
        """Store how sending a finished run to its task's channel went."""
        with self._tx() as cur:
            cur.execute("UPDATE jarvis_runs SET delivery = %s WHERE id = %s RETURNING *",
                        (json.dumps(delivery, default=str), run_id))
            row = cur.fetchone()
        if row is None:
            raise UserError(f"no run with id {run_id}")
        return _run(row)

    def interrupt(self, run_id: int, owner: str, *, now: float, reason: str) -> Run | None:
        """Give up a run this owner holds (shutdown before it ended); on_crash policy applies."""
        with self._tx() as cur:
            cur.execute(
                "UPDATE jarvis_runs SET status = 'failed', finished_at = %s, error_type = "
                "'interrupted', error = %s, lease_until = NULL WHERE id = %s AND claimed_by = %s "
                "AND status = 'running' RETURNING *", (now, reason, run_id, owner))
            row = cur.fetchone()
            if row is None:
                return None
            run = _run(row)
            self._after_attempt(cur, run, now=now, retry=True, crashed=True)
            return run

    # --- dispatch to workers (DispatchLedger) -----------------------------------------
    def mark_sent(self, runs: list[tuple[int, int]]) -> int:
        """Record that the messages of these (run id, epoch) were handed to the broker: from
        then on a run is only sent again on evidence that its message was lost."""
        if not runs:
            return 0
        with self._tx() as cur:
            cur.execute(f"UPDATE jarvis_runs r SET sent_at = {NOW} FROM unnest(%s::bigint[], "
                        f"%s::integer[]) AS u(id, e) WHERE r.id = u.id AND r.epoch = u.e AND "
                        f"r.status = 'dispatched'", ([r for r, _ in runs], [e for _, e in runs]))
            return cur.rowcount

    def redispatch_expired(self, *, owner: str, dispatch_seconds: float, limit: int,
                           unsent_seconds: float = 10.0,
                           lost_after: float | None = None) -> list[Claim]:
        """Dispatched runs to send again, with the next epoch, oldest occurrence first:
        - claimed and never sent for `unsent_seconds` (the daemon died between claim and
          send, or the broker refused the message);
        - past their dispatch deadline (`lease_until`, set to `dispatch_seconds` from the
          claim: the long safety net; their old message has expired in the broker by then);
        - with `lost_after` (the caller saw the broker's queue empty: nothing is waiting in
          it), sent more than `lost_after` seconds ago and still not started: lost.
        A run still waiting in a backlog is left alone: it keeps its place in the queue.
        Nothing ran these runs, so this is not a re-run: the old message, if it still comes,
        is dropped by its epoch."""
        with self._tx() as cur:
            cur.execute(
                f"WITH old AS (SELECT id, sent_at FROM jarvis_runs WHERE status = 'dispatched' "
                f"AND ((sent_at IS NULL AND dispatched_at < {NOW} - %(unsent)s) OR lease_until "
                f"< {NOW} OR (%(lost)s::float8 IS NOT NULL AND sent_at < {NOW} - %(lost)s)) "
                f"ORDER BY scheduled_for, id LIMIT %(limit)s FOR UPDATE SKIP LOCKED) "
                f"UPDATE jarvis_runs r SET epoch = r.epoch + 1, claimed_by = %(owner)s, "
                f"lease_until = {NOW} + %(deadline)s, dispatched_at = {NOW}, sent_at = NULL "
                f"FROM old WHERE r.id = old.id RETURNING r.*, old.sent_at AS was_sent_at",
                {"unsent": unsent_seconds, "lost": lost_after, "limit": limit, "owner": owner,
                 "deadline": dispatch_seconds})
            rows = sorted(cur.fetchall(), key=lambda r: (r["scheduled_for"], r["id"]))
            claims = []
            for row in rows:
                run = _run(row)
                cur.execute("SELECT * FROM jarvis_tasks WHERE id = %s", (run.task_id,))
                task_row = cur.fetchone()
                if task_row is None:
                    continue
                if row["was_sent_at"] is None:
                    note = "it was claimed but never sent (its daemon stopped in between)"
                elif lost_after is not None and row["was_sent_at"] < row["dispatched_at"] - lost_after:
                    note = (f"its message was sent {row['dispatched_at'] - row['was_sent_at']:.0f} "
                            f"s ago and nothing is waiting in the queue: it was lost")
                else:
                    note = (f"no worker started it within {dispatch_seconds:g} s (its message "
                            f"has expired)")
                claims.append(Claim(_task(task_row), run, note))
            return claims

    def start_dispatched(self, run_id: int, epoch: int, owner: str,
                         lease_seconds: float) -> Claim | None:
        """A worker's compare-and-set start: (id, epoch, "dispatched") -> "running" owned by
        `owner`. None: a duplicate or stale delivery (or the task was cancelled), drop it."""
        with self._tx() as cur:
            cur.execute(
                f"UPDATE jarvis_runs SET status = 'running', claimed_by = %s, lease_until = {NOW} "
                f"+ %s, started_at = {NOW} WHERE id = %s AND epoch = %s AND status = 'dispatched' "
                f"RETURNING *", (owner, lease_seconds, run_id, epoch))
            row = cur.fetchone()
            if row is None:
                return None
            run = _run(row)
            cur.execute("SELECT * FROM jarvis_tasks WHERE id = %s", (run.task_id,))
            task_row = cur.fetchone()
            if task_row is None or task_row["status"] == "cancelled":
                cur.execute(f"UPDATE jarvis_runs SET status = 'skipped', finished_at = {NOW}, "
                            "error = 'not run: task cancelled before a worker started it', "
                            "lease_until = NULL WHERE id = %s", (run_id,))
                return None
            return Claim(_task(task_row), run)

    def renew(self, run_id: int, epoch: int, owner: str, lease_seconds: float, *,
              now: float | None = None) -> bool:
        """A worker extends the lease of the run it executes; False: it is no longer its own.
        (`now` is ignored: leases are on the database clock.)"""
        with self._tx() as cur:
            cur.execute(f"UPDATE jarvis_runs SET lease_until = {NOW} + %s WHERE id = %s AND "
                        f"epoch = %s AND claimed_by = %s AND status = 'running'",
                        (lease_seconds, run_id, epoch, owner))
            return cur.rowcount == 1

    def finish_dispatched(self, run_id: int, epoch: int, owner: str, *, success: bool,
                          answer: str | None = None, error: str | None = None,
                          error_type: str | None = None, run_log_id: str | None = None,
                          log_entry: dict[str, Any] | None = None,
                          min_retry_delay: float = 0.0) -> Run | None:
        """A worker's compare-and-set finish on (id, epoch, "running", owner), with its run
        log entry stored beside the run; None: the run was taken from it (nothing written).
        `min_retry_delay`: a retry it queues waits at least this long (a worker that records
        a timed-out run, then stops its process to end the call, gets that time to stop)."""
        with self._tx() as cur:
            run = self._finish(cur, "id = %s AND epoch = %s AND claimed_by = %s",
                               (run_id, epoch, owner), now=None, success=success, answer=answer,
                               error=error, error_type=error_type, run_log_id=run_log_id,
                               retry=True, min_retry_delay=min_retry_delay)
            if run is not None and run_log_id and log_entry is not None:
                text = json.dumps(log_entry, ensure_ascii=False, default=str)
                if len(text) > MAX_LOG_ENTRY_CHARS:
                    text = _slim_entry(log_entry, len(text))
                self._store_log_entry(cur, run_id, run_log_id, log_entry)
            return run

    def _store_log_entry(self, cur: Any, run_id: int, run_log_id: str,
                         log_entry: dict[str, Any]) -> None:
        text = json.dumps(log_entry, ensure_ascii=False, default=str)
        if len(text) > MAX_LOG_ENTRY_CHARS:
            text = _slim_entry(log_entry, len(text))
        text = storable(text)  # a transcript with a lone surrogate still gets stored
        # A run that parked and then went on has its entry stored twice: the last one wins.
        cur.execute("INSERT INTO jarvis_run_logs (id, run_id, created_at, entry) "
                    f"VALUES (%s, %s, {NOW}, %s) ON CONFLICT (id) DO UPDATE SET "
                    "entry = EXCLUDED.entry", (run_log_id, run_id, text))

    def get_log_entry(self, run_log_id: str) -> dict[str, Any] | None:
        """The run log entry a worker stored for `run_log_id` (None if there is none)."""
        rows = self._query("SELECT entry FROM jarvis_run_logs WHERE id = %s", (run_log_id,))
        return json.loads(rows[0]["entry"]) if rows else None
