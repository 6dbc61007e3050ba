"""SchedulerStore: tasks and their runs in one SQLite file (default JARVIS_HOME/scheduler.db).

One discipline for every process sharing the file: WAL mode, a busy timeout, and
`BEGIN IMMEDIATE` around every read-then-write, so a claim is atomic. Each occurrence of a task
is one row in `runs` with a unique (task_id, scheduled_for, attempt) key: two daemons, a clock
that goes backwards or a resumed task can never run the same occurrence twice.

Policies applied here, inside the claiming transaction (documented in docs/scheduler.md):
- missed runs: the latest occurrence that is due runs once if it is at most `grace` seconds
  late; older occurrences are skipped and recorded as one "skipped" run with their count;
- overlap: a task whose previous run is still running is not started again until it ends;
- failures: with retries left, a new attempt is queued after `backoff * 2**(attempt-1)` s;
- crashes: a run whose daemon died (a dead pid in this PID namespace, or a lease that its
  owner stopped renewing) is recorded as failed ("crashed") and, when the task's `on_crash`
  is "retry", queued again right away.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from jarvis.core.sqlite_wal import immediate
from jarvis.errors import UserError
from jarvis.scheduler.group_commit import GroupCommit
from jarvis.scheduler.records import Run, Task, finished_status
from jarvis.scheduler.store_common import (  # "X as X": callers import X from here
    FINISHED,
    HOLDING,
    MAX_ANSWER_CHARS,
    MAX_ERROR_CHARS,
    Claim,
    StoreBase,
    TaskBusyError,
    TaskNotFoundError,
    _clip,
    _run,
    _task,
    _task_row,
    plan_claim,
    quota_refused,
)
from jarvis.scheduler.store_common import QuotaError as QuotaError
from jarvis.scheduler.store_common import storable as storable


def _migration_1(db: Any) -> None:
    db["tasks"].create({
        "id": str, "prompt": str, "schedule_type": str, "schedule_value": str,
        "timezone": str, "agent": str, "tools": str, "approved_tools": str, "status": str,
        "next_run": float, "last_run": float, "last_outcome": str, "created_at": float,
        "updated_at": float, "anchor": float, "timeout_seconds": float, "max_retries": int,
        "retry_backoff_seconds": float, "on_crash": str, "grace_seconds": float,
        "metadata": str,
    }, pk="id", not_null=["prompt", "schedule_type", "schedule_value", "status"])
    # The daemon's wake-up query walks this index: due tasks in next_run order.
    db["tasks"].create_index(["status", "next_run"], index_name="tasks_due")
    db["runs"].create({
        "id": int, "task_id": str, "scheduled_for": float, "attempt": int, "status": str,
        "trigger": str, "run_after": float, "claimed_by": str, "lease_until": float,
        "started_at": float, "finished_at": float, "answer": str, "error": str,
        "error_type": str, "run_log_id": str, "skipped_count": int, "skipped_until": float,
    }, pk="id", not_null=["task_id", "scheduled_for", "attempt", "status"])
    # The guarantee that one occurrence (attempt) runs at most once, whoever claims it.
    db["runs"].create_index(["task_id", "scheduled_for", "attempt"], index_name="runs_occurrence",
                            unique=True)
    db["runs"].create_index(["task_id", "status"], index_name="runs_task_status")
    db["runs"].create_index(["status", "run_after"], index_name="runs_pending")


def _migration_2(db: Any) -> None:
    # Result delivery to channels: the task's channel, and how each run's delivery went.
    db["tasks"].add_column("notify", str)
    db["runs"].add_column("delivery", str)


def _migration_3(db: Any) -> None:
    # What the run that created a task had read (docs/trust.md): a task born in a tainted
    # run starts every run tainted.
    db["tasks"].add_column("trust", str)


def _migration_4(db: Any) -> None:
    # Side effects of scheduled runs (jarvis.tools.fence): recorded before a send, confirmed
    # after, so a retried attempt never sends the same key twice.
    db.execute("CREATE TABLE effects (key TEXT PRIMARY KEY, run_id INTEGER, attempt INTEGER "
               "NOT NULL, epoch INTEGER NOT NULL DEFAULT 0, tool TEXT NOT NULL, target TEXT, "
               "status TEXT NOT NULL, detail TEXT, created_at FLOAT, updated_at FLOAT)")
    db.execute("CREATE INDEX effects_run ON effects (run_id)")


def _migration_5(db: Any) -> None:
    # Runs that park waiting for the person (jarvis.approvals): when, and how often a
    # continuation of it was claimed.
    db["runs"].add_column("parked_at", float)
    db["runs"].add_column("resumes", int, not_null_default=0)


def _migration_6(db: Any) -> None:
    # The workspace (config.toml) a task was created in: its runs use that config (issue 25;
    # after main's 3, 4 and 5, so a database upgraded by main still upgrades).
    db["tasks"].add_column("workspace", str)


MIGRATIONS: tuple[Callable[[Any], None], ...] = (_migration_1, _migration_2, _migration_3,
                                                 _migration_4, _migration_5, _migration_6)


def owner_id() -> str:
    """This process as a claim owner: `host:pid:token:boot:pidns`.

    A random token, since pids get reused; the boot id and the PID namespace say where the pid
    means something (containers that share a host name have their own pids).
    """
    boot, pidns = _pid_scope()
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}:{boot}:{pidns}"


def _pid_scope() -> tuple[str, str]:
    """(boot id, PID namespace inode) of this process; "-" where the system has none (a
    system without /proc has no PID namespaces either)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")
    except OSError:
        boot = "-"
    try:
        pidns = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        pidns = "-"
    return boot or "-", pidns


