"""`jarvis worker`: a Celery worker that executes dispatched runs, and the execution itself.

For each message (run id, attempt, epoch) a worker process:
1. starts the run with a compare-and-set on (id, epoch, "dispatched") in the ledger, and drops
   the message if that fails (a duplicate delivery, or a run sent again with a newer epoch);
2. runs the TaskRunner (by default the SDK's ask_full, as `jarvis ask` does: tools, approvals,
   run log) on a thread, renewing its own lease on the ledger while it waits, up to the task's
   timeout. The run gets a fence (jarvis.scheduler.fencing): its lease is checked before every
   engine and tool call, and a renew that finds the run taken (the worker stalled past its
   lease and the run was recorded as crashed) ends the run's process, as a timeout does;
3. records the outcome with the same compare-and-set (id, epoch, "running", this worker), with
   the run log entry stored in the ledger so every machine sharing it can read it.
A worker that dies stops renewing; the daemon's reaper then applies the task's on_crash policy.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from jarvis.errors import UserError
from jarvis.scheduler.fencing import deliver_once, ledger_fence
from jarvis.scheduler.runner import RunOutcome, TaskRunner, start_run

log = logging.getLogger("jarvis.scheduler.worker")

_WORKER: Worker | None = None
STOP_SECONDS = 5.0  # a timed-out run's retry waits this long for its process to be stopped
EXIT_STOPPED_RUN = 75  # exit status of a pool process stopped to end a timed-out call


def renew_interval(lease_seconds: float) -> float:
    """How often a worker renews a run's lease: a quarter of the lease, at most 5 s."""
    return max(min(lease_seconds / 4, 5.0), 0.05)


def current_worker() -> Worker:
    if _WORKER is None:
        raise RuntimeError("this process has no jarvis worker (start it with `jarvis worker`)")
    return _WORKER


def _execute(run_id: int, attempt: int, epoch: int) -> str:
    """What the Celery task runs for one message: this process's worker executes the run."""
    return current_worker().execute(run_id, attempt, epoch)


