"""The part both stores share (jarvis.scheduler.store_common.StoreBase), run against each store:
a real SQLite file and a real PostgreSQL database. The dialect pieces (placeholders, table
names, OFFSET without LIMIT, the task lock) must give the same answers on both."""

from __future__ import annotations

import time

import pytest

from jarvis.errors import UserError
from jarvis.scheduler.runner import RunOutcome
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore, TaskNotFoundError
from jarvis.scheduler.store_postgres import PostgresStore


def runner(task, occurrence) -> RunOutcome:
    if "fail" in task.prompt:
        raise RuntimeError("failed on purpose")
    if "stop" in task.prompt:
        return RunOutcome(success=False, error="stopped at max_turns (2 turns)",
                          error_type="max_turns")
    return RunOutcome(success=True, answer=f"ran {task.prompt}")


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    if request.param == "sqlite":
        store = SchedulerStore(tmp_path / "s.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_url"))
    now = [time.time()]
    api = TaskScheduler(store=store, runner=runner, clock=lambda: now[0])
    api.now = now  # the test moves the clock to make tasks due
    yield api
    store.close()


def test_task_pages_filters_and_counts(api):
    store = api.store
    tasks = []
    for i in range(5):
        # One creation time each: ties are broken by rowid on SQLite, by id on PostgreSQL.
        api.now[0] += 1
        tasks.append(api.add(f"echo {i}", every=3600))
    api.pause_task(tasks[3].id)
    ids = [t.id for t in tasks]
    assert [t.id for t in store.list_tasks()] == ids
    assert [t.id for t in store.list_tasks(limit=2)] == ids[:2]
    assert [t.id for t in store.list_tasks(offset=3)] == ids[3:]  # SQLite needs LIMIT -1 here
    assert [t.id for t in store.list_tasks(limit=2, offset=2)] == ids[2:4]
    assert [t.id for t in store.list_tasks("paused")] == [ids[3]]
    assert [t.id for t in store.list_tasks("active", limit=1, offset=3)] == [ids[4]]
    assert store.count_tasks() == {"active": 4, "paused": 1}


def test_runs_filters_limits_and_the_scheduled_run_question(api):
    store = api.store
    ok, bad = api.add("echo", every=3600), api.add("fail", every=3600)
    api.run_now(ok.id)
    assert not store.has_scheduled_run(ok.id)  # a manual run does not count
    api.now[0] += 3600.5
    api.run_due()
    assert store.has_scheduled_run(ok.id) and store.has_scheduled_run(bad.id)
    runs = store.list_runs()
    assert [r.id for r in runs] == sorted((r.id for r in runs), reverse=True) and len(runs) == 3
    assert [r.trigger for r in store.list_runs(ok.id)] == ["schedule", "manual"]
    assert [r.task_id for r in store.list_runs(status="failed")] == [bad.id]
    assert store.list_runs(ok.id, status="failed") == []
    assert len(store.list_runs(limit=1)) == 1
    assert store.get_run(runs[0].id) == runs[0]
    with pytest.raises(UserError, match="no run with id 999999"):
        store.get_run(999999)


def test_a_run_without_an_answer_is_incomplete_and_not_retried(api):
    task = api.add("stop early", every=3600, max_retries=3)
    api.now[0] += 3600.5
    (run,) = api.run_due()
    assert (run.status, run.error_type) == ("incomplete", "max_turns")
    assert [r.status for r in api.store.list_runs(task.id)] == ["incomplete"]  # no retry queued
    assert api.get_task(task.id).last_outcome == "incomplete"


def test_cancel_skips_the_queued_retry_and_delete_takes_the_runs_along(api):
    store = api.store
    task = api.create_task("fail", "interval", "3600", max_retries=2, retry_backoff_seconds=60)
    keep = api.add("echo", every=3600)
    api.now[0] += 3600.5
    (first,) = [r for r in api.run_due() if r.task_id == task.id]
    assert first.status == "failed"
    (queued,) = store.list_runs(task.id, status="pending")
    assert queued.attempt == 2 and queued.trigger == "retry"
    assert store.get_task(task.id).last_outcome == "failed (retry queued)"
    api.cancel_task(task.id)
    assert store.get_run(queued.id).status == "skipped"
    assert store.get_run(queued.id).error == "not run: task cancelled"
    store.delete_task(task.id)
    with pytest.raises(TaskNotFoundError):
        store.get_task(task.id)
    assert store.list_runs(task.id) == [] and len(store.list_runs(keep.id)) == 1
    with pytest.raises(TaskNotFoundError):
        store.delete_task(task.id)


def test_pruning_keeps_the_newest_scheduled_and_manual_runs(api):
    store = api.store
    task = api.add("echo", every=60)
    for _ in range(3):
        api.run_now(task.id)
        api.now[0] += 61
        api.run_due()
    assert len(store.list_runs(task.id)) == 6
    assert store.prune_runs(now=api.now[0]) == 0  # no rule given: nothing to do
    assert store.prune_runs(now=api.now[0], keep_per_task=1, batch=1) == 4
    assert sorted(r.trigger for r in store.list_runs(task.id)) == ["manual", "schedule"]
    assert store.prune_runs(now=api.now[0] + 10**6, max_age=1) == 0  # the newest two stay


def test_shared_statements_are_the_dialects_own(api):
    statement = api.store._sql("SELECT * FROM {runs} WHERE id = ?")
    if isinstance(api.store, PostgresStore):
        assert statement == "SELECT * FROM jarvis_runs WHERE id = %s"
    else:
        assert statement == "SELECT * FROM runs WHERE id = ?"
    with pytest.raises(ValueError, match="no %"):
        api.store._sql("SELECT * FROM {runs} WHERE error LIKE '%x'")
