"""The scheduler's records: a Task (what to run and when) and a Run (one attempt at one
occurrence). Times are POSIX timestamps in UTC; `to_dict()` shows them as ISO 8601."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from jarvis.scheduler.schedules import Schedule, iso

TASK_STATUSES: tuple[str, ...] = ("active", "paused", "completed", "cancelled")
# "dispatched": sent to a Celery worker that has not started it yet (PostgreSQL ledger only).
# "incomplete": the run ended without an answer on a limit (INCOMPLETE_KINDS), not an error.
# "parked": stopped before a call that needs the person (jarvis.approvals); it holds its task
# (no other run of it starts) until it continues, or ends "expired" when nobody answered.
RUN_STATUSES: tuple[str, ...] = ("pending", "dispatched", "running", "parked", "succeeded",
                                 "incomplete", "failed", "expired", "skipped")
# Why a run stopped without an answer (its error_type): max_turns reached, or the loop guard
# ended it. Such a run is recorded "incomplete", never retried (it would stop the same way).
INCOMPLETE_KINDS: tuple[str, ...] = ("max_turns", "loop_guard", "schema", "budget")


def finished_status(success: bool, error_type: str | None) -> str:
    """The status a finished attempt is recorded with."""
    if success:
        return "succeeded"
    return "incomplete" if error_type in INCOMPLETE_KINDS else "failed"
CRASH_POLICIES: tuple[str, ...] = ("retry", "fail")


@dataclass(slots=True)
class Task:
    """A scheduled prompt with its own limits and policies."""

    id: str
    prompt: str
    schedule_type: str
    schedule_value: str
    timezone: str = "UTC"
    agent: str | None = None
    tools: list[str] = field(default_factory=list)
    approved_tools: list[str] = field(default_factory=list)
    status: str = "active"
    next_run: float | None = None
    last_run: float | None = None
    last_outcome: str | None = None
    created_at: float = 0.0
    anchor: float = 0.0
    timeout_seconds: float = 600.0
    max_retries: int = 0
    retry_backoff_seconds: float = 30.0
    on_crash: str = "retry"
    grace_seconds: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    notify: str | None = None  # channel that gets each finished run's answer or failure
    # What the run that created it had read (docs/trust.md): {"tainted", "private",
    # "tainted_by", "private_by", "run_id"}; None for a task a person created. A task born
    # in a tainted run starts every run tainted.
    trust: dict[str, Any] | None = None
    # The config.toml of the workspace the task was created in (None: no config file): its
    # runs use that config, whatever folder the daemon was started in.
    workspace: str | None = None

    @property
    def schedule(self) -> Schedule:
        return Schedule(self.schedule_type, self.schedule_value, self.timezone)  # type: ignore[arg-type]

    def next_after(self, after: float) -> float | None:
        """The task's first occurrence strictly after `after` (None: no more)."""
        schedule = self.schedule
        if schedule.type == "interval":
            return schedule.next_interval(self.anchor, after)
        return schedule.next_after(after)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.id,
            "prompt": self.prompt,
            "schedule_type": self.schedule_type,
            "schedule_value": self.schedule_value,
            "timezone": self.timezone,
            "schedule": self.schedule.describe(),
            "agent": self.agent,
            "tools": list(self.tools),
            "approved_tools": list(self.approved_tools),
            "status": self.status,
            "next_run": iso(self.next_run),
            "last_run": iso(self.last_run),
            "last_outcome": self.last_outcome,
            "created_at": iso(self.created_at),
            "timeout_seconds": self.timeout_seconds,
            "max_retries": self.max_retries,
            "retry_backoff_seconds": self.retry_backoff_seconds,
            "on_crash": self.on_crash,
            "grace_seconds": self.grace_seconds,
            "created_by": self.created_by,
            "notify": self.notify,
            "born_tainted": self.born_tainted,
            "workspace": self.workspace,
            "budget": (self.metadata or {}).get("budget"),  # each run's (jarvis.tools.budget)
        }

    @property
    def born_tainted(self) -> bool:
        """Created by a run that had read untrusted content: every run of it starts tainted."""
        return bool((self.trust or {}).get("tainted"))

    @property
    def created_by(self) -> str:
        """"model" for a task a model scheduled (the schedule_task tool), else "person"."""
        return str((self.metadata or {}).get("created_by") or "person")


@dataclass(slots=True)
class Run:
    """One attempt at one occurrence of a task (or a record of skipped occurrences).

    `trigger` is "schedule", "manual" (`jarvis schedule run`), "retry" or "recovery" (re-run
    after a daemon died mid-run). `skipped_count` > 0 on a "skipped" record that stands for
    that many missed occurrences, from `scheduled_for` to `skipped_until`. `epoch` is the
    fencing number of a run sent to workers: each (re)dispatch raises it, and a worker may only
    start or finish the run with the epoch it was sent.
    """

    id: int
    task_id: str
    scheduled_for: float
    attempt: int = 1
    status: str = "pending"
    trigger: str = "schedule"
    run_after: float | None = None
    claimed_by: str | None = None
    lease_until: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    answer: str | None = None
    error: str | None = None
    error_type: str | None = None
    run_log_id: str | None = None
    skipped_count: int = 0
    skipped_until: float | None = None
    # How sending the outcome to the task's channel went: {channel, status, attempts, error, at}
    delivery: dict[str, Any] | None = None
    epoch: int = 0
    # When it last parked waiting for the person (None: never). A claimed run with one is a
    # continuation: its runner resumes it from the parked state instead of starting over.
    parked_at: float | None = None
    resumes: int = 0  # continuations claimed (bounds re-continuing one whose process died)

    @property
    def idempotency_key(self) -> str:
        """Names the occurrence, the same for every attempt: a tool with external effects can
        de-duplicate on it (with `attempt` telling a re-run from the first)."""
        when = datetime.fromtimestamp(self.scheduled_for, UTC).isoformat(timespec="milliseconds")
        return f"{self.task_id}@{when}"

    @property
    def duration(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return self.finished_at - self.started_at

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.id,
            "task_id": self.task_id,
            "scheduled_for": iso(self.scheduled_for),
            "attempt": self.attempt,
            "idempotency_key": self.idempotency_key,
            "epoch": self.epoch,
            "status": self.status,
            "trigger": self.trigger,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "duration_seconds": None if self.duration is None else round(self.duration, 3),
            "answer": self.answer,
            "error": self.error,
            "error_type": self.error_type,
            "run_log_id": self.run_log_id,
            "claimed_by": self.claimed_by,
            "skipped_count": self.skipped_count,
            "skipped_until": iso(self.skipped_until),
            "delivery": None if self.delivery is None else
            {**self.delivery, "at": iso(self.delivery.get("at"))},
            "parked_at": iso(self.parked_at),
        }
