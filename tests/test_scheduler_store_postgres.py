"""The PostgreSQL ledger against a real PostgreSQL server (tests/servers.py): the store
protocol, migrations, concurrent claims, leases on the database clock, and the worker's
compare-and-set on (run id, epoch, status)."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from celery_support import pg_rows

from jarvis.scheduler.ledger import DispatchLedger, SchedulerLedger, open_store, redact
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore
from jarvis.scheduler.store_postgres import MIGRATIONS, PostgresStore


@pytest.fixture
def store(pg_url):
    s = PostgresStore(pg_url)
    yield s
    s.close()


@pytest.fixture
def api(store):
    return TaskScheduler(store=store, runner=lambda task, occurrence: f"ran {occurrence.attempt}")


def due(url: str) -> None:
    pg_rows(url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))


def test_both_stores_implement_the_protocol_and_config_chooses(tmp_path, pg_url, store):
    sqlite = SchedulerStore(tmp_path / "s.db")
    assert isinstance(sqlite, SchedulerLedger) and isinstance(store, SchedulerLedger)
    assert isinstance(store, DispatchLedger) and not isinstance(sqlite, DispatchLedger)
    sqlite.close()
    from jarvis.core.config import load_config

    chosen = open_store(load_config(overrides={"scheduler.store": pg_url}))
    assert isinstance(chosen, PostgresStore) and chosen.path == pg_url
    chosen.close()
    default = open_store(load_config())
    assert isinstance(default, SchedulerStore) and default.path.name == "scheduler.db"
    default.close()
    assert redact("postgresql://me:secret@db:5432/x") == "postgresql://me:***@db:5432/x"


def test_migrations_apply_once_even_when_many_processes_open_at_once(pg_url):
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            PostgresStore(pg_url).close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert pg_rows(pg_url, "SELECT version FROM jarvis_schema") == [(len(MIGRATIONS),)]
    tables = {r[0] for r in pg_rows(pg_url, "SELECT tablename FROM pg_tables WHERE tablename "
                                            "LIKE 'jarvis_%%'")}
    assert tables == {"jarvis_schema", "jarvis_tasks", "jarvis_runs", "jarvis_run_logs",
                      "jarvis_effects"}


def test_concurrent_claimers_take_each_occurrence_once(pg_url, api):
    tasks = [api.add(f"echo {i}", every=3600) for i in range(120)]
    due(pg_url)
    taken: list[tuple[str, float]] = []
    lock = threading.Lock()

    def claimer(n: int) -> None:
        s = PostgresStore(pg_url)
        try:
            while True:
                claims = s.claim_due(now=time.time(), owner=f"claimer-{n}", lease_seconds=60,
                                     limit=7, default_grace=3600)
                if not claims:
                    return
                with lock:
                    taken.extend((c.task.id, c.run.scheduled_for) for c in claims)
        finally:
            s.close()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert Counter(taken).most_common(1)[0][1] == 1
    assert {t for t, _ in taken} == {t.id for t in tasks}
    owners = {r[0] for r in pg_rows(pg_url, "SELECT claimed_by FROM jarvis_runs")}
    assert len(owners) > 1  # they really competed


def test_leases_are_measured_on_the_database_clock(pg_url, store, api):
    api.add("echo skewed", every=3600)
    due(pg_url)
    skew = 86_400.0  # this host's clock is a day ahead
    (claim,) = store.claim_due(now=time.time() + skew, owner="skewed", lease_seconds=30, limit=5,
                               default_grace=10**9)
    assert abs(claim.run.lease_until - (store.db_now() + 30)) < 5
    # A reaper whose clock is far ahead does not steal a live lease...
    assert store.recover(now=time.time() + skew) == []
    # ...and an expired one is reaped whatever the reaper's clock says.
    pg_rows(pg_url, "UPDATE jarvis_runs SET lease_until = %s", (store.db_now() - 1,))
    (crashed,) = store.recover(now=time.time() - skew)
    assert crashed.error_type == "crashed" and "stopped renewing its lease" in crashed.error


def test_worker_compare_and_set_on_run_epoch_and_status(pg_url, store, api):
    task = api.add("echo cas", every=3600, max_retries=1, retry_backoff_seconds=0)
    due(pg_url)
    (claim,) = store.claim_for_dispatch(now=time.time(), owner="daemon", dispatch_seconds=60,
                                        limit=5, default_grace=3600)
    run = claim.run
    assert (run.status, run.epoch, run.started_at) == ("dispatched", 1, None)
    assert store.claim_for_dispatch(now=time.time(), owner="other", dispatch_seconds=60, limit=5,
                                    default_grace=3600) == []  # one run per task at a time
    assert store.start_dispatched(run.id, 2, "w1", 30) is None  # an epoch never sent
    started = store.start_dispatched(run.id, 1, "w1", 30)
    assert started is not None and started.run.status == "running" and started.task.id == task.id
    assert store.start_dispatched(run.id, 1, "w2", 30) is None  # the duplicate delivery
    assert store.renew(run.id, 1, "w1", 30) and not store.renew(run.id, 1, "w2", 30)
    assert store.finish_dispatched(run.id, 0, "w1", success=True, answer="x") is None
    assert store.finish_dispatched(run.id, 1, "w2", success=True, answer="x") is None
    done = store.finish_dispatched(run.id, 1, "w1", success=False, error="boom",
                                   error_type="execution", run_log_id="log-1",
                                   log_entry={"id": "log-1", "tool_calls": []})
    assert done is not None and done.status == "failed"
    assert store.finish_dispatched(run.id, 1, "w1", success=True) is None  # recorded once
    assert store.get_log_entry("log-1") == {"id": "log-1", "tool_calls": []}
    # The failure queued attempt 2 (retries 1, backoff 0): dispatched with its own epoch.
    (retry,) = store.claim_for_dispatch(now=time.time() + 1, owner="daemon", dispatch_seconds=60,
                                        limit=5, default_grace=3600)
    assert (retry.run.attempt, retry.run.trigger, retry.run.epoch) == (2, "retry", 1)
    assert retry.run.idempotency_key == run.idempotency_key


def test_a_dispatched_run_nobody_started_is_sent_again_with_the_next_epoch(pg_url, store, api):
    api.add("echo lost message", every=3600)
    due(pg_url)
    (claim,) = store.claim_for_dispatch(now=time.time(), owner="d1", dispatch_seconds=60,
                                        limit=5, default_grace=3600)
    assert store.redispatch_expired(owner="d2", dispatch_seconds=60, limit=5) == []
    pg_rows(pg_url, "UPDATE jarvis_runs SET lease_until = 0")
    (again,) = store.redispatch_expired(owner="d2", dispatch_seconds=60, limit=5)
    assert (again.run.id, again.run.epoch, again.run.attempt) == (claim.run.id, 2, 1)
    assert store.start_dispatched(claim.run.id, 1, "late-worker", 30) is None
    assert store.start_dispatched(claim.run.id, 2, "worker", 30) is not None
    assert store.recover(now=time.time()) == []  # not a crash: nothing ran twice


def test_only_runs_whose_message_is_lost_are_sent_again_oldest_first(pg_url, store, api):
    """A run waiting in the broker keeps its place; one claimed and never sent, one sent while
    nothing waits in the queue (lost), and one past the safety deadline are sent again, in
    the order of their scheduled times."""
    tasks = [api.add(f"echo {i}", every=3600) for i in range(4)]
    for i, task in enumerate(tasks):  # due one after the other, the last one first in id
        pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s WHERE id = %s",
                (time.time() - 10 + i, task.id))
    claims = store.claim_for_dispatch(now=time.time(), owner="d1", dispatch_seconds=3600,
                                      limit=10, default_grace=3600)
    assert [c.task.id for c in claims] == [t.id for t in tasks]  # oldest due first
    runs = [c.run for c in claims]
    assert store.mark_sent([(r.id, r.epoch) for r in runs[:3]]) == 3
    assert store.mark_sent([(runs[0].id, runs[0].epoch + 5)]) == 0  # another epoch's send
    pg_rows(pg_url, "UPDATE jarvis_runs SET sent_at = sent_at - 100, dispatched_at = "
                    "dispatched_at - 100")  # all sent (or claimed) 100 s ago
    # A backlog: everything may still be waiting in the queue; only the never-sent run goes.
    (unsent,) = store.redispatch_expired(owner="d2", dispatch_seconds=3600, limit=10,
                                         unsent_seconds=10)
    assert (unsent.run.id, unsent.run.epoch) == (runs[3].id, 2)
    assert "never sent" in unsent.note
    assert store.redispatch_expired(owner="d2", dispatch_seconds=3600, limit=10) == []
    # Past the safety deadline: sent again, whatever the queue says.
    pg_rows(pg_url, "UPDATE jarvis_runs SET lease_until = 0 WHERE id = %s", (runs[2].id,))
    (late,) = store.redispatch_expired(owner="d2", dispatch_seconds=3600, limit=10)
    assert late.run.id == runs[2].id and "expired" in late.note
    # The queue is empty: what was sent more than `lost_after` ago is lost, oldest first.
    lost = store.redispatch_expired(owner="d2", dispatch_seconds=3600, limit=10, lost_after=60)
    assert [c.run.id for c in lost] == [runs[0].id, runs[1].id]
    assert all(c.run.epoch == 2 and "lost" in c.note for c in lost)
    assert store.start_dispatched(runs[0].id, 1, "stale-worker", 30) is None
    assert store.start_dispatched(runs[0].id, 2, "worker", 30) is not None


def test_cancelled_before_a_worker_starts_it_is_not_run(pg_url, store, api):
    task = api.add("echo never", every=3600)
    due(pg_url)
    (claim,) = store.claim_for_dispatch(now=time.time(), owner="d", dispatch_seconds=60, limit=5,
                                        default_grace=3600)
    api.cancel_task(task.id)
    assert store.start_dispatched(claim.run.id, 1, "w", 30) is None
    assert store.get_run(claim.run.id).status == "skipped"


def test_local_runner_on_the_postgres_ledger(pg_url, api, store):
    ok = api.add("echo fine", every=3600)
    flaky = api.add("echo flaky", every=3600, max_retries=1, retry_backoff_seconds=0)
    due(pg_url)
    runs = api.run_due()
    assert sorted(r.task_id for r in runs) == sorted([ok.id, flaky.id])
    assert all(r.status == "succeeded" and r.answer == "ran 1" for r in runs)
    manual = api.run_now(ok.id)
    assert manual.trigger == "manual" and manual.status == "succeeded"
    paused = api.pause_task(flaky.id)
    assert paused.status == "paused" and paused.next_run is None
    assert [t.id for t in api.list_tasks("active")] == [ok.id]
    assert store.count_tasks() == {"active": 1, "paused": 1}
    assert len(api.list_runs(ok.id)) == 2


def test_missed_occurrences_are_one_skipped_record_and_a_late_one_off_completes(pg_url, store, api):
    every = api.add("echo every minute", every=60, grace_seconds=30)
    late_once = api.add("echo once", at="2030-01-01T00:00:00Z", grace_seconds=5)
    now = time.time()
    pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s, anchor = %s WHERE id = %s",
            (now - 600 - 10, now - 660 - 10, every.id))
    pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s WHERE id = %s", (now - 100, late_once.id))
    claims = store.claim_due(now=now, owner="o", lease_seconds=30, limit=10, default_grace=3600)
    assert [c.task.id for c in claims] == [every.id]
    assert now - claims[0].run.scheduled_for == pytest.approx(10, abs=1)
    rows = pg_rows(pg_url, "SELECT task_id, status, skipped_count, error_type FROM jarvis_runs "
                           "WHERE status = 'skipped' ORDER BY task_id")
    assert sorted(rows) == sorted([(every.id, "skipped", 10, "missed"),
                                   (late_once.id, "skipped", 1, "missed")])
    assert api.get_task(late_once.id).status == "completed"
    assert api.get_task(every.id).next_run == pytest.approx(claims[0].run.scheduled_for + 60)


def test_a_run_log_entry_too_big_for_the_ledger_is_stored_without_its_transcript(pg_url, store,
                                                                                 api):
    api.add("echo big", every=3600)
    due(pg_url)
    (claim,) = store.claim_for_dispatch(now=time.time(), owner="d", dispatch_seconds=60, limit=5,
                                        default_grace=3600)
    store.start_dispatched(claim.run.id, 1, "w", 30)
    entry = {"id": "big-1", "status": "ok", "messages": [{"content": "x" * 1_500_000}],
             "tool_calls": [{"tool_name": "calculator", "success": True, "content": "4"}]}
    assert store.finish_dispatched(claim.run.id, 1, "w", success=True, answer="done",
                                   run_log_id="big-1", log_entry=entry) is not None
    stored = store.get_log_entry("big-1")
    assert "messages" not in stored and "worker's own run log" in stored["omitted"]
    assert stored["tool_calls"] == entry["tool_calls"] and stored["status"] == "ok"


def test_paging_and_retention_as_on_sqlite(pg_url, store, api):
    tasks = [api.add(f"echo {i}", every=3600) for i in range(5)]
    assert [t.id for t in store.list_tasks(limit=2, offset=1)] == [t.id for t in tasks[1:3]]
    assert [t.id for t in store.list_tasks(offset=4)] == [tasks[4].id]
    for _ in range(4):
        api.run_now(tasks[0].id)
    pg_rows(pg_url, "UPDATE jarvis_runs SET trigger = 'schedule' WHERE id < 4")
    pg_rows(pg_url, "UPDATE jarvis_runs SET finished_at = 0 WHERE id = 1")
    assert store.prune_runs(now=time.time(), max_age=3600) == 1  # the old one
    assert store.prune_runs(now=time.time(), keep_per_task=1) == 1  # id 2; 3 and 4 are newest
    assert [r.id for r in store.list_runs(tasks[0].id)] == [4, 3]


def test_a_ledger_made_by_an_older_version_is_migrated_in_place(pg_url):
    # Schema version 1, as the first release made it, with a task in it.
    pg_rows(pg_url, "CREATE TABLE jarvis_schema (version integer NOT NULL)")
    pg_rows(pg_url, "INSERT INTO jarvis_schema VALUES (1)")
    pg_rows(pg_url, MIGRATIONS[0])
    pg_rows(pg_url, "INSERT INTO jarvis_tasks (id, prompt, schedule_type, schedule_value, status, "
                    "tools, approved_tools, metadata, timezone, created_at, anchor, "
                    "timeout_seconds, max_retries, retry_backoff_seconds, on_crash) VALUES "
                    "('old1', 'echo old', 'interval', '60', 'active', '[]', '[]', '{}', 'UTC', "
                    "0, 0, 600, 0, 30, 'retry')")
    store = PostgresStore(pg_url)
    try:
        assert store.schema_version == len(MIGRATIONS) >= 2
        task = store.get_task("old1")
        assert task.prompt == "echo old" and task.notify is None
        assert {r[0] for r in pg_rows(pg_url, "SELECT column_name FROM information_schema.columns "
                                              "WHERE table_name = 'jarvis_runs'")} >= {"delivery"}
    finally:
        store.close()


def test_model_quota_and_delivery_records_as_on_sqlite(pg_url, store):
    from jarvis.scheduler.store import QuotaError

    api = TaskScheduler(store=store, runner=lambda task, occurrence: "ran")
    api.model_max_active_tasks = 1
    api.create_task("echo a", "interval", "3600", created_by="model")
    with pytest.raises(QuotaError, match="model_max_active_tasks = 1"):
        api.create_task("echo b", "interval", "3600", created_by="model")
    person = api.add("echo person", every=3600)
    run = api.run_now(person.id)
    recorded = store.record_delivery(run.id, {"channel": "ops", "status": "sent", "attempts": 1,
                                              "at": time.time()})
    assert recorded.delivery["status"] == "sent" and store.get_run(run.id).delivery == \
        recorded.delivery


def test_schedule_run_never_beside_a_running_or_dispatched_run(pg_url, store, api):
    """Defect 10 on the shared ledger: a manual run is refused (exit 3) while a run of the task
    is sent to a worker or going on, on any machine; a finished run frees it."""
    from jarvis.scheduler.store import TaskBusyError

    task = api.add("echo busy", every=3600)
    due(pg_url)
    (claim,) = store.claim_for_dispatch(now=time.time(), owner="d", dispatch_seconds=60, limit=5,
                                        default_grace=3600)
    with pytest.raises(TaskBusyError) as busy:
        store.claim_manual(task, now=time.time(), owner="me", lease_seconds=30)
    assert busy.value.exit_code == 3 and "sent to a worker" in str(busy.value)
    assert store.start_dispatched(claim.run.id, 1, "w", 30) is not None
    with pytest.raises(TaskBusyError, match="started"):
        api.run_now(task.id)
    store.finish_dispatched(claim.run.id, 1, "w", success=True, answer="done")
    manual = api.run_now(task.id)
    assert (manual.status, manual.trigger, manual.answer) == ("succeeded", "manual", "ran 1")


def test_a_retry_after_a_stopped_timed_out_run_waits_for_the_stop(pg_url, store, api):
    api.add("echo slow", every=3600, max_retries=1, retry_backoff_seconds=0)
    due(pg_url)
    (claim,) = store.claim_for_dispatch(now=time.time(), owner="d", dispatch_seconds=60, limit=5,
                                        default_grace=3600)
    store.start_dispatched(claim.run.id, 1, "w", 30)
    store.finish_dispatched(claim.run.id, 1, "w", success=False, error="timed out",
                            error_type="timeout", min_retry_delay=5)
    assert store.claim_for_dispatch(now=time.time() + 4, owner="d", dispatch_seconds=60,
                                    limit=5, default_grace=3600) == []
    (retry,) = store.claim_for_dispatch(now=time.time() + 6, owner="d", dispatch_seconds=60,
                                        limit=5, default_grace=3600)
    assert retry.run.attempt == 2


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_a_ledger_of_any_earlier_version_gets_trust_and_workspace(pg_url, version):
    """As on SQLite: migration 3 is the task's trust (issue 21), 4 the fenced side effects and
    sent_at (issue 27), 5 parked runs (issue 22), 6 the task's workspace (issue 25); version 2
    is the ledger before them all."""
    from jarvis.scheduler.records import Task

    pg_rows(pg_url, "CREATE TABLE jarvis_schema (version integer NOT NULL)")
    pg_rows(pg_url, "INSERT INTO jarvis_schema VALUES (%s)", (version,))
    for script in MIGRATIONS[:version]:
        pg_rows(pg_url, script)
    trust = ", trust" if version >= 3 else ""
    pg_rows(pg_url, f"INSERT INTO jarvis_tasks (id, prompt, schedule_type, schedule_value, "
                    f"status, tools, approved_tools, metadata, timezone, created_at, anchor, "
                    f"timeout_seconds, max_retries, retry_backoff_seconds, on_crash{trust}) "
                    f"VALUES ('old1', 'echo old', 'interval', '60', 'active', '[]', '[]', '{{}}', "
                    f"'UTC', 0, 0, 600, 0, 30, 'retry'"
                    + (", '{\"tainted\": true, \"private\": true}')" if trust else ")"))
    store = PostgresStore(pg_url)
    try:
        assert store.schema_version == len(MIGRATIONS) == 6
        columns = {r[0] for r in pg_rows(pg_url, "SELECT column_name FROM information_schema."
                                                 "columns WHERE table_name = 'jarvis_tasks'")}
        assert {"notify", "trust", "workspace"} <= columns
        runs = {r[0] for r in pg_rows(pg_url, "SELECT column_name FROM information_schema."
                                              "columns WHERE table_name = 'jarvis_runs'")}
        assert {"sent_at", "parked_at", "resumes"} <= runs
        assert pg_rows(pg_url, "SELECT to_regclass('jarvis_effects') IS NOT NULL") == [(True,)]
        old = store.get_task("old1")
        assert old.prompt == "echo old" and old.workspace is None
        assert old.born_tainted is (version >= 3)
        born = {"tainted": True, "private": True, "run_id": "r1"}
        store.add_task(Task(id="new1", prompt="p", schedule_type="interval",
                            schedule_value="3600", created_at=2.0, anchor=2.0, next_run=3.0,
                            trust=born, workspace="/ws/config.toml"))
        again = store.get_task("new1")
        assert (again.trust, again.workspace) == (born, "/ws/config.toml")
    finally:
        store.close()