class Worker:
    """Executes dispatched runs against a PostgreSQL ledger (one store per process)."""

    def __init__(self, store_url: str, runner: TaskRunner, *, lease_seconds: float = 60.0,
                 config: Any = None,
                 notifier: Callable[[Any, Any], dict[str, Any] | None] | None = None) -> None:
        self.store_url = store_url
        self.runner = runner
        # Tasks with `notify` get their finished runs sent to the channel from the worker.
        self.config = config
        self.notifier = notifier
        self.lease_seconds = float(lease_seconds)
        self._store: Any = None
        self._pid = 0
        self._owner = ""
        self._lock = threading.Lock()
        # Serialises recording a delivery with marking one "not_sent" before the process
        # is stopped, so a delivery that ends at that moment is not overwritten.
        self._delivery_lock = threading.Lock()
        self.abandoned = 0
        # `jarvis worker` (a Celery pool process per run) ends a run's process at its timeout;
        # in-process use (tests, embedding) only abandons the call.
        self.stop_process_on_timeout = False

    def store(self) -> Any:
        """This process's store (a prefork child opens its own after the fork)."""
        with self._lock:
            if self._store is None or self._pid != os.getpid():
                from jarvis.scheduler.store import owner_id
                from jarvis.scheduler.store_postgres import PostgresStore

                self._store = PostgresStore(self.store_url)
                self._pid = os.getpid()
                self._owner = "worker:" + owner_id()
            return self._store

    @property
    def owner(self) -> str:
        self.store()
        return self._owner

    def execute(self, run_id: int, attempt: int, epoch: int) -> str:
        """Run one dispatched run; returns what happened (for the worker's log)."""
        store = self.store()
        claim = store.start_dispatched(run_id, epoch, self._owner, self.lease_seconds)
        if claim is None:
            log.info("run %d (attempt %d, epoch %d): not started here: a duplicate delivery, "
                     "or sent again since; dropped", run_id, attempt, epoch)
            return "dropped"
        task, run = claim.task, claim.run
        log.info("task %s: run %d started (attempt %d, epoch %d, %s)", task.id, run.id,
                 run.attempt, run.epoch, run.idempotency_key)
        started = time.monotonic()
        fence = ledger_fence(store, run, self._owner, self.lease_seconds)
        thread, box = start_run(self.runner, task, run, f"jarvis-run-{run.id}", fence=fence)
        beat = renew_interval(self.lease_seconds)
        while thread.is_alive():
            left = task.timeout_seconds - (time.monotonic() - started)
            if left <= 0:
                break
            thread.join(min(beat, left))
            if not thread.is_alive():
                break
            try:
                owned = store.renew(run.id, run.epoch, self._owner, self.lease_seconds)
            except Exception as exc:  # the ledger is unreachable: try again next beat
                log.warning("could not renew the lease of run %d: %s", run.id, exc)
                continue
            if not owned:
                # The run was recorded as crashed and handed to a retry: this call must make
                # no further side effect. Its engine and tool calls check the fence; a call
                # under way is ended with the process, as at a timeout.
                fence.lose("its worker found its lease taken at a renew")
                log.warning("task %s: run %d was taken from this worker (its lease expired "
                            "and the run was recorded as crashed); it makes no further call "
                            "and its result is dropped", task.id, run.id)
                if self.stop_process_on_timeout:
                    self._stop_process(run.id, "its lease was lost")
                self.abandoned += 1
                return "lost"
        # Past its timeout with the call still going: Python cannot stop a thread, but a worker
        # can stop its process. Record the timeout (a retry waits STOP_SECONDS more), then end
        # the process, so a retry never overlaps this call; Celery starts a new process, and
        # the message, delivered again, is dropped by the compare-and-set.
        overran = thread.is_alive()
        outcome = self._outcome(thread, box, task)
        entry = outcome.metadata.get("log_entry") if isinstance(outcome.metadata, dict) else None
        if outcome.parked and not overran:
            return self._park(store, task, run, outcome, entry)
        finished = None
        for attempt_no in range(5):
            try:
                finished = store.finish_dispatched(
                    run.id, run.epoch, self._owner, success=outcome.success, answer=outcome.answer,
                    error=outcome.error, error_type=outcome.error_type,
                    run_log_id=outcome.run_log_id, log_entry=entry,
                    min_retry_delay=STOP_SECONDS if overran else 0.0)
                break
            except Exception as exc:
                if attempt_no == 4:
                    if overran and self.stop_process_on_timeout:
                        self._stop_process(run.id)
                    raise
                log.warning("recording run %d failed (%s); retrying", run.id, exc)
                time.sleep(0.5 * (attempt_no + 1))
        if overran and self.stop_process_on_timeout:
            if finished is not None and task.notify:
                # The channel still hears of the timeout, within the time its retry waits.
                sender = threading.Thread(target=self._deliver, args=(store, task, finished),
                                          daemon=True)
                sender.start()
                sender.join(STOP_SECONDS - 1.0)
                if sender.is_alive():  # the process ends now: say so, never leave it blank
                    self._not_sent(store, task, finished, f"its worker process was stopped "
                                   f"(to end the timed-out call) {STOP_SECONDS - 1.0:g} s later")
            self._stop_process(run.id)
        if finished is None:
            log.warning("task %s: run %d finished, but it is no longer this worker's (lease "
                        "expired and the run was recovered); its result was dropped", task.id,
                        run.id)
            return "lost"
        log.info("task %s: run %d %s in %.2f s", task.id, run.id, finished.status,
                 time.monotonic() - started)
        if task.notify:
            self._deliver(store, task, finished)
        return finished.status

    def _park(self, store: Any, task: Any, run: Any, outcome: RunOutcome, entry: Any) -> str:
        """The run stopped before calls that need the person: recorded "parked" with the same
        fence as a finish (id, epoch, running, this worker); a daemon continues it once they
        are answered."""
        parked = store.park_run(run.id, self._owner, now=time.time(),
                                run_log_id=outcome.run_log_id, note=outcome.error or "",
                                epoch=run.epoch, log_entry=entry)
        if parked is None:
            log.warning("task %s: run %d parked, but it is no longer this worker's; dropped",
                        task.id, run.id)
            return "lost"
        log.info("task %s: run %d parked, waiting for approval %s", task.id, run.id,
                 ", ".join(outcome.parked))
        return "parked"

    def _deliver(self, store: Any, task: Any, run: Any) -> None:
        """Send the recorded run to the task's channel and record how it went (as the local
        scheduler does); a failed delivery loses nothing, the run is recorded already. The
        send is under an effect record (deliver_once): never sent twice."""
        if self.notifier is None:
            from jarvis.channels.delivery import ChannelNotifier

            self.notifier = ChannelNotifier(self.config)
        record = deliver_once(store, task, run, self.notifier)
        if isinstance(record, dict):
            try:
                with self._delivery_lock:
                    store.record_delivery(run.id, record)
            except Exception as exc:
                log.warning("task %s: could not record the delivery of run %d: %s", task.id,
                            run.id, exc)

    def _not_sent(self, store: Any, task: Any, run: Any, why: str) -> None:
        """Record that the run's delivery did not get done (unless it just was)."""
        try:
            with self._delivery_lock:
                if store.get_run(run.id).delivery is None:
                    store.record_delivery(run.id, {
                        "channel": task.notify, "status": "not_sent", "attempts": 0,
                        "error": f"not delivered: {why}, before the delivery was done",
                        "at": time.time()})
                    log.warning("task %s: run %d was NOT delivered to channel %s: %s",
                                task.id, run.id, task.notify, why)
        except Exception as exc:
            log.warning("task %s: could not record the delivery of run %d: %s", task.id,
                        run.id, exc)

    def _stop_process(self, run_id: int, why: str = "its call is still going after the "
                                                    "task's timeout") -> None:
        log.warning("run %d: %s; stopping this worker process to end it (Celery starts "
                    "another)", run_id, why)
        for handler in logging.getLogger("jarvis.scheduler").handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        os._exit(EXIT_STOPPED_RUN)

    def _outcome(self, thread: threading.Thread, box: dict[str, Any], task: Any) -> RunOutcome:
        from jarvis.scheduler.daemon import _failure

        if thread.is_alive():
            self.abandoned += 1
            how = ("its worker process was stopped to end the call" if self.stop_process_on_timeout
                   else "its call was abandoned")
            return RunOutcome.failed(f"timed out after {task.timeout_seconds:g} s (the task's "
                                     f"timeout); {how}, its result is dropped", "timeout")
        if "error" in box:
            return _failure(box["error"])
        outcome = box.get("outcome")
        if not isinstance(outcome, RunOutcome):
            outcome = RunOutcome(success=True, answer=None if outcome is None else str(outcome))
        return outcome


