"""What a long-lived scheduler keeps in memory about runs whose calls outlived their timeout
(abandoned): only a count, and per-run marks that are cleared when the run's worker ends, so
many abandoned runs leave nothing behind. A real SQLite file and the script runner."""

from __future__ import annotations

import threading
import time

from scheduler_support import ScriptRunner
from waiting import wait_for

from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore


def marks(sched: TaskScheduler) -> dict[str, set[int]]:
    return {"executing": set(sched._executing), "given_up": set(sched._given_up),
            "overdue": set(sched._overdue), "delivering": set(sched._delivering),
            "active": set(sched._active)}


EMPTY = {"executing": set(), "given_up": set(), "overdue": set(), "delivering": set(),
         "active": set()}


def test_many_abandoned_runs_leave_only_a_count(tmp_path):
    gates = tmp_path / "gates"
    gates.mkdir()
    store = SchedulerStore(tmp_path / "s.db")
    sched = TaskScheduler(store=store, runner=ScriptRunner(), max_workers=4, lease_seconds=0.4,
                          shutdown_timeout=0.05)
    before = threading.active_count()
    count = 24
    for _ in range(count):
        sched.add(f"gate {gates}", every=3600, timeout_seconds=0.1)
    store.db.conn.execute("UPDATE tasks SET next_run = ?", (time.time() - 1,))
    store.db.conn.commit()
    recorded = []
    for _ in range(count):  # each `--once` pass abandons the calls it cannot wait for
        recorded += sched.run_due()
        if len(recorded) == count:
            break
    assert len(recorded) == count
    assert {(r.status, r.error_type) for r in recorded} == {("failed", "timeout")}
    assert sched.abandoned == count  # a count, not a collection
    # The workers that gave up on their calls end; nothing is kept about them.
    wait_for(lambda: marks(sched) == EMPTY, timeout=10, what="the run marks to clear")
    for run in recorded:  # the abandoned calls end too (their gates open)
        (gates / str(run.id)).touch()
    wait_for(lambda: threading.active_count() <= before, timeout=15,
             what="the abandoned calls' threads to end")
    assert marks(sched) == EMPTY
    store.close()


def test_giving_up_a_run_whose_worker_already_ended_keeps_no_mark(tmp_path):
    # The race at shutdown / the end of a --once pass: a run is chosen to be given up just as
    # its worker ends. Its mark was never cleared (one stale id per race, for the life of
    # the process).
    store = SchedulerStore(tmp_path / "s.db")
    sched = TaskScheduler(store=store, runner=ScriptRunner())
    task = sched.add("echo done", every=3600)
    run = sched.run_now(task.id)
    assert run.status == "succeeded"
    assert sched._give_up([run.id], "shutdown") == []  # finished: nothing to record
    assert marks(sched) == EMPTY
    assert store.get_run(run.id).status == "succeeded"
    store.close()
