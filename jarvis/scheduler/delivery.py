"""Result delivery: a finished run of a task with `notify` sent to its channel, and the record
of how that went; at shutdown or the end of --once, the deliveries under way get
shutdown_delivery_seconds, and a run not delivered by then is recorded as "not_sent", never
left silent.

A part of TaskScheduler (jarvis.scheduler.scheduler), whose __init__ sets what this uses.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from jarvis.errors import JarvisError
from jarvis.scheduler.fencing import deliver_once
from jarvis.scheduler.records import Run, Task
from jarvis.scheduler.store_common import StoreUnavailable

log = logging.getLogger("jarvis.scheduler")


class ResultDelivery:
    """Send finished runs to their task's channel (a part of TaskScheduler)."""
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
                if task.notify and run.status in ("succeeded", "incomplete", "failed"):
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

    def _deliver(self, task: Task, run: Run) -> Run:
        """Send a finished run to the task's channel and record how it went. The run (answer
        or failure) is already recorded, so a failed delivery loses nothing."""
        with self._active_lock:
            self._delivering.add(run.id)
        try:
            if self.notifier is None:
                from jarvis.channels.delivery import ChannelNotifier

                self.notifier = ChannelNotifier(self.config)
            # Under an effect record keyed by the run: a delivery begun before (by a process
            # that died before confirming it) is not sent a second time.
            record = deliver_once(self.store, task, run, self.notifier)
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
