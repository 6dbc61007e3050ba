"""TaskScheduler: the operations on scheduled tasks, and the daemon loop that runs them.

    store = SchedulerStore(db_path="~/.jarvis/scheduler.db")
    scheduler = TaskScheduler(store=store, system=Jarvis())
    task = scheduler.create_task("Summarize the news", "cron", "0 8 * * *")
    scheduler.run_forever()          # foreground daemon (what `jarvis scheduler start` runs)

The loop sleeps until the next due occurrence, but at most `poll_seconds`, so tasks added by
other processes are noticed within that time. Each claimed run executes on a worker thread
that keeps the run's lease alive while it waits. A run past its timeout is recorded as failed
("timeout") and its result dropped, but only when its call really ends (Python cannot kill a
thread): until then it keeps its worker and blocks its task's retry and next runs.

With a `dispatcher` (jarvis.scheduler.dispatch, e.g. Celery workers) injected, the daemon runs
nothing itself: it claims due runs as "dispatched" in the shared ledger and sends them, and
its reaper sends again what no worker started and re-runs what a dead worker left (on_crash).
"""

from __future__ import annotations

import logging
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from jarvis.errors import EngineError, JarvisError, UserError
from jarvis.scheduler.ledger import SchedulerLedger, StoreUnavailable, TaskIdTaken
from jarvis.scheduler.records import CRASH_POLICIES, TASK_STATUSES, Run, Task
from jarvis.scheduler.runner import (
    FunctionRunner,
    RunOutcome,
    SdkRunner,
    TaskRunner,
    start_run,
)
from jarvis.scheduler.schedules import iso, parse_schedule
from jarvis.scheduler.store import Claim, QuotaError, TaskBusyError, owner_id, storable

log = logging.getLogger("jarvis.scheduler")

MAX_PROMPT_CHARS = 20_000
MAX_TOOLS = 64
MAX_TIMEOUT_SECONDS = 24 * 3600.0
MAX_RETRIES = 10
PRUNE_EVERY_SECONDS = 3600.0  # how often a running daemon applies [scheduler] keep_runs
DISPATCH_BATCH = 100  # runs claimed for dispatch per ledger transaction
# fullmatch, never match with `$`: `$` also matches before a trailing newline ('simple\n').
_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def _settings(config: Any) -> Any:
    if config is None:
        from jarvis.core.config import SchedulerConfig

        return SchedulerConfig()
    return getattr(config, "scheduler", config)


