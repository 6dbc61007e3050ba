"""Runs that wait for the person (jarvis.approvals), as the daemon sees them.

A run that reaches a call needing the person parks: its runner stores its state and the
requests in the approvals store and returns a parked outcome; the ledger records the run
"parked" (it holds its task: no other run of it starts). On each tick the daemon looks at
its parked runs:
- one whose requests are all answered is continued: the ledger's compare-and-set ("parked"
  -> "running" for this daemon, or "dispatched" with the next epoch for Celery workers)
  gives its continuation to exactly one process, which resumes it through the runner, with
  the leases, fencing and recording every run has. So a double approval, two daemons racing,
  or a daemon killed between the approval and the continuation all give one continuation;
- one whose requests expired ends "expired" (its channel is told, when the task notifies).
A continuation whose process dies goes back to "parked" and is continued again (per the
task's on_crash, like any crashed run).

A part of TaskScheduler (jarvis.scheduler.scheduler), whose __init__ sets what this uses.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from jarvis.scheduler.store import Claim

log = logging.getLogger("jarvis.scheduler")

DEFAULT_EXPIRE_SECONDS = 24 * 3600.0


class ParkedRuns:
    """Continue parked runs once answered, end them when they expire (a part of
    TaskScheduler)."""

    _approvals_store: Any = None

    def _approvals(self) -> Any:
        """The approvals store (opened on first need; None while there is none)."""
        if self._approvals_store is None:
            from jarvis.approvals.stores import open_approvals

            self._approvals_store = open_approvals(self.config, create=False)
        return self._approvals_store

    def _continuations(self, free: int | None) -> list[Claim]:
        """Claim the continuations of parked runs whose requests are answered (at most `free`;
        None: no limit, workers take them) and end the expired ones."""
        parked = self.store.parked_runs()
        if not parked:
            return []
        from jarvis.approvals.records import EXPIRED, READY, RESUMED

        try:
            approvals = self._approvals()
            states = {}
            if approvals is not None:
                from jarvis.approvals.parking import expire_due

                expire_due(self.config, approvals)
                states = approvals.runs([r.run_log_id for r in parked if r.run_log_id])
        except Exception as exc:  # the store is busy or unreachable: the next tick retries
            log.warning("could not read the approvals store: %s", exc)
            return []
        claims: list[Claim] = []
        now = self.clock()
        for run in parked:
            record = states.get(run.run_log_id or "")
            status = record.status if record is not None else None
            if status is None and (run.parked_at or now) + self._expire_after() < now:
                status = EXPIRED  # its requests are not in this store: its time still runs
            if status == EXPIRED:
                self._expire(run)
            elif status in (READY, RESUMED) and (free is None or len(claims) < free):
                claim = self.store.claim_parked(
                    run.id, now=now, owner=self.owner,
                    lease_seconds=self._expiry_seconds() if self.dispatcher
                    else self.lease_seconds, dispatch=self.dispatcher is not None)
                if claim is not None:
                    log.info("task %s: run %d continues (its approvals are answered)",
                             claim.task.id, run.id)
                    claims.append(claim)
        return claims

    def _expire_after(self) -> float:
        section = getattr(self.config, "approvals", None)
        return float(getattr(section, "expire_seconds", DEFAULT_EXPIRE_SECONDS))

    def _expire(self, run: Any) -> None:
        ended = self.store.expire_run(run.id, now=self.clock(), error=(
            "expired: nobody answered its approval request in time ([approvals] "
            "expire_after); the run ended here"))
        if ended is None:
            return
        log.warning("task %s: run %d expired waiting for approval", ended.task_id, ended.id)
        task = self.store.get_task(ended.task_id)
        if task.notify:  # told on its own thread: a slow channel must not hold the loop
            threading.Thread(target=self._deliver, args=(task, ended), daemon=True,
                             name=f"jarvis-deliver-{ended.id}").start()

    def _close_approvals(self) -> None:
        if self._approvals_store is not None:
            self._approvals_store.close()
            self._approvals_store = None
