"""The daemon: the loop that claims due runs and executes them on worker threads (or sends
them to a dispatcher's workers), keeps their leases, records them, and shuts down cleanly.

The loop sleeps until the next due occurrence, but at most `poll_seconds`, so tasks added by
other processes are noticed within that time. Each claimed run's call executes on a pooled
thread of its own; the loop renews its runs' leases and marks a call overdue at its timeout
(`--once` passes give each call a supervisor thread that does this). A run past its timeout
is recorded as failed ("timeout") and its result dropped, but only when its call really ends
(Python cannot kill a thread): until then it keeps its worker and blocks its task's retry and
next runs.

A part of TaskScheduler (jarvis.scheduler.scheduler), whose __init__ sets what this uses.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from typing import Any, Self

from jarvis.errors import EngineError, JarvisError
from jarvis.scheduler.fencing import ledger_fence
from jarvis.scheduler.records import Run, Task
from jarvis.scheduler.runner import RunOutcome, run_here, start_run
from jarvis.scheduler.schedules import iso
from jarvis.scheduler.store import Claim
from jarvis.scheduler.store_common import StoreUnavailable
from jarvis.scheduler.threads import RUN_THREADS, Job

log = logging.getLogger("jarvis.scheduler")

PRUNE_EVERY_SECONDS = 3600.0  # how often a running daemon applies [scheduler] keep_runs
DISPATCH_BATCH = 100  # runs claimed for dispatch per ledger transaction
UNSENT_SECONDS = 10.0  # a run claimed this long ago and never sent is sent again
PARKED_CHECK_SECONDS = 0.05  # the local daemon looks at parked runs at most this often


class SchedulerDaemon:
    """Run what is due: once (`run_due`), or as a daemon (`run_forever`, `start`/`stop`); a
    part of TaskScheduler."""

    _parked_next = 0.0  # time.monotonic() when _tick next looks at parked runs
    _next_beat = 0.0  # time.monotonic() when _watch next renews the leases

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
            claims = self._continuations(free) if free > 0 else []
            free -= len(claims)
            claims += self.store.claim_due(now=self.clock(), owner=self.owner,
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

    def start(self) -> Self:
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
        # With workers, runs claimed and never sent (a daemon killed in between) are sent
        # again within about UNSENT_SECONDS: the reaper passes at least that often.
        every = self.lease_seconds / 2
        if self.dispatcher is not None:
            every = min(every, UNSENT_SECONDS)
        while not self._stop.is_set():
            try:
                timeout, idle_state = self._tick(idle_state)
                if time.monotonic() - last_recover >= every:
                    self._recover()
                    last_recover = time.monotonic()
                if time.monotonic() - last_prune >= PRUNE_EVERY_SECONDS:
                    last_prune = time.monotonic()
                    self._prune()
            except Exception as exc:  # e.g. the database stayed locked: log, wait, go on
                log.error("scheduler loop error (will retry in %g s): %s: %s",
                          self.poll_seconds, type(exc).__name__, exc)
                timeout = self.poll_seconds
            timeout = min(timeout, self._watch_safely())  # the leases and timeouts of its runs
            self._wake.wait(max(timeout, 0.0))
            self._wake.clear()
        self._shutdown()

    def dispatch_due(self) -> list[Claim]:
        """Recover, apply keep_runs, then claim and send everything due to the dispatcher;
        returns what was sent."""
        self._recover()
        self._prune()
        continued = self._continuations(None)
        self._send_all(continued)
        return continued + self._claim_and_send()

    def _claim_and_send(self) -> list[Claim]:
        sent: list[Claim] = []
        while True:
            claims = self.store.claim_for_dispatch(  # type: ignore[attr-defined]
                now=self.clock(), owner=self.owner, dispatch_seconds=self._expiry_seconds(),
                limit=DISPATCH_BATCH, default_grace=self.grace_seconds)
            self._send_all(claims)
            sent += claims
            if len(claims) < DISPATCH_BATCH:
                return sent

    def _expiry_seconds(self) -> float:
        """How long a sent run may go unstarted before it is sent again whatever (its message
        has expired in the broker by then): the dispatcher's expiry, else its timeout."""
        expiry = getattr(self.dispatcher, "expiry_seconds", None)
        return float(expiry if expiry is not None else self.dispatcher.dispatch_seconds)

    def _send_all(self, claims: list[Claim]) -> None:
        """Send claims in order (oldest due first) and mark the ones sent: from then on a run
        is sent again only on evidence that its message was lost, never because it waits."""
        sent = [(c.run.id, c.run.epoch) for c in claims if self._send(c)]
        mark = getattr(self.store, "mark_sent", None)
        if sent and mark is not None:
            try:
                mark(sent)
            except StoreUnavailable as exc:  # unmarked: they are sent again (same epoch + 1)
                log.warning("could not mark %d run(s) as sent: %s", len(sent), exc)

    def _send(self, claim: Claim) -> bool:
        run = claim.run
        try:
            self.dispatcher.send(claim)
        except Exception as exc:  # the run stays dispatched, unsent: the reaper sends it again
            log.error("task %s: could not send run %d to the workers (%s: %s); it is sent again "
                      "shortly", claim.task.id, run.id, type(exc).__name__, exc)
            return False
        log.info("task %s: run %d dispatched (%s, occurrence %s, attempt %d, epoch %d)",
                 claim.task.id, run.id, run.trigger, iso(run.scheduled_for), run.attempt, run.epoch)
        return True

    def _tick(self, idle_state: str | None) -> tuple[float, str]:
        """One wake-up: claim what is due (if workers are free); return how long to sleep."""
        if self.dispatcher is not None:
            return self._dispatch_tick(idle_state)
        with self._active_lock:
            free = self.max_workers - len(self._active)
        free -= self._held_by_orphans()
        # Parked runs are looked at on a tick at most every PARKED_CHECK_SECONDS (a burst
        # wakes the loop at every finished run); a tick that skips the look wakes again by then.
        parked_due = self._parked_next - time.monotonic()
        if parked_due <= 0:
            self._parked_next = time.monotonic() + PARKED_CHECK_SECONDS
            for claim in self._continuations(free):
                self._spawn(claim)
                free -= 1
        claims: list[Claim] = []
        # next_wake only decides whether to claim and how long to sleep; claim_due decides
        # what runs. So when the last tick saw something due, claim at once (a claim that
        # finds nothing then asks next_wake); and after a claim that took a run for every
        # free worker, more is likely due: the next tick claims again (a burst of due runs
        # costs one claim per tick instead of two next_wake and a claim).
        wake_at = self._last_wake
        if wake_at is None or wake_at > self.clock() or free <= 0:
            wake_at = self.store.next_wake()
        if free > 0 and wake_at is not None and wake_at <= self.clock():
            claims = self.store.claim_due(now=self.clock(), owner=self.owner,
                                          lease_seconds=self.lease_seconds, limit=free,
                                          default_grace=self.grace_seconds)
            for claim in claims:
                self._spawn(claim)
            if len(claims) < free:
                wake_at = self.store.next_wake()
        self._last_wake = wake_at
        idle_state = self._report_idle(idle_state, wake_at)
        timeout = self.poll_seconds
        if wake_at is not None and free - len(claims) > 0:
            delay = wake_at - self.clock()
            # Due but not claimable right now (e.g. busy elsewhere): wait a poll, not spin.
            timeout = min(self.poll_seconds, delay) if delay > 0 or claims else self.poll_seconds
        if parked_due > 0:
            timeout = min(timeout, parked_due)
        return timeout, idle_state

    def _dispatch_tick(self, idle_state: str | None) -> tuple[float, str]:
        """One wake-up with a dispatcher: send what is due; workers limit how much runs."""
        self._send_all(self._continuations(None))
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
                self._execute(claim, here=True)
            finally:
                with self._active_lock:
                    self._active.pop(claim.run.id, None)
                self._wake.set()

        # The daemon's runs run on reused threads (jarvis.scheduler.threads), each call on its
        # run's thread, watched by the loop (_watch); `--once` passes (run_due) start a
        # supervisor and a call thread per run, which end with the pass.
        job = Job(f"jarvis-run-{claim.run.id}")
        with self._active_lock:
            self._active[claim.run.id] = job  # before the call: it may end at once
            # Its timeout runs from now; the loop's next _watch sees it (and wakes by then).
            self._deadlines[claim.run.id] = (time.monotonic() + claim.task.timeout_seconds,
                                             claim.task)
        RUN_THREADS.submit(work, job.name, job)

    def _shutdown(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        with self._active_lock:
            pending = dict(self._active)
        # While they end, their leases are kept and their timeouts watched, as while running.
        self._watch_safely()
        while (waiting := [t for t in pending.values() if t.is_alive()]) and (
                left := deadline - time.monotonic()) > 0:
            waiting[0].join(min(left, self._watch_safely()))
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
        self._close_approvals()
        log.info("scheduler %s stopped", self.owner)

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
                        # A call on its run's own thread (_execute_here): its worker is held
                        # by it as an orphan now, not counted twice as active.
                        if self._active.get(run_id) is call:
                            del self._active[run_id]
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
            if run.status == "parked":
                log.warning("task %s: the continuation of run %d stopped (%s died); it "
                            "continues again", run.task_id, run.id, run.claimed_by or "its process")
                continue
            log.warning("task %s: run %d (occurrence %s) was interrupted by a scheduler that "
                        "died (%s); recorded as failed, per the task's on_crash policy",
                        run.task_id, run.id, iso(run.scheduled_for), run.claimed_by)
        if self.dispatcher is not None:
            self._redispatch()

    def _redispatch(self) -> None:
        """Send again the dispatched runs whose message is known lost: claimed and never sent
        (quickly), sent long ago while nothing waits in the queue (the broker lost it), or past
        the long safety deadline. A run waiting in a backlog keeps its place in the queue."""
        timeout = self.dispatcher.dispatch_seconds
        waiting = getattr(self.dispatcher, "waiting", None)
        queued = waiting() if callable(waiting) else None
        while True:
            claims = self.store.redispatch_expired(  # type: ignore[attr-defined]
                owner=self.owner, dispatch_seconds=self._expiry_seconds(), limit=DISPATCH_BATCH,
                unsent_seconds=min(UNSENT_SECONDS, timeout),
                lost_after=timeout if queued == 0 else None)
            for claim in claims:
                log.warning("task %s: run %d is sent again (epoch %d): %s", claim.task.id,
                            claim.run.id, claim.run.epoch, claim.note or "its message was lost")
            self._send_all(claims)
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
        if not log.isEnabledFor(logging.INFO):  # its time is formatted only when logged
            return
        log.info("task %s: run %d started (%s, occurrence %s, attempt %d)", claim.task.id,
                 claim.run.id, claim.run.trigger, iso(claim.run.scheduled_for), claim.run.attempt)

    def _execute(self, claim: Claim, here: bool = False) -> Run:
        """Run one claimed occurrence with its timeout, keep its lease alive, record it: its
        call on a thread of its own, watched from this one; `here`: on this thread, watched by
        the daemon loop (`_watch`)."""
        with self._active_lock:
            self._executing[claim.run.id] = None
        bus = getattr(self, "bus", None)
        try:
            if bus is not None:
                from jarvis.core.events import EventType

                if _listened(bus, EventType.SCHEDULER_TASK_START):
                    bus.publish(EventType.SCHEDULER_TASK_START, {
                        "task_id": claim.task.id, "run_id": claim.run.id,
                        "prompt": claim.task.prompt, "trigger": claim.run.trigger})
            run = self._execute_here(claim) if here else self._execute_claim(claim)
            if bus is not None and _listened(bus, EventType.SCHEDULER_TASK_END):
                bus.publish(EventType.SCHEDULER_TASK_END, {
                    "task_id": claim.task.id, "run_id": claim.run.id, "status": run.status,
                    "success": run.status == "succeeded", "result": run.answer or "",
                    "error": run.error or ""})
            return run
        finally:
            with self._active_lock:
                self._executing.pop(claim.run.id, None)
                self._given_up.discard(claim.run.id)
                self._overdue.discard(claim.run.id)
                self._deadlines.pop(claim.run.id, None)

    def _execute_here(self, claim: Claim) -> Run:
        """The daemon's way: the call on this thread (one thread and two wake-ups per run
        fewer than a supervisor's); the loop keeps the lease and marks the call overdue at its
        timeout (`_watch`), as a supervisor would."""
        task, run = claim.task, claim.run
        fence = ledger_fence(self.store, run, self.owner, self.lease_seconds, clock=self.clock)
        with self._active_lock:
            self._executing[run.id] = self._active.get(run.id)  # this run's job: the call's
            due = self._deadlines[run.id][0]  # set by _spawn
        started = due - task.timeout_seconds
        box = run_here(self.runner, task, run, fence)
        with self._active_lock:
            self._deadlines.pop(run.id, None)
            late = run.id not in self._overdue and run.id not in self._given_up and (
                time.monotonic() >= due)
            if late:  # past its timeout before the loop saw it: as the loop would have
                self._overdue.add(run.id)
        if late:
            self._abandon(task, run.id)
        with self._active_lock:
            timed_out = run.id in self._overdue
        return self._conclude(task, run, box, started, timed_out)

    def _abandon(self, task: Task, run_id: int) -> None:
        self.abandoned += 1
        log.warning("task %s: run %d timed out after %g s; its call is still running "
                    "and its result will be dropped; the task's retry and next runs "
                    "wait until it ends (it holds one of the %d workers)", task.id,
                    run_id, task.timeout_seconds, self.max_workers)

    def _watch_safely(self) -> float:
        """`_watch`, whose unexpected error is logged (the loop and the shutdown go on; the
        next pass, within a poll, tries again)."""
        try:
            return self._watch()
        except Exception as exc:  # noqa: BLE001 - e.g. a damaged database: log, go on
            log.error("scheduler loop error (leases): %s: %s", type(exc).__name__, exc)
            return self.poll_seconds

    def _watch(self) -> float:
        """For the runs executing on the daemon's threads (`_execute_here`): renew their
        leases every lease/4 s and mark each call overdue at its timeout. Returns the seconds
        until it is next needed."""
        now = time.monotonic()
        beat = max(self.lease_seconds / 4, 0.05)
        late: list[tuple[Task, int]] = []
        with self._active_lock:
            if not self._deadlines:
                self._next_beat = now + beat  # a run just claimed has a fresh lease
                return float("inf")
            upcoming = [self._next_beat]
            for run_id, (due, task) in self._deadlines.items():
                if run_id in self._overdue or run_id in self._given_up:
                    continue
                if due <= now:
                    self._overdue.add(run_id)
                    late.append((task, run_id))
                else:
                    upcoming.append(due)
        for task, run_id in late:
            self._abandon(task, run_id)
        if now >= self._next_beat:
            self._next_beat = now + beat
            try:
                self.store.heartbeat(self.owner, self.clock() + self.lease_seconds)
            except (sqlite3.OperationalError, StoreUnavailable) as exc:  # busy: the next beat
                log.warning("could not renew the leases of this daemon's runs: %s", exc)
        return max(min(upcoming) - now, 0.0)

    def _execute_claim(self, claim: Claim) -> Run:
        task, run = claim.task, claim.run
        started = time.monotonic()
        # The run's lease is checked before each of its engine and tool calls: a run another
        # daemon recovered (this one stalled past its lease) makes no further call.
        fence = ledger_fence(self.store, run, self.owner, self.lease_seconds, clock=self.clock)
        worker, box = start_run(self.runner, task, run, f"jarvis-task-{task.id}", fence=fence)
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
                with self._active_lock:
                    self._overdue.add(run.id)
                self._abandon(task, run.id)
            worker.join(beat if timed_out else min(beat, left))
            if self._was_given_up(run.id):
                return run
            if worker.is_alive():
                try:
                    self.store.heartbeat(self.owner, self.clock() + self.lease_seconds)
                except (sqlite3.OperationalError, StoreUnavailable) as exc:  # busy: the next beat will do
                    log.warning("could not renew the lease of run %d: %s", run.id, exc)
        return self._conclude(task, run, box, started, timed_out)

    def _conclude(self, task: Task, run: Run, box: dict[str, Any], started: float,
                  timed_out: bool) -> Run:
        """After the call: record its outcome (or that it timed out), log, deliver."""
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
        if outcome.parked:
            return self._park(task, run, outcome)
        finished = self._record(run, outcome)
        if finished is None:
            log.warning("task %s: run %d finished, but another scheduler had taken it over "
                        "(lease expired); its result was dropped", task.id, run.id)
            return self.store.get_run(run.id)
        took = time.monotonic() - started
        if finished.status == "succeeded":
            log.info("task %s: run %d succeeded in %.2f s", task.id, run.id, took)
        elif finished.status == "incomplete":
            log.warning("task %s: run %d stopped without an answer (%s) after %.2f s: %s",
                        task.id, run.id, finished.error_type, took, (finished.error or "")[:300])
        else:
            log.warning("task %s: run %d failed (%s) after %.2f s: %s", task.id, run.id,
                        finished.error_type, took, (finished.error or "")[:300])
        if task.notify:
            finished = self._deliver(task, finished)
        return finished

    def _park(self, task: Task, run: Run, outcome: RunOutcome) -> Run:
        parked = self.store.park_run(run.id, self.owner, now=self.clock(),
                                     run_log_id=outcome.run_log_id, note=outcome.error or "")
        if parked is None:
            log.warning("task %s: run %d parked, but another scheduler had taken it over "
                        "(lease expired); dropped", task.id, run.id)
            return self.store.get_run(run.id)
        log.info("task %s: run %d parked, waiting for approval %s", task.id, run.id,
                 ", ".join(outcome.parked))
        return parked

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


def _listened(bus: Any, event_type: Any) -> bool:
    """Whether publishing `event_type` on `bus` reaches anyone (a bus that cannot say: yes),
    so a run's event data is built only for a listener."""
    has = getattr(bus, "has_subscribers", None)
    return True if has is None else bool(has(event_type))


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
