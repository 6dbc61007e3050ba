"""Text a model controls (a run's answer and error, its transcript, a task's prompt) holding NUL
or a lone surrogate ("\\u0000", "\\ud800" in the engine's JSON): both stores refuse the same
prompts and record every run, so a worker never fails to record a run and has it run again."""

from __future__ import annotations

import time

import pytest
from celery_support import pg_rows

from jarvis.errors import UserError
from jarvis.scheduler.runner import RunOutcome
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore
from jarvis.scheduler.store_postgres import PostgresStore

HOSTILE = "before\x00after \ud800 end"


def hostile_runner(task, occurrence) -> RunOutcome:
    if "fail" in task.prompt:
        raise RuntimeError(HOSTILE)
    return RunOutcome(success=True, answer=HOSTILE)


@pytest.fixture(params=["sqlite", "postgres"])
def api(request, tmp_path):
    if request.param == "sqlite":
        store = SchedulerStore(tmp_path / "s.db")
    else:
        store = PostgresStore(request.getfixturevalue("pg_url"))
    now = [time.time()]
    api = TaskScheduler(store=store, runner=hostile_runner, clock=lambda: now[0])
    api.now = now  # the test moves the clock to make tasks due
    yield api
    store.close()


@pytest.mark.parametrize("prompt", ["run\x00this", "run \ud800 this"])
def test_a_prompt_either_store_cannot_hold_is_refused_the_same_way(api, prompt):
    with pytest.raises(UserError, match="NUL character or a lone surrogate"):
        api.add(prompt, every=3600)
    assert api.list_tasks() == []


def test_hostile_answers_and_errors_are_recorded(api):
    ok = api.add("echo", every=3600)
    bad = api.add("fail", every=3600)
    api.now[0] += 3600.5
    runs = {r.task_id: r for r in api.run_due()}
    assert runs[ok.id].status == "succeeded"
    assert runs[ok.id].answer == "before\ufffdafter \ufffd end"
    assert runs[bad.id].status == "failed" and "before\ufffdafter" in runs[bad.id].error
    stored = {r.task_id: r for r in api.list_runs()}
    assert stored[ok.id].answer == runs[ok.id].answer


def test_a_worker_records_a_hostile_answer_and_transcript(pg_url):
    store = PostgresStore(pg_url)
    api = TaskScheduler(store=store, runner=hostile_runner)
    api.add("echo", every=3600)
    pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))
    (claim,) = store.claim_for_dispatch(now=time.time(), owner="d", dispatch_seconds=60, limit=5,
                                        default_grace=3600)
    assert store.start_dispatched(claim.run.id, 1, "w", 30) is not None
    done = store.finish_dispatched(claim.run.id, 1, "w", success=True, answer=HOSTILE,
                                   run_log_id="log-h",
                                   log_entry={"content": HOSTILE, "messages": [HOSTILE]})
    assert done is not None and done.status == "succeeded"
    assert "\x00" not in done.answer and "\ufffd" in done.answer
    entry = store.get_log_entry("log-h")
    assert entry["content"].startswith("before\x00after")  # JSON keeps NUL as \u0000
    assert "\ud800" not in entry["content"]
    store.close()


@pytest.mark.parametrize("task_id", ["a\x00b", "\ud800", "ab\x00" * 20])
def test_a_hostile_task_id_is_not_found_on_both_stores(api, task_id):
    """A model passes ids to pause/resume/cancel/runs: PostgreSQL raised a raw DataError for a
    NUL where SQLite says "no scheduled task"; both raised UnicodeEncodeError for a surrogate."""
    from jarvis.scheduler.store import TaskNotFoundError

    api.add("echo", every=3600)
    for call in (api.get_task, api.pause_task, api.resume_task, api.cancel_task, api.list_runs,
                 api.run_now):
        with pytest.raises(TaskNotFoundError, match="no scheduled task"):
            call(task_id)


def test_paging_bounds_are_the_same_on_both_stores(api):
    api.add("echo", every=3600)
    for bad in ({"limit": -1}, {"offset": 10**30}, {"limit": 10**30}):
        with pytest.raises(UserError, match="whole number from 0"):
            api.list_tasks(**bad)
    with pytest.raises(UserError, match="whole number from 0"):
        api.list_runs(limit=-5)
    assert len(api.list_tasks(limit=10**12, offset=0)) == 1
