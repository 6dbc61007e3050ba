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


def test_abandoned_calls_never_exceed_the_workers_and_leave_only_a_count(tmp_path, caplog):
    # Each `--once` pass (run_due) gives up on the calls it cannot wait for; Python cannot
    # stop them. Repeated in one long-lived process, they piled up without bound (one hung
    # thread per abandoned run, none counted against max_workers). Now they hold their
    # workers until they really end: at most max_workers exist at once.
    gates = tmp_path / "gates"
    gates.mkdir()
    store = SchedulerStore(tmp_path / "s.db")
    workers, count = 4, 24
    # A lease far above a loaded machine's stalls: with 0.4 s a late heartbeat let recovery
    # count a held run as crashed and retry it (27 runs recorded for 24). The heartbeat
    # (lease / 4) is also how often a held call notices its end, so not much longer either.
    sched = TaskScheduler(store=store, runner=ScriptRunner(), max_workers=workers,
                          lease_seconds=2, shutdown_timeout=0.05)
    # Threads this test starts, by identity: a count would also drop when a thread an earlier
    # test left behind ends meanwhile, and hide one held here.
    before = set(threading.enumerate())
    for _ in range(count):
        sched.add(f"gate {gates}", every=3600, timeout_seconds=0.1)
    store.db.conn.execute("UPDATE tasks SET next_run = ?", (time.time() - 1,))
    store.db.conn.commit()
    recorded, held_most = [], 0
    while len(recorded) < count:
        passed = sched.run_due()
        recorded += passed
        wait_for(lambda: not sched._executing, what="the pass's workers to return")
        hung = len(set(threading.enumerate()) - before)
        held_most = max(held_most, hung)
        assert hung <= workers and len(sched._orphans) <= workers
        if len(sched._orphans) == workers:
            # Every worker is held by a hung call: the next pass claims nothing...
            assert sched.run_due() == []
            assert store.count_tasks()["active"] == count
            # ...until they end.
            for run_id in list(sched._orphans):
                (gates / str(run_id)).touch()
            wait_for(lambda: sched._held_by_orphans() == 0, what="the hung calls to end")
    assert held_most == workers
    assert len(recorded) == count
    assert {(r.status, r.error_type) for r in recorded} == {("failed", "timeout")}
    assert sched.abandoned == count  # a count, not a collection
    assert "all 4 workers are held by calls that outlived their timeout" in caplog.text
    for run in recorded:
        (gates / str(run.id)).touch()
    wait_for(lambda: not set(threading.enumerate()) - before, timeout=15,
             what="the abandoned calls' threads to end")
    assert sched._held_by_orphans() == 0 and marks(sched) == EMPTY
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
