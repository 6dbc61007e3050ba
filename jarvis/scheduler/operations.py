"""The operations on scheduled tasks: create (validated, with the quotas of a task a model
schedules), list, pause, resume, cancel, and run one now in this thread.

A part of TaskScheduler (jarvis.scheduler.scheduler), whose __init__ sets what these use (the
store, the clock, the [scheduler] limits).
"""

from __future__ import annotations

import re
import secrets
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from jarvis.errors import JarvisError, UserError
from jarvis.scheduler.records import CRASH_POLICIES, TASK_STATUSES, Run, Task
from jarvis.scheduler.schedules import describe_seconds, parse_schedule
from jarvis.scheduler.store import QuotaError, TaskBusyError, storable
from jarvis.scheduler.store_common import TaskIdTaken

MAX_PROMPT_CHARS = 20_000
MAX_TOOLS = 64
MAX_TIMEOUT_SECONDS = 24 * 3600.0
MAX_RETRIES = 10
# fullmatch, never match with `$`: `$` also matches before a trailing newline ('simple\n').
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class TaskOperations:
    """Create, inspect, pause, resume, cancel and run tasks now (a part of TaskScheduler)."""
    def _workspace(self) -> str | None:
        """The config.toml of the workspace tasks made here belong to (the scheduler's config,
        else its system's): their runs use it, wherever the daemon was started."""
        config = self.config if self.config is not None else getattr(self.system, "config", None)
        source = getattr(config, "source", None)
        return str(source) if source is not None else None

    def create_task(self, prompt: str, schedule_type: str, schedule_value: str, *,
                    timezone: str = "UTC", agent: str | None = None,
                    tools: list[str] | str | None = None,
                    approved_tools: list[str] | str | None = None,
                    timeout_seconds: float | None = None, max_retries: int = 0,
                    retry_backoff_seconds: float = 30.0, on_crash: str = "retry",
                    grace_seconds: float | None = None,
                    metadata: dict[str, Any] | None = None,
                    created_by: str = "person", notify: str | None = None,
                    trust: dict[str, Any] | None = None, budget: Any = None) -> Task:
        """Validate and store a new active task; raise UserError naming what is wrong.

        `created_by="model"` (what the schedule_task tool passes for a model's call) applies
        the [scheduler] model_* quotas, refusing with a QuotaError; it is recorded on the task.
        `trust` is what the creating run had read (docs/trust.md; the tool passes it): a task
        born in a tainted run starts each of its runs tainted. `budget` (a Budget or {"usd",
        "seconds", "tool_calls"}) bounds each run (jarvis.tools.budget), kept in the metadata.
        """
        if created_by not in ("person", "model"):
            raise UserError(f"created_by must be 'person' or 'model', not {created_by!r}")
        now = self.clock()
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError("the task prompt is empty; give the question or instruction to run")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise UserError(f"the task prompt is {len(prompt)} characters; the limit is "
                            f"{MAX_PROMPT_CHARS}")
        if storable(prompt) != prompt:
            # The same refusal on both stores: PostgreSQL cannot hold NUL, neither store can
            # encode a lone surrogate (it was a raw DataError / UnicodeEncodeError).
            raise UserError("the task prompt contains a NUL character or a lone surrogate "
                            "(invalid Unicode); remove it")
        if created_by == "model" and len(prompt) > self.model_max_prompt_chars:
            raise QuotaError(f"refused: the task prompt is {len(prompt)} characters; a task a "
                             f"model schedules may have at most {self.model_max_prompt_chars} "
                             f"([scheduler] model_max_prompt_chars)")
        schedule = parse_schedule(schedule_type, schedule_value, timezone, now=now)
        if created_by == "model":
            self._check_model_interval(schedule, now)
        tool_names = _names(tools, "tools")
        approved = _names(approved_tools, "approved tools")
        if approved and not tool_names:
            # Without --tools the agent's default tools apply, and the approval would reach
            # whatever those are: approvals only name tools the task lists.
            raise UserError(f"--approve-tools needs --tools: list the tools the task may use "
                            f"(approved: {', '.join(approved)}), e.g. --tools "
                            f"{','.join(approved)} --approve-tools {','.join(approved)}")
        stray = [n for n in approved if n not in tool_names]
        if stray:
            raise UserError(f"approved tool(s) {', '.join(stray)} are not among the task's tools "
                            f"({', '.join(tool_names)}); add them to --tools or drop the approval")
        if agent is not None and (not isinstance(agent, str) or not _TOOL_NAME.fullmatch(agent)):
            raise UserError(f"invalid agent name {agent!r}")
        timeout = self.default_timeout if timeout_seconds is None else float(timeout_seconds)
        if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
            raise UserError(f"timeout must be more than 0 seconds and at most "
                            f"{describe_seconds(MAX_TIMEOUT_SECONDS)}, got {timeout_seconds}")
        if (not isinstance(max_retries, int) or isinstance(max_retries, bool)
                or not 0 <= max_retries <= MAX_RETRIES):
            raise UserError(f"retries must be an integer from 0 to {MAX_RETRIES}, got {max_retries!r}")
        if not 0 <= float(retry_backoff_seconds) <= MAX_TIMEOUT_SECONDS:
            raise UserError(f"retry backoff must be 0 seconds to "
                            f"{describe_seconds(MAX_TIMEOUT_SECONDS)}")
        if on_crash not in CRASH_POLICIES:
            raise UserError(f"on_crash must be one of {', '.join(CRASH_POLICIES)}, got {on_crash!r}")
        # `not x >= 0` also rejects NaN, which would otherwise skip every missed run.
        if grace_seconds is not None and not float(grace_seconds) >= 0:
            raise UserError(f"grace seconds must be 0 or more, got {grace_seconds}")
        notify = self._check_notify(notify)
        from jarvis.tools.budget import Budget

        limits = Budget.of(budget if budget is not None else (metadata or {}).get("budget"))
        task = Task(
            id="", prompt=prompt, schedule_type=schedule.type, schedule_value=schedule.value,
            timezone=schedule.timezone, agent=agent or None, tools=tool_names,
            approved_tools=approved, status="active", created_at=now, anchor=now,
            timeout_seconds=timeout, max_retries=max_retries,
            retry_backoff_seconds=float(retry_backoff_seconds), on_crash=on_crash,
            grace_seconds=None if grace_seconds is None else float(grace_seconds),
            metadata=dict(metadata or {}), notify=notify, workspace=self._workspace(),
            trust=dict(trust) if trust else None,
        )
        task.metadata.pop("budget", None)
        if not limits.empty:
            task.metadata["budget"] = limits.to_dict()
        if created_by == "model":
            task.metadata["created_by"] = "model"
        else:
            task.metadata.pop("created_by", None)  # only this argument says who created it
        task.next_run = (schedule.next_interval(now, now) if schedule.type == "interval"
                         else max(schedule.next_after(now - 5) or now, now)
                         if schedule.type == "once" else schedule.next_after(now))
        for _ in range(8):
            task.id = secrets.token_hex(4)
            try:
                self.store.add_task(task, max_live=self.model_max_active_tasks
                                    if created_by == "model" else None)
                break
            except (sqlite3.IntegrityError, TaskIdTaken):
                continue  # id collision: draw another
        else:
            raise JarvisError("could not allocate a task id; try again")
        self._wake.set()
        return task

    def _check_model_interval(self, schedule: Any, now: float) -> None:
        """Refuse a schedule a model set that runs more often than model_min_interval_seconds."""
        least = self.model_min_interval_seconds
        if least <= 0:
            return
        if schedule.type == "once":
            # A one-off "now" whose run schedules the next one-off "now" (its tools include
            # schedule_task) is a task repeating as fast as the engine answers: a one-off
            # counts from its creation, so a chain runs at most once per interval.
            from jarvis.scheduler.schedules import parse_iso

            wait = parse_iso(schedule.value, schedule.timezone) - now
            if wait < least:
                raise QuotaError(f"refused: this one-off task would run in {max(wait, 0):.0f} s; "
                                 f"a task a model schedules may run no sooner than {least:g} s "
                                 f"from now ([scheduler] model_min_interval_seconds)")
            return
        if schedule.type == "interval":
            gap = float(schedule.value)
        else:
            # A cron gap shows within one matching hour (at most 60 minutes fire), so the next
            # 121 occurrences hold its shortest gap, wrap-around to the next hour included.
            gap = float("inf")
            last = schedule.next_after(now)
            for _ in range(120):
                if last is None:
                    break
                nxt = schedule.next_after(last)
                if nxt is None:
                    break
                gap = min(gap, nxt - last)
                last = nxt
        if gap < least:
            raise QuotaError(f"refused: this schedule runs every {gap:g} s; a task a model "
                             f"schedules may run at most once every {least:g} s ([scheduler] "
                             f"model_min_interval_seconds)")

    def _check_notify(self, notify: Any) -> str | None:
        """A task's channel name: well formed, and configured when the config is known."""
        if notify is None or notify == "":
            return None
        if not isinstance(notify, str) or not _TOOL_NAME.match(notify):
            raise UserError(f"invalid channel name {str(notify)[:64]!r}")
        channels = getattr(self.config, "channels", None)
        if channels is not None and notify not in channels:
            listed = ", ".join(sorted(channels)) or "none (add a [channels.NAME] table)"
            raise UserError(f"unknown channel {notify!r} for --notify; configured channels: "
                            f"{listed}")
        return notify

    def add(self, prompt: str, *, cron: str | None = None, every: float | None = None,
            at: str | None = None, tz: str = "UTC", **options: Any) -> Task:
        """Convenience form: exactly one of `cron=`, `every=` (seconds) or `at=` (ISO 8601)."""
        given = [(k, v) for k, v in (("cron", cron), ("interval", every), ("once", at))
                 if v is not None]
        if len(given) != 1:
            raise UserError("give exactly one schedule: cron=EXPR, every=SECONDS or at=ISO_TIME")
        kind, value = given[0]
        return self.create_task(prompt, kind, str(value), timezone=tz, **options)

    def get_task(self, task_id: str) -> Task:
        return self.store.get_task(_known_id(task_id))

    def list_tasks(self, status: str | None = None, *, limit: int | None = None,
                   offset: int = 0) -> list[Task]:
        """Tasks in creation order (all of them, or a page: `limit` from `offset`)."""
        if status is not None and status not in TASK_STATUSES:
            raise UserError(f"unknown status {status!r}; use one of: {', '.join(TASK_STATUSES)}")
        for name, value in (("limit", limit), ("offset", offset)):
            _check_page(name, value)
        return self.store.list_tasks(status, limit=limit, offset=offset)

    def count_tasks(self, status: str | None = None) -> int:
        counts = self.store.count_tasks()
        return counts.get(status, 0) if status else sum(counts.values())

    def pause_task(self, task_id: str) -> Task:
        """Stop scheduling a task (kept, and resumable); a run in progress finishes."""
        return self.store.set_status(_known_id(task_id), "paused", allowed_from=("active",),
                                     now=self.clock(), reason="task paused")

    def resume_task(self, task_id: str) -> Task:
        """Schedule a paused task again; its next run is recomputed from now."""
        now = self.clock()

        def next_run(task: Task) -> float | None:
            if task.schedule_type == "interval":
                task.anchor = now
                return task.next_after(now)
            if task.schedule_type == "once":
                at = task.schedule.next_after(now - 10**10) or now
                if self.store.has_scheduled_run(task.id):
                    # Its occurrence was already claimed (e.g. paused mid-run): keep that
                    # occurrence, which the unique run key will not run again; the next
                    # claim marks the task completed.
                    return at
                # A one-off whose time passed while paused runs as soon as it is resumed.
                return max(at, now)
            return task.next_after(now)

        task = self.store.set_status(_known_id(task_id), "active", allowed_from=("paused",), now=now,
                                     next_run=next_run)
        self._wake.set()
        return task

    def cancel_task(self, task_id: str) -> Task:
        """Cancel for good: status "cancelled", no next run; queued retries are dropped."""
        return self.store.set_status(_known_id(task_id), "cancelled",
                                     allowed_from=("active", "paused", "completed"),
                                     now=self.clock(), reason="task cancelled")

    def list_runs(self, task_id: str | None = None, *, status: str | None = None,
                  limit: int | None = 50) -> list[Run]:
        if task_id is not None:
            self.store.get_task(_known_id(task_id))  # an unknown id is an error, not an empty list
        _check_page("limit", limit)
        return self.store.list_runs(task_id, status=status, limit=limit)

    def run_now(self, task_id: str, *, wait: bool = False,
                on_wait: Callable[[Run], None] | None = None) -> Run:
        """Run a task once right now in this thread (outside its schedule); returns the run.

        Never beside another run of the task: raises TaskBusyError while one is going on, or
        with `wait=True` waits for it to end (calling `on_wait(busy_run)` once) and runs then.
        """
        task = self.store.get_task(_known_id(task_id))
        if task.status == "cancelled":
            raise UserError(f"task {task_id} is cancelled; create a new task instead")
        told = False
        while True:
            try:
                claim = self.store.claim_manual(task, now=self.clock(), owner=self.owner,
                                                lease_seconds=self.lease_seconds)
                break
            except TaskBusyError as busy:
                if not wait:
                    raise
                if not told and on_wait is not None:
                    on_wait(busy.run)
                told = True
                time.sleep(min(self.poll_seconds, 0.25))
        return self._execute(claim)