def worker_runner(config: Any, target: str | None,
                  factory: Callable[..., Any] | None = None) -> TaskRunner:
    """The TaskRunner a worker uses: --runner, else a module:factory [scheduler] runner, else
    the SDK's ask_full (a Jarvis from `factory`, which the entry point passes in) with the run
    log entry captured for the ledger."""
    from jarvis.scheduler.runner import SdkRunner, load_runner

    configured = config.scheduler.runner
    target = target or (configured if configured not in ("", "celery") else "")
    if target:
        return load_runner(target)
    return SdkRunner(factory=factory, capture_log=True)


def run_worker(config: Any, *, concurrency: int | None = None, runner: str | None = None,
               factory: Callable[..., Any] | None = None, loglevel: str = "INFO",
               hostname: str | None = None) -> None:
    """Start a Celery worker (blocks until it is stopped) that executes runs from the ledger."""
    from jarvis.scheduler.addresses import redact
    from jarvis.scheduler.celery_app import (
        check_broker,
        check_visibility,
        make_app,
        quiet_refused_messages,
    )
    from jarvis.scheduler.ledger import is_postgres_url
    from jarvis.scheduler.store_postgres import PostgresStore

    global _WORKER
    settings = config.scheduler
    if not settings.store or not is_postgres_url(settings.store):
        raise UserError("`jarvis worker` needs the shared ledger: set [scheduler] store = "
                        "\"postgresql://user@host:port/db\" (or JARVIS_SCHEDULER_STORE); the "
                        "SQLite file cannot be shared between machines")
    celery = settings.celery
    app = make_app(celery.broker, queue=celery.queue, visibility_timeout=celery.visibility_timeout,
                   execute=_execute)
    # Check the ledger (and apply migrations) and the broker before forking: one clear line
    # now rather than a worker that retries forever; each pool process opens its own store.
    ledger = PostgresStore(settings.store)
    try:
        check_visibility(celery.visibility_timeout, ledger)
    finally:
        ledger.close()
    check_broker(app, celery.broker)
    _WORKER = Worker(settings.store, worker_runner(config, runner, factory),
                     lease_seconds=settings.lease_seconds, config=config)
    _WORKER.stop_process_on_timeout = True
    if loglevel.upper() != "DEBUG":  # DEBUG keeps Celery's whole report
        quiet_refused_messages()
    processes = concurrency or celery.concurrency
    logging.getLogger("jarvis.scheduler").info(
        "%d process(es) on queue %r of %s, ledger %s", processes, celery.queue,
        redact(celery.broker), redact(settings.store))
    argv = ["worker", f"--concurrency={processes}", "--pool=prefork", f"--loglevel={loglevel}",
            f"--queues={celery.queue}", "--without-gossip", "--without-mingle",
            "--without-heartbeat", f"--hostname={hostname or f'jarvis-{os.getpid()}@%h'}"]
    app.worker_main(argv)
