"""The Celery side of scheduled runs: the app, its settings, and the one task workers run.

A message is (run id, attempt, epoch) under a deterministic task id; what the run is and
whether it may still run is in the ledger, never in the message. Settings, and why:
- `task_acks_late` + `task_reject_on_worker_lost`: a message is acknowledged after the run,
  so a worker that dies mid-run leaves it to be delivered again (then dropped by the ledger's
  compare-and-set if the run was already started: the ledger's reaper decides re-runs);
- `worker_prefetch_multiplier = 1`: a worker holds no more messages than it can run;
- `visibility_timeout` above the longest task timeout: Redis does not hand a running task's
  message to a second worker while the first still works on it;
- a hard time limit per message (the task's timeout plus a margin): a run stuck in code that
  ignores its timeout is killed with its process, and its lease expires.
celery is imported only here, and only by `jarvis worker` and a daemon with runner "celery".
"""

from __future__ import annotations

from typing import Any

from jarvis.errors import UserError

TASK_NAME = "jarvis.scheduler.run"
HARD_LIMIT_MARGIN = 60.0  # seconds past a task's own timeout before its process is killed


def task_id_for(run_id: int, epoch: int) -> str:
    """The deterministic Celery task id of one dispatch of a run."""
    return f"jarvis-run-{run_id}-e{epoch}"


def default_visibility_timeout() -> float:
    from jarvis.scheduler.scheduler import MAX_TIMEOUT_SECONDS

    return MAX_TIMEOUT_SECONDS + 2 * HARD_LIMIT_MARGIN


def make_app(broker: str, *, queue: str = "jarvis", visibility_timeout: float | None = None) -> Any:
    """A Celery app for jarvis runs on `broker` (a redis:// URL)."""
    try:
        from celery import Celery
    except ImportError:
        raise UserError("running scheduled tasks on Celery needs celery and redis: "
                        "pip install 'jarvis[celery]'") from None
    if not broker:
        raise UserError("[scheduler] runner = \"celery\" needs a broker: set [scheduler.celery] "
                        "broker = \"redis://host:6379/0\" (or JARVIS_CELERY_BROKER)")
    app = Celery("jarvis", broker=broker, set_as_current=False)
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": int(visibility_timeout or default_visibility_timeout())},
        task_default_queue=queue,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_time_limit=int(default_visibility_timeout()),  # a message without its own limit
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        enable_utc=True,
    )
    app.task(name=TASK_NAME, ignore_result=True)(_run_task)
    return app


def check_broker(app: Any, broker: str, *, timeout: float = 5.0) -> None:
    """Raise a one-line UserError when the broker cannot be reached now (a worker or daemon
    that starts anyway would retry silently, forever, as Celery does)."""
    from jarvis.scheduler.ledger import redact

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0,
                                   timeout=timeout)
    except Exception as exc:  # kombu's OperationalError, a bad URL, DNS, ...
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise UserError(f"cannot reach the Celery broker {redact(broker)}: {text} (is Redis "
                        f"running there? [scheduler.celery] broker)") from None


def _run_task(run_id: int, attempt: int, epoch: int) -> str:
    """The Celery task: executes one dispatched run through this process's worker."""
    from jarvis.scheduler.worker import current_worker

    return current_worker().execute(int(run_id), int(attempt), int(epoch))
