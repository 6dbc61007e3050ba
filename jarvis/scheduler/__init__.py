"""Scheduled background tasks: a prompt run on a schedule through the same path as `jarvis ask`.

    from jarvis.scheduler import SchedulerStore, TaskScheduler
    scheduler = TaskScheduler(store=SchedulerStore())
    scheduler.add("Summarize the news", cron="0 8 * * *", tz="Europe/Paris")

Modules: schedules (once/interval/cron), records (Task, Run), ledger (the store protocol and
which store a config picks), store (SQLite), store_postgres (PostgreSQL, shared between
machines), store_common (what both stores share), addresses (store and broker URLs without
their secrets), runner (how a run executes), dispatch (where: Celery workers), celery_app and
worker (`jarvis worker`), scheduler (TaskScheduler, assembled from operations, the daemon
loop and result delivery), tools (agent tools).
Names are imported on first use so that `import jarvis.scheduler` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SchedulerStore": "jarvis.scheduler.store",
    "PostgresStore": "jarvis.scheduler.store_postgres",
    "SchedulerLedger": "jarvis.scheduler.ledger",
    "DispatchLedger": "jarvis.scheduler.ledger",
    "open_store": "jarvis.scheduler.ledger",
    "RunDispatcher": "jarvis.scheduler.dispatch",
    "CeleryDispatcher": "jarvis.scheduler.dispatch",
    "TaskNotFoundError": "jarvis.scheduler.store",
    "TaskBusyError": "jarvis.scheduler.store",
    "TaskScheduler": "jarvis.scheduler.scheduler",
    "Task": "jarvis.scheduler.records",
    "Run": "jarvis.scheduler.records",
    "TaskRunner": "jarvis.scheduler.runner",
    "RunOutcome": "jarvis.scheduler.runner",
    "SdkRunner": "jarvis.scheduler.runner",
    "Schedule": "jarvis.scheduler.schedules",
    "ScheduleError": "jarvis.scheduler.schedules",
    "parse_schedule": "jarvis.scheduler.schedules",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'jarvis.scheduler' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