def _names(value: list[str] | str | None, what: str) -> list[str]:
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(n).strip() for n in items if str(n).strip()]
    if len(names) > MAX_TOOLS:
        raise UserError(f"too many {what}: {len(names)} (limit {MAX_TOOLS})")
    for name in names:
        if not _TOOL_NAME.fullmatch(name):
            raise UserError(f"invalid tool name {name!r} in {what}: use letters, digits, '_' or '-'")
    return list(dict.fromkeys(names))


MAX_PAGE = 10**12  # past any real table; above 2**63 both databases fail with a raw error


def _check_page(name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not 0 <= value <= MAX_PAGE):
        raise UserError(f"{name} must be a whole number from 0 to {MAX_PAGE}, got {value!r}")


def _known_id(task_id: Any) -> str:
    """`task_id` if it can name a task; else TaskNotFoundError, as on SQLite, instead of
    PostgreSQL's DataError for a NUL (or either store's UnicodeEncodeError for a lone
    surrogate) in an id a model passed to a tool."""
    from jarvis.scheduler.store import TaskNotFoundError

    if not isinstance(task_id, str) or storable(task_id) != task_id:
        raise TaskNotFoundError(repr(task_id)[1:-1][:80] if isinstance(task_id, str)
                                else str(type(task_id).__name__))
    return task_id
