"""Finishes that arrive together share one transaction (jarvis.scheduler.group_commit): each
writer gets its own result once its transaction has committed, and a write that fails fails
alone. A real SQLite file; the batch is made by holding the store's lock while finishes
arrive (the state of a burst: one worker writing while the others finish)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time

import pytest
from waiting import wait_for

from jarvis.scheduler.group_commit import GroupCommit
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore


def test_finishes_that_arrive_together_share_one_transaction_and_each_gets_its_run(tmp_path):
    store = SchedulerStore(tmp_path / "s.db")
    api = TaskScheduler(store=store, runner=lambda t, o: "unused")
    for i in range(4):
        api.add(f"echo {i}", every=3600)
    now = time.time()
    with store.immediate() as conn:
        conn.execute("UPDATE tasks SET next_run = ?", (now,))
    claims = store.claim_due(now=now, owner="me", lease_seconds=60, limit=4, default_grace=60)
    assert len(claims) == 4
    begins: list[str] = []
    store.db.conn.set_trace_callback(lambda sql: begins.append(sql) if sql.startswith("BEGIN")
                                     else None)
    results: dict[int, object] = {}

    def finish(run_id: int, owner: str) -> None:
        results[run_id] = store.finish_run(run_id, owner, now=now + 1, success=True,
                                           answer=f"answer {run_id}")

    ids = [c.run.id for c in claims]
    store._lock.acquire()  # a write under way: the first finish waits for it, leading
    try:
        first = threading.Thread(target=finish, args=(ids[0], "me"))
        first.start()
        wait_for(lambda: store._finishes._leading, what="the first finish to lead")
        others = [threading.Thread(target=finish, args=(run_id, "me")) for run_id in ids[1:3]]
        # One that is not ours (another owner): its compare-and-set writes nothing.
        others.append(threading.Thread(target=finish, args=(ids[3], "someone else")))
        for thread in others:
            thread.start()
        wait_for(lambda: len(store._finishes._queue) == 3, what="three finishes to queue")
        assert results == {}  # nothing counts as done before its commit
    finally:
        store._lock.release()
    for thread in [first, *others]:
        thread.join(10)
    store.db.conn.set_trace_callback(None)
    assert len(begins) == 2  # the leader's own, then the three that queued meanwhile
    for run_id in ids[:3]:
        run = results[run_id]
        assert run.id == run_id and run.status == "succeeded" and run.answer == f"answer {run_id}"
    assert results[ids[3]] is None
    stored = {r.id: r.status for r in store.list_runs(limit=None)}
    assert stored == {ids[0]: "succeeded", ids[1]: "succeeded", ids[2]: "succeeded",
                      ids[3]: "running"}
    outcomes = {t.id: t.last_outcome for t in store.list_tasks()}
    assert [outcomes[c.task.id] for c in claims] == ["succeeded"] * 3 + [None]
    store.close()


def test_a_write_that_fails_fails_alone_and_the_rest_of_its_batch_commits(tmp_path):
    conn = sqlite3.connect(str(tmp_path / "g.db"), isolation_level=None,
                           check_same_thread=False)
    conn.execute("CREATE TABLE t (item TEXT PRIMARY KEY)")
    lock = threading.RLock()
    transactions: list[str] = []

    @contextlib.contextmanager
    def transaction():
        with lock:
            conn.execute("BEGIN IMMEDIATE")
            transactions.append("begin")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def apply(db, item: str) -> str:
        db.execute("INSERT INTO t VALUES (?)", (item,))
        if item == "bad":
            raise ValueError("refused: bad")
        return item.upper()

    group = GroupCommit(transaction, apply)
    outcomes: dict[str, object] = {}

    def submit(item: str) -> None:
        try:
            outcomes[item] = group.submit(item)
        except ValueError as exc:
            outcomes[item] = exc

    lock.acquire()
    try:
        lead = threading.Thread(target=submit, args=("lead",))
        lead.start()
        wait_for(lambda: group._leading, what="the first write to lead")
        rest = [threading.Thread(target=submit, args=(item,)) for item in ("a", "bad", "b")]
        for thread in rest:
            thread.start()
        wait_for(lambda: len(group._queue) == 3, what="three writes to queue")
    finally:
        lock.release()
    for thread in [lead, *rest]:
        thread.join(10)
    assert outcomes["lead"] == "LEAD" and outcomes["a"] == "A" and outcomes["b"] == "B"
    assert isinstance(outcomes["bad"], ValueError)
    # The batch of three was rolled back and written again one by one: the bad one alone failed.
    assert sorted(r[0] for r in conn.execute("SELECT item FROM t")) == ["a", "b", "lead"]
    assert len(transactions) == 1 + 1 + 3
    assert not group._leading and not group._queue
    with pytest.raises(ValueError, match="refused"):
        group.submit("bad")  # alone: its own error, at once
    conn.close()
