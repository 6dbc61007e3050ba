"""The daemon's reused threads (jarvis.scheduler.threads): reuse, a fresh context per call, a
hung call never delays another, and the daemon's runs no longer start two threads each."""

from __future__ import annotations

import logging
import threading
import time

from waiting import wait_for

from jarvis.core.events import EventBus, EventType
from jarvis.scheduler.fencing import current_fence, set_fence
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore
from jarvis.scheduler.threads import IDLE_NAME, ThreadPool


def test_sequential_calls_reuse_one_thread_under_their_own_names() -> None:
    pool = ThreadPool(linger=30)
    seen: list[tuple[int, str]] = []
    for i in range(20):
        job = pool.submit(lambda i=i: seen.append((threading.get_ident(),
                                                   threading.current_thread().name)), f"call-{i}")
        job.join(10)
        assert not job.is_alive()
    assert pool.started == 1
    assert len({ident for ident, _ in seen}) == 1
    assert [name for _, name in seen] == [f"call-{i}" for i in range(20)]


def test_each_call_starts_with_an_empty_context_no_fence_leaks() -> None:
    pool = ThreadPool(linger=30)
    marker = object()
    got: list[object] = []

    def first() -> None:
        set_fence(marker)  # type: ignore[arg-type]
        got.append(current_fence())

    def second() -> None:
        got.append(current_fence())

    pool.submit(first, "first").join(10)
    pool.submit(second, "second").join(10)
    assert pool.started == 1  # the same thread ran both
    assert got == [marker, None]


def test_a_hung_call_holds_its_thread_and_delays_no_other() -> None:
    pool = ThreadPool(linger=30)
    release = threading.Event()
    hung = pool.submit(lambda: release.wait(60), "hung")
    try:
        quick = pool.submit(lambda: None, "quick")
        quick.join(10)
        assert not quick.is_alive() and hung.is_alive()
        assert pool.started == 2
    finally:
        release.set()
    hung.join(10)
    assert not hung.is_alive()


def test_an_error_is_logged_and_the_thread_serves_the_next_call(caplog) -> None:
    pool = ThreadPool(linger=30)

    def boom() -> None:
        raise RuntimeError("boom in a pooled call")

    with caplog.at_level(logging.ERROR, logger="jarvis.scheduler"):
        failed = pool.submit(boom, "boom-call")
        failed.join(10)
    assert not failed.is_alive()
    assert "unhandled error in boom-call" in caplog.text and "boom in a pooled call" in caplog.text
    after = pool.submit(lambda: None, "after")
    after.join(10)
    assert not after.is_alive() and pool.started == 1


def test_idle_threads_end_after_the_linger() -> None:
    pool = ThreadPool(linger=0.05)
    ran_on: list[threading.Thread] = []
    pool.submit(lambda: ran_on.append(threading.current_thread()), "short").join(10)
    wait_for(lambda: not ran_on[0].is_alive(), timeout=10, what="the idle thread to end")
    assert not pool._idle and ran_on[0].name == IDLE_NAME
    again = pool.submit(lambda: None, "again")  # a new thread, as the pool has none left
    again.join(10)
    assert not again.is_alive() and pool.started == 2


def test_the_daemon_runs_a_burst_without_two_thread_starts_per_run(tmp_path) -> None:
    from jarvis.scheduler import threads

    count = 40
    store = SchedulerStore(tmp_path / "s.db")
    bus = EventBus()
    ended: list[int] = []
    done = threading.Event()

    def on_end(event) -> None:
        ended.append(event.data["run_id"])
        if len(ended) >= count:
            done.set()

    bus.subscribe(EventType.SCHEDULER_TASK_END, on_end)
    sched = TaskScheduler(store=store, runner=lambda task, occurrence: "ok", max_workers=2,
                          poll_seconds=0.2, bus=bus)
    for i in range(count):
        sched.add(f"echo {i}", every=86400)
    started_before = threads.RUN_THREADS.started
    thread_starts = [0]
    original = threading.Thread.start

    def counting(self: threading.Thread) -> None:
        thread_starts[0] += 1
        original(self)

    with store.immediate() as conn:
        conn.execute("UPDATE tasks SET next_run = ?", (time.time() - 1,))
    threading.Thread.start = counting  # type: ignore[method-assign]
    try:
        sched.start()
        assert done.wait(60), f"{len(ended)} of {count} runs ended"
    finally:
        threading.Thread.start = original  # type: ignore[method-assign]
        sched.stop(timeout=10)
    runs = store.list_runs(limit=None)
    assert len(runs) == count and {r.status for r in runs} == {"succeeded"}
    assert len({r.task_id for r in runs}) == count  # each task exactly once
    # Before: two threads per run (80 here). Now the pool's, plus the daemon loop's own.
    assert thread_starts[0] < count / 2, thread_starts[0]
    assert threads.RUN_THREADS.started - started_before < count / 2
    store.close()


def test_the_loop_keeps_a_long_calls_lease_and_marks_it_overdue_at_its_timeout(tmp_path):
    # A daemon's call runs on its run's own thread, with no supervisor beside it: the loop
    # renews the leases (a lease of 1 s, a call of several) and marks the call overdue when
    # its timeout passes, while it still runs; at shutdown it is recorded as timed out.
    store = SchedulerStore(tmp_path / "s.db")
    release = threading.Event()
    started = threading.Event()

    def runner(task, occurrence) -> str:
        started.set()
        release.wait(30)
        return "late"

    sched = TaskScheduler(store=store, runner=runner, max_workers=1, poll_seconds=0.2,
                          lease_seconds=1.0, shutdown_timeout=0)
    task = sched.add("echo slow", every=3600, timeout_seconds=2.0)
    with store.immediate() as conn:
        conn.execute("UPDATE tasks SET next_run = ?", (time.time() - 0.1,))
    sched.start()
    try:
        assert started.wait(10)
        run = store.list_runs(task.id)[0]
        first_lease = run.lease_until
        # Renewed every 0.25 s: past its first lease and still held (nothing to recover).
        wait_for(lambda: store.get_run(run.id).lease_until > first_lease + 1.0, timeout=10,
                 what="the lease to be renewed")
        assert store.recover(now=time.time()) == []
        assert sched.abandoned == 0
        wait_for(lambda: sched.abandoned == 1, timeout=10, what="the call to be marked overdue")
        assert started.is_set() and not release.is_set()  # marked while the call still runs
        assert store.get_run(run.id).status == "running"
    finally:
        sched.stop(timeout=10)
        release.set()
    ended = store.get_run(run.id)
    assert (ended.status, ended.error_type) == ("failed", "timeout")
    assert len(store.list_runs(task.id)) == 1
    store.close()
