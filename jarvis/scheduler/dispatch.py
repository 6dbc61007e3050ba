"""The runner interface of the scheduler daemon: where a claimed run is executed.

Local threads are the default (TaskScheduler's own pool, today's behaviour: the daemon runs
the TaskRunner itself). A `RunDispatcher` injected into the scheduler replaces that pool:
the daemon then only claims due runs as "dispatched" in a ledger that implements
`DispatchLedger` and hands them to `send`; whoever executes them records the outcome in the
ledger with a compare-and-set. `CeleryDispatcher` sends them to Celery workers
(`jarvis worker`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from jarvis.scheduler.store import Claim

log = logging.getLogger("jarvis.scheduler")


@runtime_checkable
class RunDispatcher(Protocol):
    """Sends claimed runs elsewhere to be executed.

    Optional, read with getattr: `expiry_seconds` (a sent run not started after this long is
    sent again whatever; default `dispatch_seconds`) and `waiting() -> int | None` (messages
    waiting in the queue now; 0 lets the daemon treat a run sent more than `dispatch_seconds`
    ago and still not started as lost)."""

    #: seconds a sent run may go unstarted, with nothing waiting in the queue, before it is
    #: presumed lost and sent again
    dispatch_seconds: float

    def send(self, claim: Claim) -> None:
        """Hand over one dispatched run; raise if it could not be sent (it is sent again
        shortly: claimed and never sent)."""
        ...

    def close(self) -> None: ...


class CeleryDispatcher:
    """Sends (run id, attempt, epoch) to Celery workers over the broker; each message expires
    after `expiry_seconds`, when the run, if still not started, is sent again anyway."""

    def __init__(self, broker: str, *, queue: str = "jarvis", dispatch_seconds: float = 300.0,
                 visibility_timeout: float | None = None,
                 expiry_seconds: float = 3600.0) -> None:
        from jarvis.scheduler.celery_app import make_app

        self.broker = broker
        self.queue = queue
        self.dispatch_seconds = float(dispatch_seconds)
        self.expiry_seconds = max(float(expiry_seconds), self.dispatch_seconds)
        self.visibility_timeout = visibility_timeout
        self.app = make_app(broker, queue=queue, visibility_timeout=visibility_timeout)
        self._too_long: set[str] = set()  # tasks warned about (timeout over visibility)

    @classmethod
    def from_config(cls, config: Any) -> CeleryDispatcher:
        settings = config.scheduler.celery
        return cls(settings.broker, queue=settings.queue,
                   dispatch_seconds=settings.dispatch_timeout,
                   visibility_timeout=settings.visibility_timeout,
                   expiry_seconds=settings.message_expiry)

    def check(self, store: Any = None) -> None:
        """One clear error now if the broker cannot be reached, or (with the ledger) if a task's
        timeout outlasts the broker's visibility timeout (the daemon's start)."""
        from jarvis.scheduler.celery_app import check_broker, check_visibility

        if store is not None:
            check_visibility(self.visibility_timeout, store)
        check_broker(self.app, self.broker)

    def waiting(self) -> int | None:
        """How many messages wait in the queue now (None: the broker cannot say)."""
        try:
            with self.app.connection_for_read() as conn:
                size = getattr(conn.default_channel, "_size", None)  # kombu's virtual channels
                return None if size is None else int(size(self.queue))
        except Exception:  # noqa: BLE001 - unknown: no evidence of a lost message
            return None

    def send(self, claim: Claim) -> None:
        from jarvis.scheduler.celery_app import (
            HARD_LIMIT_MARGIN,
            TASK_NAME,
            task_id_for,
            visibility_seconds,
        )

        run, task = claim.run, claim.task
        if (task.timeout_seconds + HARD_LIMIT_MARGIN > visibility_seconds(self.visibility_timeout)
                and task.id not in self._too_long):
            self._too_long.add(task.id)
            log.error("task %s: its timeout (%g s) outlasts [scheduler.celery] "
                      "visibility_timeout (%g s): Redis would hand its message to a second "
                      "worker while the first still runs it; raise visibility_timeout",
                      task.id, task.timeout_seconds,
                      visibility_seconds(self.visibility_timeout))
        self.app.send_task(
            TASK_NAME, args=(run.id, run.attempt, run.epoch), task_id=task_id_for(run.id, run.epoch),
            queue=self.queue, time_limit=int(task.timeout_seconds + HARD_LIMIT_MARGIN),
            expires=self.expiry_seconds,
            retry=True, retry_policy={"max_retries": 2, "interval_start": 0.2,
                                      "interval_step": 0.5, "interval_max": 1.0})

    def close(self) -> None:
        self.app.close()
