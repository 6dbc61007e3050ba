"""The runner interface of the scheduler daemon: where a claimed run is executed.

Local threads are the default (TaskScheduler's own pool, today's behaviour: the daemon runs
the TaskRunner itself). A `RunDispatcher` injected into the scheduler replaces that pool:
the daemon then only claims due runs as "dispatched" in a ledger that implements
`DispatchLedger` and hands them to `send`; whoever executes them records the outcome in the
ledger with a compare-and-set. `CeleryDispatcher` sends them to Celery workers
(`jarvis worker`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from jarvis.scheduler.store import Claim


@runtime_checkable
class RunDispatcher(Protocol):
    """Sends claimed runs elsewhere to be executed."""

    #: seconds a dispatched run may wait for a worker before it is sent again
    dispatch_seconds: float

    def send(self, claim: Claim) -> None:
        """Hand over one dispatched run; raise if it could not be sent (it is sent again
        after `dispatch_seconds`)."""
        ...

    def close(self) -> None: ...


class CeleryDispatcher:
    """Sends (run id, attempt, epoch) to Celery workers over the broker."""

    def __init__(self, broker: str, *, queue: str = "jarvis", dispatch_seconds: float = 300.0,
                 visibility_timeout: float | None = None) -> None:
        from jarvis.scheduler.celery_app import make_app

        self.broker = broker
        self.queue = queue
        self.dispatch_seconds = float(dispatch_seconds)
        self.app = make_app(broker, queue=queue, visibility_timeout=visibility_timeout)

    @classmethod
    def from_config(cls, config: Any) -> CeleryDispatcher:
        settings = config.scheduler.celery
        return cls(settings.broker, queue=settings.queue,
                   dispatch_seconds=settings.dispatch_timeout,
                   visibility_timeout=settings.visibility_timeout)

    def check(self) -> None:
        """One clear error now if the broker cannot be reached (the daemon's start)."""
        from jarvis.scheduler.celery_app import check_broker

        check_broker(self.app, self.broker)

    def send(self, claim: Claim) -> None:
        from jarvis.scheduler.celery_app import HARD_LIMIT_MARGIN, TASK_NAME, task_id_for

        run = claim.run
        self.app.send_task(
            TASK_NAME, args=(run.id, run.attempt, run.epoch), task_id=task_id_for(run.id, run.epoch),
            queue=self.queue, time_limit=int(claim.task.timeout_seconds + HARD_LIMIT_MARGIN),
            retry=True, retry_policy={"max_retries": 2, "interval_start": 0.2,
                                      "interval_step": 0.5, "interval_max": 1.0})

    def close(self) -> None:
        self.app.close()