def owner_is_dead(owner: str | None) -> bool:
    """True when `owner` is a process of this PID namespace (of this boot of this machine)
    that no longer exists.

    Only such an owner can be judged by its pid: a pid from another namespace (a container
    that shares our host name), another boot or another host names some other process here,
    or none. Those owners, and owners recorded before the namespace was part of the id, are
    judged by their lease alone: the recovery waits until the owner stops renewing it.
    """
    if not owner:
        return True
    parts = owner.split(":")
    if len(parts) != 5 or not parts[1].isdigit():
        return False
    host, pid_text, _token, boot, pidns = parts
    # The boot id and namespace inode name the pid's scope; the host name only matters where
    # they are unknown (no /proc), and may change under a running daemon anyway.
    scope = _pid_scope()
    if (boot, pidns) != scope or ("-" in scope and host != socket.gethostname()):
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    # A killed child that nobody reaped yet is a zombie: dead for our purposes.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0:1] == ["Z"]


class SchedulerStore(StoreBase):
    """Tasks and runs in SQLite; safe to share between threads and processes."""

    TASKS, RUNS, EFFECTS, MARK = "tasks", "runs", "effects", "?"
    TASK_ORDER = "created_at, rowid"
    NO_LIMIT = " LIMIT -1"  # SQLite has no OFFSET without a LIMIT; -1 is none

    def __init__(self, db_path: str | os.PathLike[str] | None = None, *,
                 busy_timeout: float = 15.0) -> None:
        import sqlite_utils

        if db_path is None or str(db_path) == "":
            from jarvis.core.paths import state_path

            path = state_path(None, "scheduler.db")
        else:
            path = Path(db_path).expanduser()
        try:
            from jarvis.core.paths import private_database

            private_database(path)  # 0600 (and so its -wal and -shm), whatever the umask
            conn = sqlite3.connect(str(path), timeout=busy_timeout, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise UserError(f"cannot open the scheduler database {path}: {exc}; set "
                            f"[scheduler] db_path or JARVIS_SCHEDULER_DB to a writable file") from None
        self.path = path
        self._lock = threading.RLock()
        self._finishes = GroupCommit(self.immediate, self._finish_in)
        self.db = sqlite_utils.Database(conn, execute_plugins=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            from jarvis.core.sqlite_wal import enter_wal

            enter_wal(conn, busy_timeout)
            conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:  # not a database, unreadable, or stays locked
            conn.close()
            raise UserError(f"cannot use the scheduler database {path}: {exc}; if it is not a "
                            f"jarvis scheduler database, move it away or set [scheduler] "
                            f"db_path or JARVIS_SCHEDULER_DB to another file") from None

    # --- plumbing ----------------------------------------------------------------------
    @contextlib.contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """A write transaction that takes the write lock up front (BEGIN IMMEDIATE), so what
        it reads cannot change before it writes."""
        with self._lock, immediate(self.db.conn) as conn:
            yield conn

    _write = immediate

    def _locked_task(self, db: sqlite3.Connection, task_id: str) -> Task | None:
        # Inside `immediate()` the whole database is locked for this transaction already.
        try:
            return self.get_task(task_id)
        except TaskNotFoundError:
            return None

    def _delete_runs(self, run_ids: list[int]) -> int:
        marks = ",".join("?" * len(run_ids))
        with self.immediate() as conn:
            deleted = conn.execute(f"DELETE FROM runs WHERE id IN ({marks}) AND {FINISHED}",
                                   run_ids).rowcount
            conn.execute(f"DELETE FROM effects WHERE run_id IN ({marks}) AND run_id NOT IN "
                         f"(SELECT id FROM runs)", run_ids)
            return deleted

    def _holds(self, db: Any, run_id: int, epoch: int, owner: str | None) -> bool:
        # Local runs have no epoch: a run taken over is no longer "running" for its owner.
        return db.execute("SELECT 1 FROM runs WHERE id = ? AND claimed_by = ? AND status = "
                          "'running'", (run_id, owner)).fetchone() is not None

    def _migrate(self) -> None:
        with self.immediate() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            for number, migration in enumerate(MIGRATIONS, start=1):
                if version < number:
                    migration(self.db)
                    conn.execute(f"PRAGMA user_version = {number}")

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self.db.conn.execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self.db.conn.close()

    def _query(self, sql: str, params: tuple | dict = ()) -> list[sqlite3.Row]:
        with self._lock:
            cursor = self.db.conn.execute(sql, params)
            cols = [d[0] for d in cursor.description]
            return [dict(zip(cols, row, strict=True)) for row in cursor.fetchall()]

    # --- tasks -------------------------------------------------------------------------
    def add_task(self, task: Task, *, max_live: int | None = None) -> Task:
        """Store a new task. With `max_live`, refuse (QuotaError) when its creator (metadata
        created_by) already has that many active or paused tasks; counted and inserted in one
        transaction, so concurrent creators cannot overshoot."""
        row = _task_row(task)
        row["updated_at"] = task.created_at
        with self.immediate() as conn:
            if max_live is not None:
                creator = (task.metadata or {}).get("created_by", "person")
                # A task without created_by is a person's, as in the PostgreSQL store.
                live = conn.execute(
                    "SELECT count(*) FROM tasks WHERE status IN ('active', 'paused') AND "
                    "coalesce(json_extract(metadata, '$.created_by'), 'person') = ?",
                    (creator,)).fetchone()[0]
                if live >= max_live:
                    raise quota_refused(live, max_live)
            names = ", ".join(row)
            marks = ", ".join(f":{k}" for k in row)
            conn.execute(f"INSERT INTO tasks ({names}) VALUES ({marks})", row)
        return task

    # --- runs --------------------------------------------------------------------------
    def next_wake(self) -> float | None:
        """When something next becomes due (a task occurrence or a queued retry)."""
        rows = self._query(
            "SELECT next_run AS t FROM tasks WHERE status = 'active' AND next_run IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.task_id = tasks.id "
            f"AND r.status IN {HOLDING}) ORDER BY next_run LIMIT 1")
        rows += self._query(
            "SELECT run_after AS t FROM runs WHERE status = 'pending' AND NOT EXISTS "
            f"(SELECT 1 FROM runs r WHERE r.task_id = runs.task_id AND r.status IN {HOLDING}) "
            "ORDER BY run_after LIMIT 1")
        times = [r["t"] for r in rows if r["t"] is not None]
        return min(times) if times else None

    def claim_due(self, *, now: float, owner: str, lease_seconds: float, limit: int,
                  default_grace: float) -> list[Claim]:
        """Atomically claim up to `limit` due occurrences and queued retries for `owner`."""
        claims: list[Claim] = []
        if limit <= 0:
            return claims
        with self.immediate() as conn:
            retry_rows = self._query(
                "SELECT * FROM runs WHERE status = 'pending' AND run_after <= ? AND NOT EXISTS "
                f"(SELECT 1 FROM runs r WHERE r.task_id = runs.task_id AND r.status IN "
                f"{HOLDING}) ORDER BY run_after LIMIT ?", (now, limit))
            for row in retry_rows:
                if any(c.task.id == row["task_id"] for c in claims):
                    continue  # one run per task at a time
                task = self.get_task(row["task_id"])
                conn.execute("UPDATE runs SET status = 'running', claimed_by = ?, lease_until = ?, "
                             "started_at = ? WHERE id = ? AND status = 'pending'",
                             (owner, now + lease_seconds, now, row["id"]))
                conn.execute("UPDATE tasks SET last_run = ?, updated_at = ? WHERE id = ?",
                             (now, now, task.id))
                # The row as just written (read under this transaction's lock): not read again.
                run = _run(row)
                run.status, run.claimed_by = "running", owner
                run.lease_until, run.started_at = now + lease_seconds, now
                claims.append(Claim(task, run))
            room = limit - len(claims)
            if room <= 0:
                return claims
            task_rows = self._query(
                "SELECT * FROM tasks WHERE status = 'active' AND next_run <= ? AND NOT EXISTS "
                f"(SELECT 1 FROM runs r WHERE r.task_id = tasks.id AND r.status IN {HOLDING}) "
                "ORDER BY next_run LIMIT ?", (now, room + len(claims)))
            for row in task_rows:
                if len(claims) >= limit:
                    break
                task = _task(row)
                if any(c.task.id == task.id for c in claims):
                    continue
                claim = self._claim_task(conn, task, now=now, owner=owner,
                                         lease_seconds=lease_seconds, default_grace=default_grace)
                if claim is not None:
                    claims.append(claim)
        return claims

    def _claim_task(self, conn: sqlite3.Connection, task: Task, *, now: float, owner: str,
                    lease_seconds: float, default_grace: float) -> Claim | None:
        plan = plan_claim(task, now, default_grace)
        if plan.skipped:
            conn.execute(
                "INSERT OR IGNORE INTO runs (task_id, scheduled_for, attempt, status, trigger, "
                "finished_at, error, error_type, skipped_count, skipped_until) "
                "VALUES (?, ?, 1, 'skipped', 'schedule', ?, ?, 'missed', ?, ?)",
                (task.id, plan.skipped_from, now, plan.skipped_error, plan.skipped,
                 plan.skipped_to))
        claim = None
        if plan.run_at is not None:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO runs (task_id, scheduled_for, attempt, status, trigger, "
                "claimed_by, lease_until, started_at) VALUES (?, ?, 1, 'running', 'schedule', ?, ?, ?)",
                (task.id, plan.run_at, owner, now + lease_seconds, now))
            # Ignored: this occurrence already ran (clock moved back, or resumed): never twice.
            if cursor.rowcount == 1:
                # The row just inserted (the other columns are NULL or their defaults): built
                # here, not read back.
                claim = Claim(task, Run(id=cursor.lastrowid, task_id=task.id,
                                        scheduled_for=plan.run_at, attempt=1, status="running",
                                        trigger="schedule", claimed_by=owner,
                                        lease_until=now + lease_seconds, started_at=now))
        status, outcome = plan.task_after(task, started=claim is not None)
        conn.execute("UPDATE tasks SET next_run = ?, status = ?, last_outcome = ?, "
                     "last_run = CASE WHEN ? THEN ? ELSE last_run END, updated_at = ? WHERE id = ?",
                     (plan.catch_up.next_run, status, outcome, claim is not None, now, now,
                      task.id))
        return claim

    def claim_manual(self, task: Task, *, now: float, owner: str, lease_seconds: float) -> Claim:
        """Claim a run of `task` right now, outside its schedule (`jarvis schedule run`).

        Raises TaskBusyError while a run of the task is going on (the same no-overlap rule as
        scheduled runs, checked in the same transaction as the claim)."""
        with self.immediate() as conn:
            busy = self._query(f"SELECT * FROM runs WHERE task_id = ? AND status IN {HOLDING} "
                               "ORDER BY id LIMIT 1", (task.id,))
            if busy:
                raise TaskBusyError(task.id, _run(busy[0]))
            cursor = conn.execute(
                "INSERT INTO runs (task_id, scheduled_for, attempt, status, trigger, claimed_by, "
                "lease_until, started_at) VALUES (?, ?, 1, 'running', 'manual', ?, ?, ?)",
                (task.id, now, owner, now + lease_seconds, now))
            conn.execute("UPDATE tasks SET last_run = ?, updated_at = ? WHERE id = ?",
                         (now, now, task.id))
            return Claim(task, self.get_run(cursor.lastrowid))

    def heartbeat(self, owner: str, lease_until: float) -> int:
        """Extend the lease of every run `owner` holds; returns how many it holds."""
        with self.immediate() as conn:
            return conn.execute("UPDATE runs SET lease_until = ? WHERE claimed_by = ? AND "
                                "status = 'running'", (lease_until, owner)).rowcount

    def renew(self, run_id: int, epoch: int, owner: str, lease_seconds: float, *,
              now: float | None = None) -> bool:
        """Extend the lease of one run `owner` holds (a scheduled run's lease check before
        each call); False: it is no longer its own (recovered by another daemon)."""
        until = (time.time() if now is None else now) + lease_seconds
        with self.immediate() as conn:
            return conn.execute("UPDATE runs SET lease_until = ? WHERE id = ? AND claimed_by = ? "
                                "AND status = 'running'", (until, run_id, owner)).rowcount == 1

    def finish_run(self, run_id: int, owner: str, *, now: float, success: bool,
                   answer: str | None = None, error: str | None = None,
                   error_type: str | None = None, run_log_id: str | None = None,
                   retry: bool = True) -> Run | None:
        """Record the end of a run this owner holds and apply the retry policy.

        Returns None when the run is no longer ours (its lease expired and another daemon
        recovered it), in which case nothing is written.
        """
        status = finished_status(success, error_type)
        # Finishes that arrive together (a burst's workers) share one transaction; each
        # returns once the transaction holding its row has committed.
        return self._finishes.submit((
            run_id, owner, now, status, _clip(answer, MAX_ANSWER_CHARS),
            _clip(error, MAX_ERROR_CHARS), error_type, run_log_id, retry and status == "failed"))

    def _finish_in(self, conn: sqlite3.Connection, item: tuple) -> Run | None:
        """finish_run's writes, inside the (shared) write transaction."""
        run_id, owner, now, status, answer, error, error_type, run_log_id, retry = item
        # The compare-and-set returns the row it wrote (RETURNING): not read again.
        cursor = conn.execute(
            "UPDATE runs SET status = ?, finished_at = ?, answer = ?, error = ?, "
            "error_type = ?, run_log_id = ?, lease_until = NULL WHERE id = ? AND "
            "claimed_by = ? AND status = 'running' RETURNING *",
            (status, now, answer, error, error_type, run_log_id, run_id, owner))
        rows = cursor.fetchall()
        if len(rows) != 1:
            return None
        run = _run(dict(zip([d[0] for d in cursor.description], rows[0], strict=True)))
        if retry:
            self._after_attempt(conn, run, now=now, retry=True, crashed=False)
        else:
            self._after_final(conn, run, now)
        return run

    @staticmethod
    def _after_final(conn: sqlite3.Connection, run: Run, now: float) -> None:
        """`_after_attempt` without a retry, in one statement: the task's summary, and a
        one-off task that has nothing left to run completed (the same rule, in SQL)."""
        conn.execute(
            "UPDATE tasks SET last_outcome = ?, status = CASE WHEN schedule_type = 'once' AND "
            "next_run IS NULL AND status = 'active' AND ? THEN 'completed' ELSE status END, "
            "updated_at = ? WHERE id = ?", (run.status, run.trigger != "manual", now, run.task_id))

    def recover(self, *, now: float, is_dead: Callable[[str | None], bool] = owner_is_dead,
                exclude_owner: str | None = None) -> list[Run]:
        """Find runs whose daemon died (dead pid in this namespace, or lease expired), record them
        as failed ("crashed") and apply each task's on_crash policy."""
        recovered: list[Run] = []
        with self.immediate() as conn:
            rows = self._query("SELECT * FROM runs WHERE status = 'running'")
            for row in rows:
                run = _run(row)
                if run.claimed_by == exclude_owner:
                    continue
                expired = run.lease_until is not None and run.lease_until < now
                if not (expired or is_dead(run.claimed_by)):
                    continue
                why = "its lease expired" if expired else "its process is gone"
                if self._repark(conn, run, now, why):
                    recovered.append(self.get_run(run.id))
                    continue
                conn.execute(
                    "UPDATE runs SET status = 'failed', finished_at = ?, error_type = 'crashed', "
                    "error = ?, lease_until = NULL WHERE id = ? AND status = 'running'",
                    (now, f"interrupted: the scheduler {run.claimed_by} stopped during this run "
                          f"({why}); nothing was recorded from it", run.id))
                run = self.get_run(run.id)
                self._after_attempt(conn, run, now=now, retry=True, crashed=True)
                recovered.append(run)
        return recovered

    # --- runs that wait for the person (jarvis.approvals) -----------------------------------
    def park_run(self, run_id: int, owner: str, *, now: float, run_log_id: str | None,
                 note: str, epoch: int | None = None, log_entry: Any = None) -> Run | None:
        """The run this owner holds stopped before a call that needs the person: "parked"
        (it keeps its task: nothing else of the task starts) until a continuation is claimed
        (`claim_parked`) or it expires (`expire_run`). None: it is no longer ours."""
        with self.immediate() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'parked', parked_at = ?, lease_until = NULL, "
                "run_log_id = ?, error = ?, error_type = 'parked' WHERE id = ? AND "
                "claimed_by = ? AND status = 'running'",
                (now, run_log_id, _clip(note, MAX_ERROR_CHARS), run_id, owner))
            if cursor.rowcount != 1:
                return None
            run = self.get_run(run_id)
            conn.execute("UPDATE tasks SET last_outcome = 'parked', updated_at = ? WHERE id = ?",
                         (now, run.task_id))
            return run

    def parked_runs(self, limit: int = 500) -> list[Run]:
        """Runs waiting for the person, oldest first."""
        rows = self._query("SELECT * FROM runs WHERE status = 'parked' ORDER BY parked_at "
                           "LIMIT ?", (limit,))
        return [_run(r) for r in rows]

    def claim_parked(self, run_id: int, *, now: float, owner: str, lease_seconds: float,
                     dispatch: bool = False) -> Claim | None:
        """Claim the continuation of a parked run whose requests are answered, once: a
        compare-and-set "parked" -> "running" for `owner`. None: another process took it (or
        it expired). A run of a cancelled task is not continued (recorded skipped)."""
        with self.immediate() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'running', claimed_by = ?, lease_until = ?, "
                "error = NULL, error_type = NULL, resumes = resumes + 1 WHERE id = ? AND "
                "status = 'parked'", (owner, now + lease_seconds, run_id))
            if cursor.rowcount != 1:
                return None
            run = self.get_run(run_id)
            task = self._locked_task(conn, run.task_id)
            if task is None or task.status == "cancelled":
                conn.execute("UPDATE runs SET status = 'skipped', finished_at = ?, error = "
                             "'not continued: task cancelled while it waited for approval', "
                             "lease_until = NULL WHERE id = ?", (now, run_id))
                return None
            return Claim(task, run)

    def expire_run(self, run_id: int, *, now: float, error: str) -> Run | None:
        """A parked run nobody answered in time ends "expired" (never retried). None: it is
        not parked (continued, or expired by another process)."""
        with self.immediate() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'expired', finished_at = ?, error = ?, "
                "error_type = 'expired', lease_until = NULL WHERE id = ? AND status = 'parked'",
                (now, _clip(error, MAX_ERROR_CHARS), run_id))
            if cursor.rowcount != 1:
                return None
            run = self.get_run(run_id)
            self._after_attempt(conn, run, now=now, retry=False, crashed=False)
            return run

    def _repark(self, conn: Any, run: Run, now: float, why: str) -> bool:
        """A continuation whose process died goes back to "parked", to be claimed again (its
        answers are kept), while the task's on_crash is "retry" and it has not been
        re-continued more than its retries allow; else it is recorded crashed as usual."""
        if run.parked_at is None:
            return False
        task = self._locked_task(conn, run.task_id)
        if task is None or task.on_crash != "retry" or run.resumes > 1 + task.max_retries:
            return False
        conn.execute("UPDATE runs SET status = 'parked', claimed_by = NULL, lease_until = NULL, "
                     "error = ?, error_type = 'parked' WHERE id = ? AND status = 'running'",
                     (f"its continuation stopped ({why}); it continues again", run.id))
        return True

    def record_delivery(self, run_id: int, delivery: dict[str, Any]) -> Run:
        """Store how sending a finished run to its task's channel went."""
        with self.immediate() as conn:
            conn.execute("UPDATE runs SET delivery = ? WHERE id = ?",
                         (json.dumps(delivery, default=str), run_id))
        return self.get_run(run_id)

    def interrupt(self, run_id: int, owner: str, *, now: float, reason: str) -> Run | None:
        """Give up a run this owner holds (shutdown before it ended); on_crash policy applies."""
        with self.immediate() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = 'failed', finished_at = ?, error_type = 'interrupted', "
                "error = ?, lease_until = NULL WHERE id = ? AND claimed_by = ? AND status = 'running'",
                (now, reason, run_id, owner))
            if cursor.rowcount != 1:
                return None
            run = self.get_run(run_id)
            self._after_attempt(conn, run, now=now, retry=True, crashed=True)
            return run
