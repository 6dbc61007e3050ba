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
import re
import socket
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from jarvis.errors import JarvisError, UserError
from jarvis.scheduler.records import Run, Task

MAX_ANSWER_CHARS = 100_000
MAX_ERROR_CHARS = 10_000
CRON_CATCH_UP_STEPS = 2_000  # occurrences walked when counting missed cron runs
# A claim always comes a little after the due time (wake-up, locks, a busy machine): lateness
# up to this is "on time", whatever the grace window, so `grace = 0` still runs the task.
ON_TIME_SECONDS = 2.0


class TaskNotFoundError(UserError):
    """No task has this id."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no scheduled task with id {task_id!r}; see the ids with "
                         f"`jarvis schedule list`")


class QuotaError(UserError):
    """A limit on what a model may schedule was reached (see [scheduler] model_*)."""


class TaskBusyError(JarvisError):
    """A run of the task is going on already; starting another would overlap it."""

    exit_code = 3  # distinct from a failed run (1) and a misuse (2): nothing was run

    def __init__(self, task_id: str, run: Run) -> None:
        self.task_id = task_id
        self.run = run
        from jarvis.scheduler.schedules import iso

        how = (f"started {iso(run.started_at)} by {run.claimed_by}" if run.started_at
               else f"sent to a worker by {run.claimed_by}")
        super().__init__(f"task {task_id} is running now (run #{run.id}, {run.trigger}, "
                         f"{how}); nothing was run: retry "
                         f"when it ends, or pass --wait to run it then")


@dataclass(slots=True)
class Claim:
    """A run this process now owns, with its task as it was when claimed."""

    task: Task
    run: Run


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


MIGRATIONS: tuple[Callable[[Any], None], ...] = (_migration_1, _migration_2)

_TASK_FIELDS = tuple(f.name for f in fields(Task))
_RUN_FIELDS = tuple(f.name for f in fields(Run))


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


class SchedulerStore:
    """Tasks and runs in SQLite; safe to share between threads and processes."""

    def __init__(self, db_path: str | os.PathLike[str] | None = None, *,
                 busy_timeout: float = 15.0) -> None:
        import sqlite_utils

        if db_path is None or str(db_path) == "":
            from jarvis.core.paths import state_path

            path = state_path(None, "scheduler.db")
        else:
            path = Path(db_path).expanduser()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=busy_timeout, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise UserError(f"cannot open the scheduler database {path}: {exc}; set "
                            f"[scheduler] db_path or JARVIS_SCHEDULER_DB to a writable file") from None
        self.path = path
        self._lock = threading.RLock()
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
        with self._lock:
            conn = self.db.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

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
                live = conn.execute(
                    "SELECT count(*) FROM tasks WHERE status IN ('active', 'paused') AND "
                    "json_extract(metadata, '$.created_by') = ?", (creator,)).fetchone()[0]
                if live >= max_live:
                    raise QuotaError(
                        f"refused: models already have {live} active or paused scheduled tasks, "
                        f"the most allowed ([scheduler] model_max_active_tasks = {max_live}); "
                        f"cancel some first")
            names = ", ".join(row)
            marks = ", ".join(f":{k}" for k in row)
            conn.execute(f"INSERT INTO tasks ({names}) VALUES ({marks})", row)
        return task

    def get_task(self, task_id: str) -> Task:
        rows = self._query("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if not rows:
            raise TaskNotFoundError(task_id)
        return _task(rows[0])

    def list_tasks(self, status: str | None = None, limit: int | None = None,
                   offset: int = 0) -> list[Task]:
        """Tasks in creation order; `limit` and `offset` page through them."""
        sql = "SELECT * FROM tasks"
        params: list[Any] = []
        if status:
            sql += " WHERE status = ?"
            params.append(status)
        sql += " ORDER BY created_at, rowid"
        if limit or offset:
            sql += " LIMIT ? OFFSET ?"
            params += [int(limit) if limit else -1, max(int(offset), 0)]
        return [_task(r) for r in self._query(sql, tuple(params))]

    def count_tasks(self) -> dict[str, int]:
        rows = self._query("SELECT status, count(*) AS n FROM tasks GROUP BY status")
        return {r["status"]: r["n"] for r in rows}

    def set_status(self, task_id: str, status: str, *, allowed_from: tuple[str, ...],
                   now: float, next_run: Callable[[Task], float | None] | None = None,
                   reason: str = "") -> Task:
        """Change a task's status (pause/resume/cancel) atomically; pending retries of a task
        that stops being active are recorded as skipped."""
        with self.immediate() as conn:
            task = self.get_task(task_id)
            if task.status not in allowed_from:
                raise UserError(f"task {task_id} is {task.status}; this works only for "
                                f"{' or '.join(allowed_from)} tasks")
            if next_run is not None:
                task.next_run = next_run(task)
            elif status != "active":
                task.next_run = None
            task.status = status
            conn.execute("UPDATE tasks SET status = ?, next_run = ?, anchor = ?, updated_at = ? "
                         "WHERE id = ?", (status, task.next_run, task.anchor, now, task_id))
            if status != "active":
                conn.execute("UPDATE runs SET status = 'skipped', finished_at = ?, error = ? "
                             "WHERE task_id = ? AND status = 'pending'",
                             (now, f"not run: {reason or 'task ' + status}", task_id))
        return task

    def delete_task(self, task_id: str) -> None:
        with self.immediate() as conn:
            self.get_task(task_id)
            conn.execute("DELETE FROM runs WHERE task_id = ?", (task_id,))
            conn.execute("DELETE FROM tasks WHERE id = ?", (task_id,))

    # --- runs --------------------------------------------------------------------------
    def has_scheduled_run(self, task_id: str) -> bool:
        """Whether any occurrence of the task was claimed or skipped (manual runs aside)."""
        return bool(self._query("SELECT 1 FROM runs WHERE task_id = ? AND trigger != 'manual' "
                                "LIMIT 1", (task_id,)))

    def get_run(self, run_id: int) -> Run:
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise UserError(f"no run with id {run_id}")
        return _run(rows[0])

    def list_runs(self, task_id: str | None = None, *, status: str | None = None,
                  limit: int | None = 50) -> list[Run]:
        """Runs, newest first."""
        where, params = [], []
        if task_id:
            where.append("task_id = ?")
            params.append(task_id)
        if status:
            where.append("status = ?")
            params.append(status)
        sql = "SELECT * FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_run(r) for r in self._query(sql, tuple(params))]

    def prune_runs(self, *, now: float, max_age: float | None = None,
                   keep_per_task: int | None = None, batch: int = 500,
                   max_rows: int = 200_000) -> int:
        """Delete finished runs older than `max_age` seconds and/or beyond the newest
        `keep_per_task` of each task; returns how many were deleted.

        Never deletes a pending or running run, nor the newest scheduled and the newest manual
        run of a task (they answer "did this occurrence run?" and the task's last outcome).
        The runs to delete are found by one read (no write lock), then deleted by id in
        batches of `batch`, one short write transaction each, so that claims are not held
        up; at most `max_rows` per call (the rest goes next time). A run found this way stays
        deletable: finished runs do not change, and newer runs only push it further back.
        """
        if max_age is None and keep_per_task is None:
            return 0
        finished = "status IN ('succeeded', 'failed', 'skipped')"
        rules, params = [], []
        if max_age is not None:
            rules.append(f"SELECT id FROM runs WHERE {finished} AND "
                         f"coalesce(finished_at, started_at, scheduled_for) < ?")
            params.append(now - max_age)
        if keep_per_task is not None:
            rules.append(f"SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY task_id "
                         f"ORDER BY id DESC) AS newer FROM runs WHERE {finished}) WHERE newer > ?")
            params.append(int(keep_per_task))
        victims = [row["id"] for row in self._query(
            f"SELECT id FROM ({' UNION '.join(rules)}) WHERE id NOT IN (SELECT max(id) FROM "
            f"runs GROUP BY task_id, trigger = 'manual') ORDER BY id LIMIT ?",
            (*params, int(max_rows)))]
        deleted = 0
        for at in range(0, len(victims), batch):
            chunk = victims[at:at + batch]
            marks = ",".join("?" * len(chunk))
            with self.immediate() as conn:
                deleted += conn.execute(f"DELETE FROM runs WHERE id IN ({marks}) AND {finished}",
                                        chunk).rowcount
        return deleted

    def next_wake(self) -> float | None:
        """When something next becomes due (a task occurrence or a queued retry)."""
        rows = self._query(
            "SELECT next_run AS t FROM tasks WHERE status = 'active' AND next_run IS NOT NULL "
            "AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.task_id = tasks.id "
            "AND r.status = 'running') ORDER BY next_run LIMIT 1")
        rows += self._query(
            "SELECT run_after AS t FROM runs WHERE status = 'pending' AND NOT EXISTS "
            "(SELECT 1 FROM runs r WHERE r.task_id = runs.task_id AND r.status = 'running') "
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
                "(SELECT 1 FROM runs r WHERE r.task_id = runs.task_id AND r.status = 'running') "
                "ORDER BY run_after LIMIT ?", (now, limit))
            for row in retry_rows:
                if any(c.task.id == row["task_id"] for c in claims):
                    continue  # one run per task at a time
                task = self.get_task(row["task_id"])
                conn.execute("UPDATE runs SET status = 'running', claimed_by = ?, lease_until = ?, "
                             "started_at = ? WHERE id = ? AND status = 'pending'",
                             (owner, now + lease_seconds, now, row["id"]))
                conn.execute("UPDATE tasks SET last_run = ?, updated_at = ? WHERE id = ?",
                             (now, now, task.id))
                claims.append(Claim(task, self.get_run(row["id"])))
            room = limit - len(claims)
            if room <= 0:
                return claims
            task_rows = self._query(
                "SELECT * FROM tasks WHERE status = 'active' AND next_run <= ? AND NOT EXISTS "
                "(SELECT 1 FROM runs r WHERE r.task_id = tasks.id AND r.status = 'running') "
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
        grace = task.grace_seconds if task.grace_seconds is not None else default_grace
        plan = plan_catch_up(task, now)
        run_at = plan.latest if now - plan.latest <= max(grace, ON_TIME_SECONDS) else None
        skipped_from, skipped_to, skipped = plan.older_first, plan.older_last, plan.older_count
        if run_at is None:  # even the latest occurrence is too late: skip it as well
            skipped_from = skipped_from if skipped else plan.latest
            skipped_to, skipped = plan.latest, skipped + 1
        if skipped:
            conn.execute(
                "INSERT OR IGNORE INTO runs (task_id, scheduled_for, attempt, status, trigger, "
                "finished_at, error, error_type, skipped_count, skipped_until) "
                "VALUES (?, ?, 1, 'skipped', 'schedule', ?, ?, 'missed', ?, ?)",
                (task.id, skipped_from, now,
                 f"missed {skipped} occurrence(s): no scheduler was running, or the previous run "
                 f"was still going; only the latest, if at most {grace:g} s late, is caught up "
                 f"(grace window)", skipped, skipped_to))
        claim = None
        if run_at is not None:
            cursor = conn.execute(
                "INSERT OR IGNORE INTO runs (task_id, scheduled_for, attempt, status, trigger, "
                "claimed_by, lease_until, started_at) VALUES (?, ?, 1, 'running', 'schedule', ?, ?, ?)",
                (task.id, run_at, owner, now + lease_seconds, now))
            # Ignored: this occurrence already ran (clock moved back, or resumed): never twice.
            if cursor.rowcount == 1:
                claim = Claim(task, self.get_run(cursor.lastrowid))
        status, outcome = task.status, task.last_outcome
        if plan.next_run is None and claim is None:
            status, outcome = "completed", "skipped" if skipped else outcome
        conn.execute("UPDATE tasks SET next_run = ?, status = ?, last_outcome = ?, "
                     "last_run = CASE WHEN ? THEN ? ELSE last_run END, updated_at = ? WHERE id = ?",
                     (plan.next_run, status, outcome, claim is not None, now, now, task.id))
        return claim

    def claim_manual(self, task: Task, *, now: float, owner: str, lease_seconds: float) -> Claim:
        """Claim a run of `task` right now, outside its schedule (`jarvis schedule run`).

        Raises TaskBusyError while a run of the task is going on (the same no-overlap rule as
        scheduled runs, checked in the same transaction as the claim)."""
        with self.immediate() as conn:
            busy = self._query("SELECT * FROM runs WHERE task_id = ? AND status = 'running' "
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

    def finish_run(self, run_id: int, owner: str, *, now: float, success: bool,
                   answer: str | None = None, error: str | None = None,
                   error_type: str | None = None, run_log_id: str | None = None,
                   retry: bool = True) -> Run | None:
        """Record the end of a run this owner holds and apply the retry policy.

        Returns None when the run is no longer ours (its lease expired and another daemon
        recovered it), in which case nothing is written.
        """
        status = "succeeded" if success else "failed"
        with self.immediate() as conn:
            cursor = conn.execute(
                "UPDATE runs SET status = ?, finished_at = ?, answer = ?, error = ?, "
                "error_type = ?, run_log_id = ?, lease_until = NULL WHERE id = ? AND "
                "claimed_by = ? AND status = 'running'",
                (status, now, _clip(answer, MAX_ANSWER_CHARS), _clip(error, MAX_ERROR_CHARS),
                 error_type, run_log_id, run_id, owner))
            if cursor.rowcount != 1:
                return None
            run = self.get_run(run_id)
            self._after_attempt(conn, run, now=now, retry=retry and not success,
                                crashed=False)
            return run

    def _after_attempt(self, conn: sqlite3.Connection, run: Run, *, now: float, retry: bool,
                       crashed: bool) -> None:
        """Queue the next attempt when the policy says so; update the task's summary."""
        try:
            task = self.get_task(run.task_id)
        except TaskNotFoundError:
            return
        outcome = run.status
        queued = False
        if retry and task.status == "active" and run.trigger != "manual":
            if crashed:
                allowed = task.on_crash == "retry" and run.attempt < 1 + max(task.max_retries, 1)
                delay = 0.0
            else:
                allowed = run.attempt < 1 + task.max_retries
                delay = task.retry_backoff_seconds * (2 ** (run.attempt - 1))
            if allowed:
                conn.execute(
                    "INSERT OR IGNORE INTO runs (task_id, scheduled_for, attempt, status, trigger, "
                    "run_after) VALUES (?, ?, ?, 'pending', ?, ?)",
                    (task.id, run.scheduled_for, run.attempt + 1,
                     "recovery" if crashed else "retry", now + delay))
                queued = True
                outcome = f"{run.status} (retry queued)"
        status = task.status
        if (task.schedule_type == "once" and task.next_run is None and not queued
                and status == "active" and run.trigger != "manual"):
            status = "completed"
        conn.execute("UPDATE tasks SET last_outcome = ?, status = ?, updated_at = ? WHERE id = ?",
                     (outcome, status, now, task.id))

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
                conn.execute(
                    "UPDATE runs SET status = 'failed', finished_at = ?, error_type = 'crashed', "
                    "error = ?, lease_until = NULL WHERE id = ? AND status = 'running'",
                    (now, f"interrupted: the scheduler {run.claimed_by} stopped during this run "
                          f"({why}); nothing was recorded from it", run.id))
                run = self.get_run(run.id)
                self._after_attempt(conn, run, now=now, retry=True, crashed=True)
                recovered.append(run)
        return recovered

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


@dataclass(slots=True)
class CatchUp:
    """Where a due task stands: its latest due occurrence, older missed ones, the next one."""

    latest: float
    older_count: int
    older_first: float | None
    older_last: float | None
    next_run: float | None


def plan_catch_up(task: Task, now: float) -> CatchUp:
    """The latest occurrence of `task` at or before `now` (starting from its next_run), how
    many older ones were missed, and the first occurrence after now."""
    due = float(task.next_run if task.next_run is not None else now)
    if task.schedule_type == "once":
        return CatchUp(due, 0, None, None, None)
    if task.schedule_type == "interval":
        seconds = float(task.schedule_value)
        if due >= now:
            return CatchUp(due, 0, None, None, due + seconds)
        missed = int((now - due) // seconds)  # whole intervals since the due occurrence
        latest = due + missed * seconds
        return CatchUp(latest, missed, due if missed else None,
                       latest - seconds if missed else None, latest + seconds)
    latest, count, first, last = due, 0, None, None
    nxt = task.next_after(latest)
    while nxt is not None and nxt <= now:
        first = latest if first is None else first
        last = latest
        count += 1
        latest = nxt
        if count >= CRON_CATCH_UP_STEPS:
            # Too many to walk one by one: jump close to now; the count is a lower bound.
            jump = task.next_after(now - 3600)
            if jump is not None and jump > latest:
                last, latest = latest, jump
                count += 1
        nxt = task.next_after(latest)
    return CatchUp(latest, count, first, last, nxt)


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(text: str) -> str:
    """`text` as both stores can keep it: NUL (a PostgreSQL text column refuses it) and lone
    surrogates (not UTF-8; a model's JSON "\\ud800" decodes to one, and both sqlite3 and psycopg
    fail to encode it) become U+FFFD. A run whose answer held one was never recorded: its
    worker gave up, the lease expired and the run was executed again."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = _SURROGATE.sub("\ufffd", text)
    return text


def _clip(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters not stored]"
    return storable(text)


def _task_row(task: Task) -> dict[str, Any]:
    row = {name: getattr(task, name) for name in _TASK_FIELDS}
    for key in ("tools", "approved_tools", "metadata"):
        row[key] = json.dumps(row[key])
    return row


def _task(row: dict[str, Any]) -> Task:
    data = {k: row[k] for k in _TASK_FIELDS if k in row}
    for key, empty in (("tools", "[]"), ("approved_tools", "[]"), ("metadata", "{}")):
        data[key] = json.loads(data.get(key) or empty)
    return Task(**data)


def _run(row: dict[str, Any]) -> Run:
    data = {k: row[k] for k in _RUN_FIELDS if k in row}
    data["skipped_count"] = data.get("skipped_count") or 0
    data["delivery"] = json.loads(data["delivery"]) if data.get("delivery") else None
    return Run(**data)