class TaskScheduler:
    """Create, inspect and run scheduled tasks; `run_forever()` is the daemon."""

    def __init__(self, store: SchedulerLedger | None = None, system: Any = None, *,
                 runner: TaskRunner | Callable[..., Any] | None = None, config: Any = None,
                 dispatcher: Any = None,
                 clock: Callable[[], float] = time.time, max_workers: int | None = None,
                 poll_seconds: float | None = None, lease_seconds: float | None = None,
                 grace_seconds: float | None = None,
                 shutdown_timeout: float | None = None,
                 shutdown_delivery_seconds: float | None = None,
                 poll_interval: float | None = None,
                 notifier: Callable[[Task, Run], dict[str, Any] | None] | None = None) -> None:
        if poll_interval is not None:  # OpenJarvis's name for poll_seconds
            if poll_seconds is not None and poll_seconds != poll_interval:
                raise UserError("pass poll_seconds or poll_interval (the same setting), not both")
            poll_seconds = poll_interval
        if config is None and system is not None:
            config = getattr(system, "config", None)
        self.config = config
        # Sends a finished run of a task with `notify` to its channel and returns the delivery
        # record; default: jarvis.channels.delivery.ChannelNotifier(config), made when needed.
        self.notifier = notifier
        settings = _settings(config)
        if store is None:
            from jarvis.scheduler.ledger import open_store

            store = open_store(config if config is not None else None)
        self.store = store
        if dispatcher is not None:
            from jarvis.scheduler.ledger import DispatchLedger

            if not isinstance(store, DispatchLedger):
                raise UserError("running tasks on workers needs a ledger they share: set "
                                "[scheduler] store = \"postgresql://user@host:port/db\"")
        # None: runs execute on this process's threads (the local runner).
        self.dispatcher = dispatcher
        self.system = system
        if runner is None:
            runner = SdkRunner(system)
        elif not isinstance(runner, TaskRunner):
            runner = FunctionRunner(runner)
        self.runner: TaskRunner = runner
        self.clock = clock
        self.max_workers = max_workers or settings.max_workers
        self.poll_seconds = poll_seconds if poll_seconds is not None else settings.poll_seconds
        self.lease_seconds = lease_seconds if lease_seconds is not None else settings.lease_seconds
        self.grace_seconds = grace_seconds if grace_seconds is not None else settings.grace_seconds
        self.shutdown_timeout = (shutdown_timeout if shutdown_timeout is not None
                                 else settings.shutdown_timeout)
        # At shutdown or the end of --once, how long the deliveries of runs recorded then may
        # take (a channel's retries can take minutes); one not done in time is recorded as
        # "not_sent" with the reason, never left silent.
        self.shutdown_delivery_seconds = (
            shutdown_delivery_seconds if shutdown_delivery_seconds is not None
            else getattr(settings, "shutdown_delivery_seconds", 10.0))
        self.default_timeout = settings.default_timeout
        # What a model may schedule (the schedule_task tool); a person is not limited by these.
        self.model_max_active_tasks = settings.model_max_active_tasks
        self.model_min_interval_seconds = settings.model_min_interval_seconds
        self.model_max_prompt_chars = settings.model_max_prompt_chars
        self.keep_runs = getattr(settings, "keep_runs", None)  # retention of finished runs
        self.owner = owner_id()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._active: dict[int, threading.Thread] = {}
        self._overdue: set[int] = set()  # runs past their timeout whose call still runs
        self._given_up: set[int] = set()  # runs recorded before their call ended
        # Runs whose _execute is under way. Each of these sets only ever holds such runs (or
        # runs delivering): _execute's end clears its run from all of them, and _give_up
        # marks only a run still executing, so a long-lived process keeps no stale entries.
        self._executing: dict[int, threading.Thread | None] = {}  # run id -> its call
        # Calls recorded and left behind (given up at shutdown or the end of a --once pass)
        # that still run: Python cannot stop them, so each keeps holding a worker until it
        # ends. At most max_workers of them can exist: nothing new is claimed while they hold
        # every worker, so a long-lived process cannot pile up hung calls.
        self._orphans: dict[int, threading.Thread] = {}
        self._told_orphans = False
        self._delivering: set[int] = set()  # runs whose delivery to a channel is under way
        # Serialises writing a delivery record with marking one "not_sent" at shutdown, so
        # a delivery that ends at that moment is never overwritten by "not sent".
        self._delivery_lock = threading.Lock()
        self._active_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.abandoned = 0  # runs whose call outlived their timeout

    # --- task operations ---------------------------------------------------------------
    def create_task(self, prompt: str, schedule_type: str, schedule_value: str, *,
                    timezone: str = "UTC", agent: str | None = None,
                    tools: list[str] | str | None = None,
                    approved_tools: list[str] | str | None = None,
                    timeout_seconds: float | None = None, max_retries: int = 0,
                    retry_backoff_seconds: float = 30.0, on_crash: str = "retry",
                    grace_seconds: float | None = None,
                    metadata: dict[str, Any] | None = None,
                    created_by: str = "person", notify: str | None = None,
                    trust: dict[str, Any] | None = None) -> Task:
        """Validate and store a new active task; raise UserError naming what is wrong.

        `created_by="model"` (what the schedule_task tool passes for a model's call) applies
        the [scheduler] model_* quotas, refusing with a QuotaError; it is recorded on the task.
        `trust` is what the creating run had read (docs/trust.md; the tool passes it): a task
        born in a tainted run starts each of its runs tainted.
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
            raise UserError(f"timeout must be between 0 and {MAX_TIMEOUT_SECONDS:g} seconds, "
                            f"got {timeout_seconds}")
        if (not isinstance(max_retries, int) or isinstance(max_retries, bool)
                or not 0 <= max_retries <= MAX_RETRIES):
            raise UserError(f"retries must be an integer from 0 to {MAX_RETRIES}, got {max_retries!r}")
        if not 0 <= float(retry_backoff_seconds) <= MAX_TIMEOUT_SECONDS:
            raise UserError(f"retry backoff must be 0-{MAX_TIMEOUT_SECONDS:g} seconds")
        if on_crash not in CRASH_POLICIES:
            raise UserError(f"on_crash must be one of {', '.join(CRASH_POLICIES)}, got {on_crash!r}")
        # `not x >= 0` also rejects NaN, which would otherwise skip every missed run.
        if grace_seconds is not None and not float(grace_seconds) >= 0:
            raise UserError(f"grace seconds must be 0 or more, got {grace_seconds}")
        notify = self._check_notify(notify)
        task = Task(
            id="", prompt=prompt, schedule_type=schedule.type, schedule_value=schedule.value,
            timezone=schedule.timezone, agent=agent or None, tools=tool_names,
            approved_tools=approved, status="active", created_at=now, anchor=now,
            timeout_seconds=timeout, max_retries=max_retries,
            retry_backoff_seconds=float(retry_backoff_seconds), on_crash=on_crash,
            grace_seconds=None if grace_seconds is None else float(grace_seconds),
            metadata=dict(metadata or {}), notify=notify,
            trust=dict(trust) if trust else None,
        )
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

    # --- running -----------------------------------------------------------------------
    def run_due(self) -> list[Run]:
        """Run everything due now (catch-up policy included), wait for it, and return the
        finished runs: what `jarvis scheduler start --once` does. With a dispatcher, what is
        due is sent to the workers instead and nothing is returned (see `dispatch_due`)."""
        if self.dispatcher is not None:
            self.dispatch_due()
            return []
        self._recover()
        self._prune()
        finished: list[Run] = []
        lock = threading.Lock()

        def work(claim: Claim) -> None:
            run = self._execute(claim)
            with lock:
                finished.append(run)

        threads: dict[int, threading.Thread] = {}  # run id -> its worker
        drain_until: float | None = None
        while True:
            threads = {run_id: t for run_id, t in threads.items() if t.is_alive()}
            free = self.max_workers - len(threads) - self._held_by_orphans()
            claims = self.store.claim_due(now=self.clock(), owner=self.owner,
                                          lease_seconds=self.lease_seconds, limit=free,
                                          default_grace=self.grace_seconds) if free > 0 else []
            for claim in claims:
                self._log_start(claim)
                thread = threading.Thread(target=work, args=(claim,), daemon=True,
                                          name=f"jarvis-run-{claim.run.id}")
                thread.start()
                threads[claim.run.id] = thread
            if not claims and not threads:
                break
            if claims:
                continue
            with self._active_lock:
                all_overdue = set(threads) <= self._overdue
            # Only calls past their timeout are left: like a shutdown, they get
            # shutdown_timeout to end, then are recorded as timed out (and nothing more is
            # claimed: a retry must not start beside a call that may still be running).
            if all_overdue and drain_until is None:
                drain_until = time.monotonic() + self.shutdown_timeout
            elif not all_overdue:
                drain_until = None
            if drain_until is not None and time.monotonic() >= drain_until:
                recorded = self._give_up(list(threads), "the end of a --once pass")
                # Recorded here, not by their worker: their deliveries are sent here too.
                delivered = self._finish_deliveries({}, recorded, "the --once pass ended")
                with lock:
                    finished.extend(delivered.get(run.id, run) for run in recorded)
                break
            next(iter(threads.values())).join(0.05)
        with lock:
            return sorted(finished, key=lambda r: r.id)

    def start(self) -> TaskScheduler:
        """Run the daemon loop on a background thread (stop it with `stop()`)."""
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="jarvis-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Ask the loop to stop; waits for it (and for running tasks up to shutdown_timeout)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def run_forever(self, *, handle_signals: bool = True) -> None:
        """The foreground daemon: runs until SIGINT/SIGTERM (or `stop()`), then shuts down
        cleanly: no new claims, running tasks get `shutdown_timeout` seconds to finish."""
        import signal

        previous: dict[int, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            def on_signal(signum: int, frame: Any) -> None:
                log.info("received %s: stopping (running tasks get %g s to finish)",
                         signal.Signals(signum).name, self.shutdown_timeout)
                self._stop.set()
                self._wake.set()

            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            self._loop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        log.info("scheduler %s started on %s (workers %d, poll %g s)", self.owner,
                 self.store.path, self.max_workers, self.poll_seconds)
        self._recover()
        last_recover = time.monotonic()
        self._prune()
        last_prune = time.monotonic()
        idle_state: str | None = None
        while not self._stop.is_set():
            try:
                timeout, idle_state = self._tick(idle_state)
                if time.monotonic() - last_recover >= self.lease_seconds / 2:
                    self._recover()
                    last_recover = time.monotonic()
                if time.monotonic() - last_prune >= PRUNE_EVERY_SECONDS:
                    last_prune = time.monotonic()
                    self._prune()
            except Exception as exc:  # e.g. the database stayed locked: log, wait, go on
                log.error("scheduler loop error (will retry in %g s): %s: %s",
                          self.poll_seconds, type(exc).__name__, exc)
                timeout = self.poll_seconds
            self._wake.wait(max(timeout, 0.0))
            self._wake.clear()
        self._shutdown()

    def dispatch_due(self) -> list[Claim]:
        """Recover, apply keep_runs, then claim and send everything due to the dispatcher;
        returns what was sent."""
        self._recover()
        self._prune()
        return self._claim_and_send()

    def _claim_and_send(self) -> list[Claim]:
        sent: list[Claim] = []
        while True:
            claims = self.store.claim_for_dispatch(  # type: ignore[attr-defined]
                now=self.clock(), owner=self.owner,
                dispatch_seconds=self.dispatcher.dispatch_seconds, limit=DISPATCH_BATCH,
                default_grace=self.grace_seconds)
            for claim in claims:
                self._send(claim)
            sent += claims
            if len(claims) < DISPATCH_BATCH:
                return sent

    def _send(self, claim: Claim) -> None:
        run = claim.run
        try:
            self.dispatcher.send(claim)
        except Exception as exc:  # the run stays dispatched: the reaper sends it again
            log.error("task %s: could not send run %d to the workers (%s: %s); it is sent again "
                      "after %g s", claim.task.id, run.id, type(exc).__name__, exc,
                      self.dispatcher.dispatch_seconds)
            return
        log.info("task %s: run %d dispatched (%s, occurrence %s, attempt %d, epoch %d)",
                 claim.task.id, run.id, run.trigger, iso(run.scheduled_for), run.attempt, run.epoch)

    def _tick(self, idle_state: str | None) -> tuple[float, str]:
        """One wake-up: claim what is due (if workers are free); return how long to sleep."""
        if self.dispatcher is not None:
            return self._dispatch_tick(idle_state)
        with self._active_lock:
            free = self.max_workers - len(self._active)
        free -= self._held_by_orphans()
        claims: list[Claim] = []
        wake_at = self.store.next_wake()
        if free > 0 and wake_at is not None and wake_at <= self.clock():
            claims = self.store.claim_due(now=self.clock(), owner=self.owner,
                                          lease_seconds=self.lease_seconds, limit=free,
                                          default_grace=self.grace_seconds)
            for claim in claims:
                self._spawn(claim)
            wake_at = self.store.next_wake()
        idle_state = self._report_idle(idle_state, wake_at)
        timeout = self.poll_seconds
        if wake_at is not None and free - len(claims) > 0:
            delay = wake_at - self.clock()
            # Due but not claimable right now (e.g. busy elsewhere): wait a poll, not spin.
            timeout = min(self.poll_seconds, delay) if delay > 0 or claims else self.poll_seconds
        return timeout, idle_state

    def _dispatch_tick(self, idle_state: str | None) -> tuple[float, str]:
        """One wake-up with a dispatcher: send what is due; workers limit how much runs."""
        wake_at = self.store.next_wake()
        if wake_at is not None and wake_at <= self.clock():
            self._claim_and_send()
            wake_at = self.store.next_wake()
        idle_state = self._report_idle(idle_state, wake_at)
        timeout = self.poll_seconds
        if wake_at is not None:
            delay = wake_at - self.clock()
            # Due but not claimable (its previous run still going): wait a poll, not spin.
            timeout = min(self.poll_seconds, delay) if delay > 0 else self.poll_seconds
        return timeout, idle_state

    def _spawn(self, claim: Claim) -> None:
        self._log_start(claim)

        def work() -> None:
            try:
                self._execute(claim)
            finally:
                with self._active_lock:
                    self._active.pop(claim.run.id, None)
                self._wake.set()

        thread = threading.Thread(target=work, daemon=True, name=f"jarvis-run-{claim.run.id}")
        with self._active_lock:
            self._active[claim.run.id] = thread
        thread.start()

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        with self._active_lock:
            pending = dict(self._active)
        for thread in pending.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = {run_id: thread for run_id, thread in pending.items() if thread.is_alive()}
        with self._active_lock:
            delivering = set(alive) & self._delivering
        # A run whose call is still going is interrupted; one whose answer is recorded and
        # whose delivery is under way is not: its delivery gets shutdown_delivery_seconds.
        recorded = self._give_up([run_id for run_id in alive if run_id not in delivering],
                                 "shutdown")
        given_up = {run.id for run in recorded}
        self._finish_deliveries({run_id: thread for run_id, thread in alive.items()
                                 if run_id not in given_up}, recorded, "the scheduler stopped")
        if self.dispatcher is not None:
            self.dispatcher.close()
        log.info("scheduler %s stopped", self.owner)

    def _finish_deliveries(self, threads: dict[int, threading.Thread], recorded: list[Run],
                           why: str) -> dict[int, Run]:
        """At shutdown or the end of --once: send the runs just recorded here (interrupted or
        timed out) to their channels and wait for the deliveries `threads` have under way, all
        within shutdown_delivery_seconds. A run of a notifying task still without a delivery
        record then gets one saying it was not sent, and why. Returns the runs as recorded."""
        deadline = time.monotonic() + self.shutdown_delivery_seconds
        tasks: dict[int, Task] = {}
        waiting = list(threads.values())
        for run in recorded:
            try:
                task = self.store.get_task(run.task_id)
            except JarvisError:
                continue  # deleted meanwhile: nothing to deliver to
            tasks[run.id] = task
            if task.notify:
                sender = threading.Thread(target=self._deliver, args=(task, run), daemon=True,
                                          name=f"jarvis-deliver-{run.id}")
                sender.start()
                waiting.append(sender)
        if waiting:
            log.info("%s: waiting up to %g s for %d delivery(ies) to channels", why,
                     self.shutdown_delivery_seconds, len(waiting))
        for thread in waiting:
            thread.join(max(0.0, deadline - time.monotonic()))
        out: dict[int, Run] = {}
        for run_id in set(threads) | set(tasks):
            try:
                run = self.store.get_run(run_id)
                task = tasks.get(run_id) or self.store.get_task(run.task_id)
                if task.notify and run.status in ("succeeded", "failed"):
                    with self._delivery_lock:
                        run = self.store.get_run(run_id)
                        if run.delivery is None:
                            run = self.store.record_delivery(run_id, {
                                "channel": task.notify, "status": "not_sent", "attempts": 0,
                                "error": f"not delivered: {why} before the delivery was done "
                                         f"(it had {self.shutdown_delivery_seconds:g} s, "
                                         f"[scheduler] shutdown_delivery_seconds)",
                                "at": self.clock()})
                            log.warning("task %s: run %d was NOT delivered to channel %s: %s "
                                        "before the delivery was done (the answer is kept in "
                                        "the run record)", task.id, run_id, task.notify, why)
            except (JarvisError, sqlite3.Error) as exc:  # the store is busy or gone: say so
                log.warning("could not check or record the delivery of run %d while stopping: "
                            "%s", run_id, exc)
                continue
            out[run_id] = run
        return out

    def _give_up(self, run_ids: list[int], cause: str) -> list[Run]:
        """Stop waiting for these runs of ours and record them: a run already past its timeout
        as timed out, any other as interrupted; each task's retry or on_crash policy applies."""
        recorded: list[Run] = []
        for run_id in run_ids:
            with self._active_lock:
                overdue = run_id in self._overdue
                if run_id in self._executing:  # else its _execute ended: nobody would clear it
                    self._given_up.add(run_id)
                    call = self._executing[run_id]
                    if call is not None and call.is_alive():
                        self._orphans[run_id] = call
            if overdue:
                task = self.store.get_task(self.store.get_run(run_id).task_id)
                run = self.store.finish_run(run_id, self.owner, now=self.clock(), success=False,
                                            error=_timed_out(task, None).error,
                                            error_type="timeout")
            else:
                run = self.store.interrupt(run_id, self.owner, now=self.clock(),
                                           reason=f"interrupted: the scheduler stopped ({cause}) "
                                                  f"before this run finished")
                if run is not None:
                    log.warning("run %d of task %s interrupted by %s", run_id, run.task_id, cause)
            if run is not None:
                recorded.append(run)
        return recorded

    def prune(self) -> int:
        """Apply `[scheduler] keep_runs` now: delete the finished runs it does not keep."""
        keep = self.keep_runs
        if keep is None:
            return 0
        return self.store.prune_runs(
            now=self.clock(), max_age=None if keep.days is None else keep.days * 86400.0,
            keep_per_task=keep.count)

    def _prune(self) -> None:
        if self.keep_runs is None:
            return
        try:
            deleted = self.prune()
        except (sqlite3.Error, StoreUnavailable) as exc:  # busy or locked: the next pass will do
            log.warning("could not delete old runs (keep_runs): %s", exc)
            return
        if deleted:
            log.info("deleted %d old run(s) (keep_runs: %s)", deleted, self.keep_runs.describe())

    def _recover(self) -> None:
        # Our own runs are included: a worker renews its lease, so only a stuck one expires.
        for run in self.store.recover(now=self.clock()):
            log.warning("task %s: run %d (occurrence %s) was interrupted by a scheduler that "
                        "died (%s); recorded as failed, per the task's on_crash policy",
                        run.task_id, run.id, iso(run.scheduled_for), run.claimed_by)
        if self.dispatcher is not None:
            while True:
                claims = self.store.redispatch_expired(  # type: ignore[attr-defined]
                    owner=self.owner, dispatch_seconds=self.dispatcher.dispatch_seconds,
                    limit=DISPATCH_BATCH)
                for claim in claims:
                    log.warning("task %s: run %d was not started by a worker within %g s; "
                                "sending it again (epoch %d)", claim.task.id, claim.run.id,
                                self.dispatcher.dispatch_seconds, claim.run.epoch)
                    self._send(claim)
                if len(claims) < DISPATCH_BATCH:
                    break

    def _report_idle(self, previous: str | None, wake_at: float | None) -> str:
        with self._active_lock:
            busy = bool(self._active)
        # A task that is running is not "nothing to run": keep the state we had.
        state = "scheduled" if wake_at is not None else (previous or "empty") if busy else "empty"
        if state != previous and state == "empty":
            counts = self.store.count_tasks()
            paused = counts.get("paused", 0)
            log.info("nothing to run: no active tasks%s; waiting for tasks (add one with "
                     "`jarvis schedule add`)", f" ({paused} paused)" if paused else "")
        elif state != previous and state == "scheduled" and wake_at is not None:
            log.info("next run due at %s", iso(wake_at))
        return state

    def _log_start(self, claim: Claim) -> None:
        log.info("task %s: run %d started (%s, occurrence %s, attempt %d)", claim.task.id,
                 claim.run.id, claim.run.trigger, iso(claim.run.scheduled_for), claim.run.attempt)

    def _execute(self, claim: Claim) -> Run:
        """Run one claimed occurrence with its timeout, keep its lease alive, record it."""
        with self._active_lock:
            self._executing[claim.run.id] = None
        try:
            return self._execute_claim(claim)
        finally:
            with self._active_lock:
                self._executing.pop(claim.run.id, None)
                self._given_up.discard(claim.run.id)
                self._overdue.discard(claim.run.id)

    def _execute_claim(self, claim: Claim) -> Run:
        task, run = claim.task, claim.run
        started = time.monotonic()
        worker, box = start_run(self.runner, task, run, f"jarvis-task-{task.id}")
        with self._active_lock:
            self._executing[run.id] = worker
        beat = max(self.lease_seconds / 4, 0.05)
        timed_out = False
        # Python cannot stop a thread: a call past its timeout goes on. Until it really ends
        # the run stays "running" (its lease renewed), so it keeps its worker slot, and no
        # retry or next occurrence of the task starts beside it.
        while worker.is_alive():
            left = task.timeout_seconds - (time.monotonic() - started)
            if left <= 0 and not timed_out:
                timed_out = True
                self.abandoned += 1
                with self._active_lock:
                    self._overdue.add(run.id)
                log.warning("task %s: run %d timed out after %g s; its call is still running "
                            "and its result will be dropped; the task's retry and next runs "
                            "wait until it ends (it holds one of the %d workers)", task.id,
                            run.id, task.timeout_seconds, self.max_workers)
            worker.join(beat if timed_out else min(beat, left))
            if self._was_given_up(run.id):
                return run
            if worker.is_alive():
                try:
                    self.store.heartbeat(self.owner, self.clock() + self.lease_seconds)
                except (sqlite3.OperationalError, StoreUnavailable) as exc:  # busy: the next beat will do
                    log.warning("could not renew the lease of run %d: %s", run.id, exc)
        if self._was_given_up(run.id):
            return run
        if timed_out:
            with self._active_lock:
                self._overdue.discard(run.id)
            outcome = _timed_out(task, time.monotonic() - started)
        elif "error" in box:
            outcome = _failure(box["error"])
        else:
            outcome = box.get("outcome")
            if not isinstance(outcome, RunOutcome):
                outcome = RunOutcome(success=True, answer=None if outcome is None else str(outcome))
        finished = self._record(run, outcome)
        if finished is None:
            log.warning("task %s: run %d finished, but another scheduler had taken it over "
                        "(lease expired); its result was dropped", task.id, run.id)
            return self.store.get_run(run.id)
        took = time.monotonic() - started
        if finished.status == "succeeded":
            log.info("task %s: run %d succeeded in %.2f s", task.id, run.id, took)
        else:
            log.warning("task %s: run %d failed (%s) after %.2f s: %s", task.id, run.id,
                        finished.error_type, took, (finished.error or "")[:300])
        if task.notify:
            finished = self._deliver(task, finished)
        return finished

    def _deliver(self, task: Task, run: Run) -> Run:
        """Send a finished run to the task's channel and record how it went. The run (answer
        or failure) is already recorded, so a failed delivery loses nothing."""
        with self._active_lock:
            self._delivering.add(run.id)
        try:
            if self.notifier is None:
                from jarvis.channels.delivery import ChannelNotifier

                self.notifier = ChannelNotifier(self.config)
            try:
                record = self.notifier(task, run)
            except Exception as exc:  # a broken notifier must not take the run or daemon down
                record = {"channel": task.notify, "status": "failed", "attempts": 0,
                          "error": f"{type(exc).__name__}: {exc}", "at": self.clock()}
            if not isinstance(record, dict):
                return run
            try:
                # Even after shutdown marked it "not_sent": what really happened wins.
                with self._delivery_lock:
                    return self.store.record_delivery(run.id, record)
            except (sqlite3.Error, StoreUnavailable) as exc:
                log.warning("task %s: could not record the delivery of run %d: %s", task.id,
                            run.id, exc)
                run.delivery = record
                return run
        finally:
            with self._active_lock:
                self._delivering.discard(run.id)

    def _held_by_orphans(self) -> int:
        """Workers held by calls given up on that still run (forgetting those that ended)."""
        with self._active_lock:
            for run_id in [r for r, t in self._orphans.items() if not t.is_alive()]:
                del self._orphans[run_id]
            held = sorted(self._orphans)
        if len(held) >= self.max_workers and not self._told_orphans:
            self._told_orphans = True
            log.warning("all %d workers are held by calls that outlived their timeout and were "
                        "given up on (runs %s); nothing more runs until they end",
                        self.max_workers, ", ".join(map(str, held)))
        elif len(held) < self.max_workers:
            self._told_orphans = False
        return len(held)

    def _was_given_up(self, run_id: int) -> bool:
        """Whether the run was recorded already (shutdown, end of --once) while its call went
        on: then its worker leaves the store alone."""
        with self._active_lock:
            if run_id not in self._given_up:
                return False
            self._given_up.discard(run_id)
            self._overdue.discard(run_id)
            return True

    def _record(self, run: Run, outcome: RunOutcome) -> Run | None:
        """finish_run, retried while the database is locked by other processes (the outcome
        must not be lost to a busy database)."""
        for attempt in range(5):
            try:
                return self.store.finish_run(
                    run.id, self.owner, now=self.clock(), success=outcome.success,
                    answer=outcome.answer, error=outcome.error, error_type=outcome.error_type,
                    run_log_id=outcome.run_log_id)
            except (sqlite3.OperationalError, StoreUnavailable) as exc:
                if attempt == 4:
                    raise
                log.warning("recording run %d failed (%s); retrying", run.id, exc)
                time.sleep(0.5 * (attempt + 1))
        return None


def _timed_out(task: Task, took: float | None) -> RunOutcome:
    went_on = "" if took is None else f"; its call went on for {took:.1f} s"
    return RunOutcome.failed(f"timed out after {task.timeout_seconds:g} s (the task's timeout)"
                             f"{went_on}; its result was dropped", "timeout")


def _failure(exc: BaseException) -> RunOutcome:
    if isinstance(exc, EngineError):
        kind = "engine"
    elif isinstance(exc, JarvisError):
        kind = "error"
    else:
        kind = "execution"
    outcome = RunOutcome.failed(f"{type(exc).__name__}: {exc}", kind)
    run_log_id = getattr(exc, "run_log_id", None)  # set by SdkRunner when the ask was logged
    outcome.run_log_id = run_log_id if isinstance(run_log_id, str) else None
    return outcome


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
