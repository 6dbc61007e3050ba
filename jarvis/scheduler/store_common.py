"""What the two scheduler stores share: records as rows and back, how much text a run keeps,
the catch-up and retry policies, and the queries that read the same in both SQL dialects
(`StoreBase`). The SQLite store (jarvis.scheduler.store) and the PostgreSQL one
(jarvis.scheduler.store_postgres) each supply their dialect's few pieces; what they do
differently for concurrency (claims, leases, compare-and-set finishes) stays in each store.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from jarvis.errors import JarvisError, RunFenced, UserError
from jarvis.scheduler.records import Run, Task

if TYPE_CHECKING:
    from jarvis.tools.fence import Effect

MAX_ANSWER_CHARS = 100_000
MAX_ERROR_CHARS = 10_000
CRON_CATCH_UP_STEPS = 2_000  # occurrences walked when counting missed cron runs
# A claim always comes a little after the due time (wake-up, locks, a busy machine): lateness
# up to this is "on time", whatever the grace window, so `grace = 0` still runs the task.
ON_TIME_SECONDS = 2.0


class TaskNotFoundError(UserError, KeyError):
    """No task has this id (also a KeyError, as code ported from OpenJarvis catches)."""

    def __str__(self) -> str:
        # KeyError's str() would quote the message; keep the plain one-line text.
        return Exception.__str__(self)

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        super().__init__(f"no scheduled task with id {task_id!r}; see the ids with "
                         f"`jarvis schedule list`")


class QuotaError(UserError):
    """A limit on what a model may schedule was reached (see [scheduler] model_*)."""


class TaskIdTaken(JarvisError):
    """add_task: a task with this id exists (the caller draws another id)."""


class StoreUnavailable(JarvisError):
    """The shared ledger could not be reached (network, server down); retried by the caller."""


class TaskBusyError(JarvisError):
    """A run of the task is going on already; starting another would overlap it."""

    exit_code = 3  # distinct from a failed run (1) and a misuse (2): nothing was run

    def __init__(self, task_id: str, run: Run) -> None:
        self.task_id = task_id
        self.run = run
        from jarvis.scheduler.schedules import iso

        how = ("parked, waiting for your approval (`jarvis approvals list`)"
               if run.status == "parked" else
               f"started {iso(run.started_at)} by {run.claimed_by}" if run.started_at
               else f"sent to a worker by {run.claimed_by}")
        super().__init__(f"task {task_id} is running now (run #{run.id}, {run.trigger}, "
                         f"{how}); nothing was run: retry "
                         f"when it ends, or pass --wait to run it then")


@dataclass(slots=True)
class Claim:
    """A run this process now owns, with its task as it was when claimed."""

    task: Task
    run: Run
    note: str = ""  # why a run is sent again (redispatch_expired)



_TASK_FIELDS = tuple(f.name for f in fields(Task))
_RUN_FIELDS = tuple(f.name for f in fields(Run))


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
    row["trust"] = None if task.trust is None else json.dumps(task.trust, default=str)
    return row


def _task(row: dict[str, Any]) -> Task:
    data = {k: row[k] for k in _TASK_FIELDS if k in row}
    for key, empty in (("tools", "[]"), ("approved_tools", "[]"), ("metadata", "{}")):
        data[key] = _json(data.get(key) or empty)
    data["trust"] = _json(data["trust"]) if data.get("trust") else None
    return Task(**data)


def _json(text: str) -> Any:
    # Most tasks store empty lists and objects: made here without the decoder (a claim
    # decodes its tasks' columns, in a burst a tenth of the daemon's cost).
    if text == "[]":
        return []
    if text == "{}":
        return {}
    if text == "null":
        return None
    return json.loads(text)


def _run(row: dict[str, Any]) -> Run:
    data = {k: row[k] for k in _RUN_FIELDS if k in row}
    data["skipped_count"] = data.get("skipped_count") or 0
    data["delivery"] = json.loads(data["delivery"]) if data.get("delivery") else None
    return Run(**data)


MAX_EFFECT_TARGET = 500  # characters of an effect's target (a URL) kept in its record


def _effect(row: dict[str, Any]) -> Effect:
    # Imported here: jarvis.tools (its package loads the tool catalog) only when effects are.
    from jarvis.tools.fence import Effect

    return Effect(key=row["key"], status=row["status"], attempt=row["attempt"],
                  epoch=row.get("epoch") or 0, tool=row.get("tool") or "",
                  target=row.get("target") or "", detail=row.get("detail"),
                  at=row.get("updated_at"))


def quota_refused(live: int, max_live: int) -> QuotaError:
    """The refusal of a task whose creator already has `live` of the `max_live` allowed."""
    return QuotaError(f"refused: models already have {live} active or paused scheduled tasks, "
                      f"the most allowed ([scheduler] model_max_active_tasks = {max_live}); "
                      f"cancel some first")


@dataclass(slots=True)
class ClaimPlan:
    """What claiming a due task does: start the occurrence `run_at` (None: even the latest is
    too late) and record the `skipped` missed ones, from `skipped_from` to `skipped_to`, as
    one skipped run."""

    catch_up: CatchUp
    grace: float
    run_at: float | None
    skipped: int
    skipped_from: float | None
    skipped_to: float | None

    @property
    def skipped_error(self) -> str:
        return (f"missed {self.skipped} occurrence(s): no scheduler was running, or the "
                f"previous run was still going; only the latest, if at most {self.grace:g} s "
                f"late, is caught up (grace window)")

    def task_after(self, task: Task, started: bool) -> tuple[str, str | None]:
        """The task's (status, last_outcome) after the claim: completed when it has no next
        occurrence and nothing was started."""
        if self.catch_up.next_run is None and not started:
            return "completed", "skipped" if self.skipped else task.last_outcome
        return task.status, task.last_outcome


def plan_claim(task: Task, now: float, default_grace: float) -> ClaimPlan:
    """The missed-runs policy (docs/scheduler.md): the latest due occurrence runs once if it
    is at most the grace window late; older ones, and the latest when it is later than that,
    are skipped."""
    grace = task.grace_seconds if task.grace_seconds is not None else default_grace
    plan = plan_catch_up(task, now)
    run_at = plan.latest if now - plan.latest <= max(grace, ON_TIME_SECONDS) else None
    skipped_from, skipped_to, skipped = plan.older_first, plan.older_last, plan.older_count
    if run_at is None:  # even the latest occurrence is too late: skip it as well
        skipped_from = skipped_from if skipped else plan.latest
        skipped_to, skipped = plan.latest, skipped + 1
    return ClaimPlan(plan, grace, run_at, skipped, skipped_from, skipped_to)


def retry_delay(task: Task, run: Run, *, crashed: bool) -> float | None:
    """Seconds until the next attempt of `run`'s occurrence per the task's policy (None: no
    next attempt): `max_retries` with exponential backoff after a failure; after a crash,
    with `on_crash = "retry"`, right away and at least once."""
    if crashed:
        allowed = task.on_crash == "retry" and run.attempt < 1 + max(task.max_retries, 1)
        return 0.0 if allowed else None
    if run.attempt < 1 + task.max_retries:
        return task.retry_backoff_seconds * (2 ** (run.attempt - 1))
    return None


# Runs that will not change.
FINISHED = "status IN ('succeeded', 'incomplete', 'failed', 'expired', 'skipped')"
# A task with a run in one of these is not started again (one run of a task at a time).
HOLDING = "('running', 'parked')"


class StoreBase:
    """The part of a scheduler store that is the same SQL in SQLite and PostgreSQL.

    A store names its dialect's pieces: its table names (`TASKS`, `RUNS`: constants, never
    input), its driver's placeholder (`MARK`), how list_tasks breaks ties in creation order
    and how OFFSET goes without LIMIT; and it implements `_query` (rows as dicts),
    `_write` (a write transaction, yielding something with `execute(sql, params)` that
    returns a cursor), `_locked_task` (a task read so that no other writer changes it before
    the transaction ends: the whole database under SQLite's BEGIN IMMEDIATE, the row under
    PostgreSQL's FOR UPDATE) and `_delete_runs`.

    Shared statements are written once with `?` marks and `{tasks}` / `{runs}` for the table
    names; `_sql` makes them the dialect's (values always go as parameters).
    """

    TASKS: ClassVar[str]
    RUNS: ClassVar[str]
    EFFECTS: ClassVar[str]
    MARK: ClassVar[str]  # "?" for sqlite3, "%s" for psycopg
    TASK_ORDER: ClassVar[str]  # list_tasks' order: creation time, then insertion
    NO_LIMIT: ClassVar[str] = ""  # what an OFFSET without a LIMIT needs before it
    _statements: ClassVar[dict[str, str]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._statements = {}  # one cache of statements per dialect

    def _sql(self, template: str) -> str:
        sql = self._statements.get(template)
        if sql is None:
            if "%" in template:  # psycopg would read it as a placeholder
                raise ValueError(f"no % in a shared statement: {template!r}")
            sql = template.format(tasks=self.TASKS, runs=self.RUNS,
                                  effects=self.EFFECTS).replace("?", self.MARK)
            self._statements[template] = sql
        return sql

    # --- the dialect's pieces ------------------------------------------------------------
    def _query(self, sql: str, params: tuple | dict = ()) -> list[dict[str, Any]]:
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[Any]:
        raise NotImplementedError

    def _locked_task(self, db: Any, task_id: str) -> Task | None:
        raise NotImplementedError

    def _delete_runs(self, run_ids: list[int]) -> int:
        """Delete these runs if they are finished, in one short write transaction."""
        raise NotImplementedError

    def _holds(self, db: Any, run_id: int, epoch: int, owner: str | None) -> bool:
        """Whether `owner` still holds the run (inside a write transaction)."""
        raise NotImplementedError

    @staticmethod
    def _row(db: Any, sql: str, params: tuple) -> dict[str, Any] | None:
        """The first row of a statement run on a transaction's connection or cursor."""
        cursor = db.execute(sql, params)
        row = cursor.fetchone()
        if row is None or isinstance(row, dict):
            return row
        return dict(zip([d[0] for d in cursor.description], row, strict=True))

    # --- tasks -------------------------------------------------------------------------
    def get_task(self, task_id: str) -> Task:
        rows = self._query(self._sql("SELECT * FROM {tasks} WHERE id = ?"), (task_id,))
        if not rows:
            raise TaskNotFoundError(task_id)
        return _task(rows[0])

    def list_tasks(self, status: str | None = None, limit: int | None = None,
                   offset: int = 0) -> list[Task]:
        """Tasks in creation order; `limit` and `offset` page through them."""
        sql, params = "SELECT * FROM {tasks}", []
        if status:
            sql += " WHERE status = ?"
            params.append(status)
        sql += " ORDER BY " + self.TASK_ORDER
        if limit:
            sql += " LIMIT ?"
            params.append(int(limit))
        if offset:
            sql += (self.NO_LIMIT if not limit else "") + " OFFSET ?"
            params.append(max(int(offset), 0))
        return [_task(r) for r in self._query(self._sql(sql), tuple(params))]

    def longest_timeout(self) -> tuple[str, float] | None:
        """(task id, timeout) of the active or paused task with the longest timeout."""
        rows = self._query(self._sql("SELECT id, timeout_seconds FROM {tasks} WHERE status IN "
                                     "('active', 'paused') AND timeout_seconds IS NOT NULL "
                                     "ORDER BY timeout_seconds DESC LIMIT 1"))
        return (rows[0]["id"], float(rows[0]["timeout_seconds"])) if rows else None

    def count_tasks(self) -> dict[str, int]:
        rows = self._query(self._sql("SELECT status, count(*) AS n FROM {tasks} GROUP BY status"))
        return {r["status"]: r["n"] for r in rows}

    def set_status(self, task_id: str, status: str, *, allowed_from: tuple[str, ...],
                   now: float, next_run: Callable[[Task], float | None] | None = None,
                   reason: str = "") -> Task:
        """Change a task's status (pause/resume/cancel) atomically; pending retries of a task
        that stops being active are recorded as skipped."""
        with self._write() as db:
            task = self._locked_task(db, task_id)
            if task is None:
                raise TaskNotFoundError(task_id)
            if task.status not in allowed_from:
                raise UserError(f"task {task_id} is {task.status}; this works only for "
                                f"{' or '.join(allowed_from)} tasks")
            if next_run is not None:
                task.next_run = next_run(task)
            elif status != "active":
                task.next_run = None
            task.status = status
            db.execute(self._sql("UPDATE {tasks} SET status = ?, next_run = ?, anchor = ?, "
                                 "updated_at = ? WHERE id = ?"),
                       (status, task.next_run, task.anchor, now, task_id))
            if status != "active":
                db.execute(self._sql("UPDATE {runs} SET status = 'skipped', finished_at = ?, "
                                     "error = ? WHERE task_id = ? AND status = 'pending'"),
                           (now, f"not run: {reason or 'task ' + status}", task_id))
        return task

    def delete_task(self, task_id: str) -> None:
        with self._write() as db:
            if self._locked_task(db, task_id) is None:
                raise TaskNotFoundError(task_id)
            db.execute(self._sql("DELETE FROM {runs} WHERE task_id = ?"), (task_id,))
            db.execute(self._sql("DELETE FROM {tasks} WHERE id = ?"), (task_id,))

    # --- runs --------------------------------------------------------------------------
    def has_scheduled_run(self, task_id: str) -> bool:
        """Whether any occurrence of the task was claimed or skipped (manual runs aside)."""
        return bool(self._query(self._sql("SELECT 1 FROM {runs} WHERE task_id = ? AND "
                                          "trigger != 'manual' LIMIT 1"), (task_id,)))

    def get_run(self, run_id: int) -> Run:
        rows = self._query(self._sql("SELECT * FROM {runs} WHERE id = ?"), (run_id,))
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
        sql = "SELECT * FROM {runs}" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC"
        if limit:
            sql += " LIMIT ?"
            params.append(int(limit))
        return [_run(r) for r in self._query(self._sql(sql), tuple(params))]

    # --- side effects (jarvis.tools.fence.EffectLedger) ---------------------------------
    def begin_effect(self, key: str, *, attempt: int, epoch: int, tool: str, target: str,
                     run_id: int | None = None, owner: str | None = None,
                     take_unconfirmed: bool = False) -> Effect | None:
        """Record that the effect `key` is being sent (see EffectLedger): None when recorded
        now (send it), else the earlier record (do not). With `owner`, only while the run
        `run_id` is still held by `owner` with `epoch`, checked in the same transaction: a run
        whose lease was taken gets RunFenced and sends nothing."""
        now = time.time()
        target = target[:MAX_EFFECT_TARGET]
        with self._write() as db:
            if owner is not None and not self._holds(db, run_id or 0, epoch, owner):
                raise RunFenced(f"scheduled run {run_id} (epoch {epoch}) no longer holds its "
                                f"lease: its side effect was not started")
            inserted = db.execute(self._sql(
                "INSERT INTO {effects} (key, run_id, attempt, epoch, tool, target, status, "
                "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'sending', ?, ?) "
                "ON CONFLICT (key) DO NOTHING"),
                (key, run_id, attempt, epoch, tool, target, now, now)).rowcount
            if inserted == 1:
                return None
            row = self._row(db, self._sql("SELECT * FROM {effects} WHERE key = ?"), (key,))
            if row is None:  # pragma: no cover - deleted in between by retention
                return None
            prior = _effect(row)
            takeable = ("failed",) + (("sending", "unknown") if take_unconfirmed else ())
            if prior.status in takeable:
                # Nothing arrived (failed), or the receiver de-duplicates on the key: send again
                # under the same key, recorded as this attempt's.
                db.execute(self._sql(
                    "UPDATE {effects} SET status = 'sending', run_id = ?, attempt = ?, epoch = ?, "
                    "detail = ?, updated_at = ? WHERE key = ?"),
                    (run_id, attempt, epoch, f"sent again by attempt {attempt} after "
                     f"{prior.status} ({prior.detail or 'no details'})"[:MAX_EFFECT_TARGET],
                     now, key))
                return None
            if prior.status == "sending":
                # Begun and never confirmed: its process died (or lost its lease) in between,
                # so it may have arrived. Not sent again; say so in the record.
                db.execute(self._sql(
                    "UPDATE {effects} SET status = 'unknown', detail = ?, updated_at = ? "
                    "WHERE key = ? AND status = 'sending'"),
                    (f"attempt {prior.attempt} began sending it and never confirmed it; "
                     f"attempt {attempt} did not send it again", now, key))
            return prior

    def finish_effect(self, key: str, *, status: str, detail: str | None = None) -> None:
        """Confirm how the send of `key` ended: "sent" or "failed" (or "unknown")."""
        if status not in ("sent", "failed", "unknown"):
            raise ValueError(f"an effect ends sent, failed or unknown, not {status!r}")
        with self._write() as db:
            db.execute(self._sql("UPDATE {effects} SET status = ?, detail = ?, updated_at = ? "
                                 "WHERE key = ?"), (status, detail, time.time(), key))

    def get_effect(self, key: str) -> Effect | None:
        rows = self._query(self._sql("SELECT * FROM {effects} WHERE key = ?"), (key,))
        return _effect(rows[0]) if rows else None

    def list_effects(self, run_ids: list[int] | None = None) -> list[Effect]:
        """Effect records, oldest first (of these runs' attempts, when given)."""
        rows = self._query(self._sql("SELECT * FROM {effects} ORDER BY created_at, key"))
        effects = [(_effect(r), r.get("run_id")) for r in rows]
        return [e for e, run in effects if run_ids is None or run in run_ids]

    def prune_runs(self, *, now: float, max_age: float | None = None,
                   keep_per_task: int | None = None, batch: int = 500,
                   max_rows: int = 200_000) -> int:
        """Delete finished runs older than `max_age` seconds and/or beyond the newest
        `keep_per_task` of each task ([scheduler] keep_runs); returns how many were deleted.

        Never deletes a pending, dispatched or running run, nor the newest scheduled and the
        newest manual run of a task (they answer "did this occurrence run?" and the task's
        last outcome). The runs to delete are found by one read (no write lock), then deleted
        by id in batches of `batch`, one short write transaction each, so that claims are not
        held up; at most `max_rows` per call (the rest goes next time). A run found this way
        stays deletable: finished runs do not change, and newer runs only push it further back.
        """
        if max_age is None and keep_per_task is None:
            return 0
        rules, params = [], []
        if max_age is not None:
            rules.append(f"SELECT id FROM {{runs}} WHERE {FINISHED} AND "
                         f"coalesce(finished_at, started_at, scheduled_for) < ?")
            params.append(now - max_age)
        if keep_per_task is not None:
            rules.append(f"SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY task_id "
                         f"ORDER BY id DESC) AS newer FROM {{runs}} WHERE {FINISHED}) ranked "
                         f"WHERE newer > ?")
            params.append(int(keep_per_task))
        victims = [row["id"] for row in self._query(self._sql(
            f"SELECT id FROM ({' UNION '.join(rules)}) old WHERE id NOT IN (SELECT max(id) FROM "
            f"{{runs}} GROUP BY task_id, trigger = 'manual') ORDER BY id LIMIT ?"),
            (*params, int(max_rows)))]
        deleted = 0
        for at in range(0, len(victims), batch):
            deleted += self._delete_runs(victims[at:at + batch])
        return deleted

    def _after_attempt(self, db: Any, run: Run, *, now: float, retry: bool, crashed: bool,
                       min_retry_delay: float = 0.0) -> None:
        """Queue the next attempt when the policy says so; update the task's summary. Runs in
        the transaction that ended the attempt, with the task locked (`_locked_task`), so a
        pause or cancel cannot slip in between; the unique occurrence key makes a second
        queueing of the same attempt a no-op."""
        task = self._locked_task(db, run.task_id)
        if task is None:
            return
        outcome = run.status
        queued = False
        if retry and task.status == "active" and run.trigger != "manual":
            delay = retry_delay(task, run, crashed=crashed)
            if delay is not None:
                db.execute(self._sql(
                    "INSERT INTO {runs} (task_id, scheduled_for, attempt, status, trigger, "
                    "run_after) VALUES (?, ?, ?, 'pending', ?, ?) ON CONFLICT DO NOTHING"),
                    (task.id, run.scheduled_for, run.attempt + 1,
                     "recovery" if crashed else "retry", now + max(delay, min_retry_delay)))
                queued = True
                outcome = f"{run.status} (retry queued)"
        status = task.status
        if (task.schedule_type == "once" and task.next_run is None and not queued
                and status == "active" and run.trigger != "manual"):
            status = "completed"
        db.execute(self._sql("UPDATE {tasks} SET last_outcome = ?, status = ?, updated_at = ? "
                             "WHERE id = ?"), (outcome, status, now, task.id))
