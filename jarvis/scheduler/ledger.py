"""The scheduler's ledger: the store protocol, and which store a config chooses.

Two implementations: `SchedulerStore` (SQLite, jarvis.scheduler.store: one machine, the
default) and `PostgresStore` (jarvis.scheduler.store_postgres: several machines, chosen by
`[scheduler] store = "postgresql://user@host:port/db"`). The scheduler and the CLI use only the
methods below; a store that can also hand runs to remote workers implements `DispatchLedger`
(the PostgreSQL one does), which the Celery runner requires.

Exactly-once recording comes from here, never from a queue: one row per (task, occurrence,
attempt), claims and finishes are compare-and-set on the row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from jarvis.errors import UserError
from jarvis.scheduler.addresses import redact
from jarvis.scheduler.addresses import redact_error as redact_error
from jarvis.scheduler.store_common import StoreUnavailable as StoreUnavailable
from jarvis.scheduler.store_common import TaskIdTaken as TaskIdTaken

if TYPE_CHECKING:
    from jarvis.scheduler.records import Run, Task
    from jarvis.scheduler.store import Claim


@runtime_checkable
class SchedulerLedger(Protocol):
    """What the scheduler, its tools and the CLI need from a store."""

    path: Any  # where it is, for logs: a file path or a URL without its password

    def add_task(self, task: Task, *, max_live: int | None = None) -> Task: ...
    def get_task(self, task_id: str) -> Task: ...
    def list_tasks(self, status: str | None = None, limit: int | None = None,
                   offset: int = 0) -> list[Task]: ...
    def count_tasks(self) -> dict[str, int]: ...
    def set_status(self, task_id: str, status: str, *, allowed_from: tuple[str, ...],
                   now: float, next_run: Callable[[Task], float | None] | None = None,
                   reason: str = "") -> Task: ...
    def has_scheduled_run(self, task_id: str) -> bool: ...
    def get_run(self, run_id: int) -> Run: ...
    def list_runs(self, task_id: str | None = None, *, status: str | None = None,
                  limit: int | None = 50) -> list[Run]: ...
    def next_wake(self) -> float | None: ...
    def claim_due(self, *, now: float, owner: str, lease_seconds: float, limit: int,
                  default_grace: float) -> list[Claim]: ...
    def claim_manual(self, task: Task, *, now: float, owner: str,
                     lease_seconds: float) -> Claim: ...
    def heartbeat(self, owner: str, lease_until: float) -> int: ...
    def renew(self, run_id: int, epoch: int, owner: str, lease_seconds: float) -> bool: ...
    def finish_run(self, run_id: int, owner: str, *, now: float, success: bool,
                   answer: str | None = None, error: str | None = None,
                   error_type: str | None = None, run_log_id: str | None = None,
                   retry: bool = True) -> Run | None: ...
    def recover(self, *, now: float, **options: Any) -> list[Run]: ...
    def interrupt(self, run_id: int, owner: str, *, now: float, reason: str) -> Run | None: ...
    def record_delivery(self, run_id: int, delivery: dict[str, Any]) -> Run: ...
    # Runs that wait for the person (jarvis.approvals): park, list, continue once, expire.
    def park_run(self, run_id: int, owner: str, *, now: float, run_log_id: str | None,
                 note: str, epoch: int | None = None, log_entry: Any = None) -> Run | None: ...
    def parked_runs(self, limit: int = 500) -> list[Run]: ...
    def claim_parked(self, run_id: int, *, now: float, owner: str, lease_seconds: float,
                     dispatch: bool = False) -> Claim | None: ...
    def expire_run(self, run_id: int, *, now: float, error: str) -> Run | None: ...
    # Side effects of scheduled runs (jarvis.tools.fence.EffectLedger).
    def begin_effect(self, key: str, *, attempt: int, epoch: int, tool: str, target: str,
                     run_id: int | None = None, owner: str | None = None,
                     take_unconfirmed: bool = False) -> Any: ...
    def finish_effect(self, key: str, *, status: str, detail: str | None = None) -> None: ...
    def prune_runs(self, *, now: float, max_age: float | None = None,
                   keep_per_task: int | None = None, batch: int = 500,
                   max_rows: int = 200_000) -> int: ...
    def close(self) -> None: ...


@runtime_checkable
class DispatchLedger(Protocol):
    """A ledger that can hand runs to workers on other machines, fenced by an epoch.

    dispatch: the daemon claims due occurrences as "dispatched" (epoch 1) and sends
    (run id, attempt, epoch) to a queue. start: a worker moves the run to "running" only if
    its (id, epoch, status) still match, so a duplicate or stale delivery is dropped. renew /
    finish: the same compare-and-set, with the worker as owner. reap: dispatched runs that no
    worker started are sent again with the next epoch when they were never sent, when the
    broker's queue shows their message lost, or past the long safety deadline; running runs
    whose lease expired are recorded as crashed and re-run per the task's on_crash policy
    (`recover`).
    """

    def claim_for_dispatch(self, *, now: float, owner: str, dispatch_seconds: float, limit: int,
                           default_grace: float) -> list[Claim]: ...
    def mark_sent(self, runs: list[tuple[int, int]]) -> int: ...
    def redispatch_expired(self, *, owner: str, dispatch_seconds: float, limit: int,
                           unsent_seconds: float = ...,
                           lost_after: float | None = None) -> list[Claim]: ...
    def start_dispatched(self, run_id: int, epoch: int, owner: str,
                         lease_seconds: float) -> Claim | None: ...
    def renew(self, run_id: int, epoch: int, owner: str, lease_seconds: float) -> bool: ...
    def finish_dispatched(self, run_id: int, epoch: int, owner: str, *, success: bool,
                          answer: str | None = None, error: str | None = None,
                          error_type: str | None = None, run_log_id: str | None = None,
                          log_entry: dict[str, Any] | None = None,
                          min_retry_delay: float = 0.0) -> Run | None: ...
    def get_log_entry(self, run_log_id: str) -> dict[str, Any] | None: ...


def is_postgres_url(value: str) -> bool:
    return value.split("://", 1)[0].lower() in ("postgresql", "postgres")


def open_store(config: Any = None, *, create: bool = True) -> SchedulerLedger:
    """The store `config` chooses: [scheduler] store (a postgresql:// URL), else the SQLite
    file at [scheduler] db_path (default JARVIS_HOME/scheduler.db). `create=False`: a SQLite
    file that does not exist is a UserError (a reader must not leave an empty database)."""
    from jarvis.core.paths import state_path

    settings = getattr(config, "scheduler", None)
    url = (getattr(settings, "store", "") or "").strip()
    if url:
        if not is_postgres_url(url):
            raise UserError(f"[scheduler] store must be a postgresql://user@host:port/db URL "
                            f"(or empty for the SQLite file), got {redact(url)!r}")
        from jarvis.scheduler.store_postgres import PostgresStore

        return PostgresStore(url)
    from jarvis.scheduler.store import SchedulerStore

    db_path = getattr(settings, "db_path", "") or ""
    if db_path and config is not None and hasattr(config, "resolve_path"):
        db_path = str(config.resolve_path(db_path))
    path = state_path(db_path or None, "scheduler.db")
    if not create and not path.exists():
        raise UserError(f"no scheduler database at {path}")
    return SchedulerStore(path)
