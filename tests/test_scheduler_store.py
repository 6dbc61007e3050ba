"""TaskScheduler + SchedulerStore in process, on a real SQLite file, with a controlled clock."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from jarvis.errors import EngineError, UserError
from jarvis.scheduler.records import Run, Task
from jarvis.scheduler.runner import RunOutcome
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.schedules import iso, parse_iso
from jarvis.scheduler.store import MIGRATIONS, SchedulerStore, TaskNotFoundError

T0 = parse_iso("2026-06-01T12:00:00Z")


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A real runner: answers 'ran <prompt>' and remembers what it ran."""

    def __init__(self, fail_attempts: int = 0, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, float, int]] = []
        self.fail_attempts = fail_attempts
        self.error = error

    def run(self, task: Task, occurrence: Run) -> RunOutcome:
        self.calls.append((task.id, occurrence.scheduled_for, occurrence.attempt))
        if occurrence.attempt <= self.fail_attempts:
            raise self.error or RuntimeError(f"attempt {occurrence.attempt} failed")
        return RunOutcome(success=True, answer=f"ran {task.prompt}", run_log_id=f"log-{occurrence.id}")


@pytest.fixture
def store(tmp_path):
    s = SchedulerStore(db_path=tmp_path / "sched.db")
    yield s
    s.close()


def make(store, runner=None, clock=None, **kw) -> TaskScheduler:
    return TaskScheduler(store=store, runner=runner or Recorder(), clock=clock or Clock(), **kw)


def test_store_uses_wal_migrations_and_an_index_on_next_run(store, tmp_path):
    assert store.db.journal_mode == "wal"
    assert store.schema_version == len(MIGRATIONS)
    plan = store.db.execute("EXPLAIN QUERY PLAN SELECT * FROM tasks WHERE status = 'active' "
                            "AND next_run <= 1 ORDER BY next_run LIMIT 5").fetchall()
    assert "tasks_due" in " ".join(str(r) for r in plan)
    again = SchedulerStore(db_path=tmp_path / "sched.db")  # reopening does not re-migrate
    assert again.schema_version == len(MIGRATIONS)
    again.close()


def test_lifecycle_pause_resume_cancel(store):
    clock = Clock()
    sched = make(store, clock=clock)
    task = sched.add("news", cron="0 8 * * *", tz="Europe/Paris")
    assert iso(task.next_run) == "2026-06-02T06:00:00+00:00"
    every = sched.add("ping", every=600)
    assert every.next_run == T0 + 600
    assert [t.id for t in sched.list_tasks("active")] == [task.id, every.id]

    paused = sched.pause_task(every.id)
    assert (paused.status, paused.next_run) == ("paused", None)
    with pytest.raises(UserError, match="is paused"):
        sched.pause_task(every.id)
    clock.now += 1000
    resumed = sched.resume_task(every.id)
    assert (resumed.status, resumed.next_run) == ("active", clock.now + 600)  # from now
    cancelled = sched.cancel_task(task.id)
    assert (cancelled.status, cancelled.next_run) == ("cancelled", None)
    assert store.get_task(task.id).status == "cancelled"
    with pytest.raises(TaskNotFoundError, match="no scheduled task with id 'nope'"):
        sched.pause_task("nope")
    with pytest.raises(UserError, match="unknown status"):
        sched.list_tasks("sleeping")
    with pytest.raises(UserError, match="exactly one schedule"):
        sched.add("x", cron="* * * * *", every=5)
    with pytest.raises(UserError, match="not among the task's tools"):
        sched.add("x", every=5, tools="calculator", approved_tools="shell")
    # NaN would make every missed run "too late" (skipped forever); True is not a count.
    with pytest.raises(UserError, match="grace seconds must be 0 or more"):
        sched.add("x", every=5, grace_seconds=float("nan"))
    with pytest.raises(UserError, match="retries must be an integer"):
        sched.add("x", every=5, max_retries=True)


def test_due_runs_are_recorded_with_answer_and_run_log_id(store):
    clock, runner = Clock(), Recorder()
    sched = make(store, runner, clock)
    once = sched.add("once", at=iso(T0 + 10))
    every = sched.add("every", every=5)
    assert sched.run_due() == []
    clock.now = T0 + 10
    runs = sched.run_due()
    assert sorted((r.task_id, r.status) for r in runs) == sorted(
        [(once.id, "succeeded"), (every.id, "succeeded")])
    run = store.list_runs(once.id)[0]
    assert (run.answer, run.run_log_id, run.scheduled_for) == ("ran once", f"log-{run.id}", T0 + 10)
    assert run.started_at == T0 + 10 and run.finished_at == T0 + 10
    assert store.get_task(once.id).status == "completed"
    task = store.get_task(every.id)
    assert (task.status, task.next_run, task.last_outcome) == ("active", T0 + 15, "succeeded")


def test_failures_retry_with_backoff_then_stop(store):
    clock, runner = Clock(), Recorder(fail_attempts=3)
    sched = make(store, runner, clock)
    task = sched.add("flaky", at=iso(T0 + 1), max_retries=2, retry_backoff_seconds=10)
    clock.now = T0 + 1
    assert [r.status for r in sched.run_due()] == ["failed"]
    pending = store.list_runs(task.id, status="pending")
    assert [(r.attempt, r.run_after) for r in pending] == [(2, T0 + 11)]
    clock.now = T0 + 10.5
    assert sched.run_due() == []  # backoff not over
    clock.now = T0 + 11
    assert [r.attempt for r in sched.run_due()] == [2]
    clock.now = T0 + 11 + 20  # the backoff doubled
    assert [r.attempt for r in sched.run_due()] == [3]
    clock.now += 1000
    assert sched.run_due() == []  # retries used up
    runs = store.list_runs(task.id)
    assert [(r.attempt, r.status) for r in runs] == [(3, "failed"), (2, "failed"), (1, "failed")]
    assert "attempt 1 failed" in runs[-1].error
    assert store.get_task(task.id).status == "completed"


def test_raise_hang_and_engine_down_are_failures_that_do_not_stop_others(store):
    release = threading.Event()

    def runner(task, occurrence):
        if task.prompt == "hang":
            release.wait(30)
        if task.prompt == "engine":
            raise EngineError("engine at http://127.0.0.1:9 is unreachable")
        if task.prompt == "raise":
            raise ValueError("bad data")
        return f"ok {task.prompt}"

    clock = Clock()
    # run_due gives a call past its timeout shutdown_timeout more to end (0 here), then
    # records it as timed out; the hung call itself cannot be stopped.
    sched = make(store, runner, clock, max_workers=4, shutdown_timeout=0)
    ids = {p: sched.add(p, every=5, timeout_seconds=0.3).id for p in ("hang", "engine", "raise", "fine")}
    clock.now = T0 + 5
    try:
        runs = {r.task_id: r for r in sched.run_due()}
    finally:
        release.set()
    assert runs[ids["hang"]].error_type == "timeout" and "timed out after 0.3 s" in runs[ids["hang"]].error
    assert runs[ids["engine"]].error_type == "engine" and "unreachable" in runs[ids["engine"]].error
    assert runs[ids["raise"]].error_type == "execution" and "ValueError: bad data" in runs[ids["raise"]].error
    assert (runs[ids["fine"]].status, runs[ids["fine"]].answer) == ("succeeded", "ok fine")


def test_missed_runs_catch_up_once_within_grace_and_record_skips(store):
    clock, runner = Clock(), Recorder()
    sched = make(store, runner, clock, grace_seconds=120)
    task = sched.add("tick", every=60)
    clock.now = T0 + 60 * 10 + 30  # down for ~10 intervals; latest occurrence 30 s ago
    runs = sched.run_due()
    assert [(r.scheduled_for, r.status) for r in runs] == [(T0 + 600, "succeeded")]
    skipped = store.list_runs(task.id, status="skipped")
    assert len(skipped) == 1
    assert (skipped[0].skipped_count, skipped[0].scheduled_for, skipped[0].skipped_until) == \
        (9, T0 + 60, T0 + 540)
    assert store.get_task(task.id).next_run == T0 + 660

    hourly = sched.add("hourly", cron="0 * * * *")
    clock.now += 5 * 3600 + 600  # all missed occurrences are older than the grace window
    sched.run_due()
    hourly_runs = store.list_runs(hourly.id)
    assert [r.status for r in hourly_runs] == ["skipped"]
    assert hourly_runs[0].skipped_count == 5 and "grace window" in hourly_runs[0].error
    assert store.get_task(hourly.id).next_run > clock.now


def test_dst_nights_fire_each_daily_occurrence_exactly_once(store):
    clock, runner = Clock(parse_iso("2026-10-31T12:00:00Z")), Recorder()
    sched = make(store, runner, clock)
    fall = sched.add("fall", cron="30 1 * * *", tz="America/New_York")
    end = parse_iso("2026-11-02T12:00:00Z")
    while clock.now < end:
        sched.run_due()
        clock.now += 300
    assert [iso(c[1]) for c in runner.calls] == ["2026-11-01T05:30:00+00:00",
                                                 "2026-11-02T06:30:00+00:00"]
    assert all(r.status == "succeeded" for r in store.list_runs(fall.id))

    clock.now, runner.calls = parse_iso("2026-03-07T12:00:00Z"), []
    sched.add("spring", cron="30 2 * * *", tz="America/New_York")
    end = parse_iso("2026-03-09T12:00:00Z")
    while clock.now < end:
        sched.run_due()
        clock.now += 300
    assert [iso(c[1]) for c in runner.calls] == ["2026-03-08T07:30:00+00:00",
                                                 "2026-03-09T06:30:00+00:00"]


def test_clock_going_back_never_reruns_an_occurrence(store):
    clock, runner = Clock(), Recorder()
    sched = make(store, runner, clock)
    task = sched.add("daily", cron="0 13 * * *")
    clock.now = parse_iso("2026-06-01T13:00:00Z")
    assert len(sched.run_due()) == 1
    clock.now -= 1800  # the system clock jumps back half an hour
    sched.pause_task(task.id)
    assert sched.resume_task(task.id).next_run == parse_iso("2026-06-01T13:00:00Z")
    clock.now += 1800
    assert sched.run_due() == []  # that occurrence already ran
    assert len(runner.calls) == 1
    assert store.get_task(task.id).next_run == parse_iso("2026-06-02T13:00:00Z")


def test_crashed_runs_are_recovered_per_policy(store):
    clock, runner = Clock(), Recorder()
    sched = make(store, runner, clock, lease_seconds=30)
    retry = sched.add("retry me", every=60)
    give_up = sched.add("fail me", every=60, on_crash="fail")
    clock.now = T0 + 60
    # Another host's daemon claimed both, then vanished: only its lease can tell.
    claims = store.claim_due(now=clock.now, owner="elsewhere:123:abcd", lease_seconds=30,
                             limit=10, default_grace=3600)
    assert len(claims) == 2
    assert store.recover(now=clock.now + 29) == []  # lease still valid
    clock.now += 31
    runs = sched.run_due()
    assert [(r.task_id, r.attempt, r.trigger, r.status) for r in runs] == [
        (retry.id, 2, "recovery", "succeeded")]
    crashed = {r.task_id: r for r in store.list_runs(status="failed")}
    assert set(crashed) == {retry.id, give_up.id}
    assert all(r.error_type == "crashed" and "elsewhere:123:abcd" in r.error for r in crashed.values())


def test_dead_process_on_this_host_is_detected_without_waiting_for_the_lease(store):
    import socket

    from jarvis.scheduler.store import _pid_scope

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    clock = Clock()
    sched = make(store, clock=clock)
    task = sched.add("x", every=60)
    clock.now = T0 + 60
    boot, pidns = _pid_scope()
    store.claim_due(now=clock.now, owner=f"{socket.gethostname()}:{proc.pid}:dead:{boot}:{pidns}",
                    lease_seconds=3600, limit=1, default_grace=3600)
    recovered = store.recover(now=clock.now)
    assert [(r.task_id, r.error_type) for r in recovered] == [(task.id, "crashed")]


def test_run_now_and_unknown_ids(store):
    sched = make(store)
    task = sched.add("manual", every=3600)
    run = sched.run_now(task.id)
    assert (run.status, run.trigger, run.answer) == ("succeeded", "manual", "ran manual")
    assert store.get_task(task.id).next_run == T0 + 3600  # the schedule is unchanged
    with pytest.raises(TaskNotFoundError):
        sched.run_now("missing")
    with pytest.raises(TaskNotFoundError):
        sched.list_runs("missing")


def test_background_thread_start_stop(store):
    done = threading.Event()

    def runner(task, occurrence):
        done.set()
        return "ok"

    sched = TaskScheduler(store=store, runner=runner, poll_seconds=0.05)
    sched.start()
    try:
        sched.add("soon", every=1)
        assert done.wait(5)
    finally:
        sched.stop(5)
    assert not sched.running


def test_paused_and_cancelled_tasks_do_not_run_and_drop_queued_retries(store):
    clock, runner = Clock(), Recorder(fail_attempts=1)
    sched = make(store, runner, clock)
    paused = sched.add("paused", every=60)
    flaky = sched.add("flaky", every=3600, max_retries=3, retry_backoff_seconds=10)
    sched.pause_task(paused.id)
    clock.now = T0 + 3600
    assert [r.task_id for r in sched.run_due()] == [flaky.id]  # failed, a retry is queued
    assert store.list_runs(flaky.id, status="pending")
    sched.cancel_task(flaky.id)
    clock.now += 100
    assert sched.run_due() == []
    assert [r.status for r in store.list_runs(flaky.id)] == ["skipped", "failed"]
    assert "task cancelled" in store.list_runs(flaky.id)[0].error
    assert runner.calls == [(flaky.id, T0 + 3600, 1)]


def test_a_once_task_paused_mid_run_does_not_run_again_when_resumed(store):
    # Its one occurrence already ran: resuming must not turn it into a second run "now".
    clock = Clock()
    calls: list[float] = []

    def pause_while_running(task: Task, occurrence: Run) -> str:
        calls.append(occurrence.scheduled_for)
        if task.prompt == "remind me":
            sched.pause_task(task.id)
        return "done"

    sched = make(store, runner=pause_while_running, clock=clock)
    task = sched.add("remind me", at=iso(T0 + 10))
    clock.now = T0 + 10
    assert [r.status for r in sched.run_due()] == ["succeeded"]
    assert store.get_task(task.id).status == "paused"
    clock.now = T0 + 100
    sched.resume_task(task.id)
    assert sched.run_due() == []
    assert calls == [T0 + 10]
    assert store.get_task(task.id).status == "completed"

    # A one-off paused before its time, resumed after it, still runs once, right away.
    later = sched.add("call Bob", at=iso(T0 + 200))
    sched.pause_task(later.id)
    clock.now = T0 + 300
    assert sched.resume_task(later.id).next_run == T0 + 300
    assert [r.status for r in sched.run_due()] == ["succeeded"]
    assert calls == [T0 + 10, T0 + 300]
    assert store.get_task(later.id).status == "completed"


@pytest.mark.parametrize("cron, tz, start, end, expected", [
    # Fall back in New York: both passes of 01:00-01:59 fire, 10 runs from 00:50 to 03:05.
    ("*/20 * * * *", "America/New_York", "2026-11-01T00:50:00-04:00", "2026-11-01T03:05:00-05:00",
     ["05:00", "05:20", "05:40", "06:00", "06:20", "06:40", "07:00", "07:20", "07:40", "08:00"]),
    # Spring forward in Paris: 02:00 and 02:30 do not exist; both fire, shifted by the gap.
    ("0,30 2 * * *", "Europe/Paris", "2026-03-29T00:00:00+01:00", "2026-03-29T04:00:00+02:00",
     ["01:00", "01:30"]),
])
def test_the_claim_loop_runs_every_occurrence_across_dst(store, cron, tz, start, end, expected):
    clock, runner = Clock(parse_iso(start)), Recorder()
    sched = make(store, runner, clock)
    task = sched.add("tick", cron=cron, tz=tz)
    while clock.now < parse_iso(end):  # a daemon waking every minute through the night
        clock.now += 60
        sched.run_due()
    runs = sorted(store.list_runs(task.id, limit=None), key=lambda r: r.scheduled_for)
    assert [(r.status, iso(r.scheduled_for)[11:16]) for r in runs] == [
        ("succeeded", hhmm) for hhmm in expected]


def test_an_owner_is_judged_by_pid_only_inside_this_pid_namespace():
    import socket

    from jarvis.scheduler.store import _pid_scope, owner_id, owner_is_dead

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid names no process now
    host, boot, pidns = socket.gethostname(), *_pid_scope()
    assert owner_is_dead(f"{host}:{gone.pid}:ab12cd34:{boot}:{pidns}")
    assert not owner_is_dead(owner_id())  # ourselves
    # The same pid in another PID namespace (a container sharing our host name), another boot,
    # or an id written before namespaces were recorded: only the lease can tell.
    assert not owner_is_dead(f"{host}:{gone.pid}:ab12cd34:{boot}:1")
    assert not owner_is_dead(f"{host}:{gone.pid}:ab12cd34:{'0' * 32}:{pidns}")
    assert not owner_is_dead(f"{host}:{gone.pid}:ab12cd34")
    # The host name is informative only: boot id and namespace say where a pid means something
    # (and a host name may change under a running daemon).
    assert owner_is_dead(f"renamed:{gone.pid}:ab12cd34:{boot}:{pidns}")


BORN_TAINTED = {"tainted": True, "private": True, "run_id": "r1"}


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
def test_a_database_of_any_earlier_version_is_upgraded_to_trust_and_workspace(tmp_path, version):
    """One sequence for every line's changes: 3 is the task's trust (issue 21), 4 the fenced
    side effects (issue 27), 5 parked runs (issue 22), 6 the task's workspace (issue 25). A
    database that main's releases upgraded (to 3, 4 or 5) upgrades too."""
    import sqlite3

    import sqlite_utils

    path = tmp_path / "old.db"
    db = sqlite_utils.Database(path)
    for migration in MIGRATIONS[:version]:  # the same functions that made such a database
        migration(db)
    db.conn.execute(f"PRAGMA user_version = {version}")
    trust = ", trust" if version >= 3 else ""
    db.conn.execute(f"INSERT INTO tasks (id, prompt, schedule_type, schedule_value, status, "
                    f"tools, approved_tools, metadata, created_at{trust}) VALUES ('old', "
                    f"'echo old', 'interval', '60', 'active', '[]', '[]', '{{}}', 1.0"
                    + (", '{\"tainted\": true, \"private\": true}')" if trust else ")"))
    db.conn.commit()
    db.conn.close()

    store = SchedulerStore(path)
    try:
        assert store.schema_version == len(MIGRATIONS) == 6
        columns = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(tasks)")}
        assert {"notify", "trust", "workspace"} <= columns
        tables = {r[0] for r in sqlite3.connect(path).execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "effects" in tables
        runs = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(runs)")}
        assert {"parked_at", "resumes"} <= runs
        old = store.get_task("old")
        assert old.prompt == "echo old" and old.workspace is None
        assert old.born_tainted is (version >= 3)
        new = Task(id="new", prompt="p", schedule_type="interval", schedule_value="3600",
                   created_at=2.0, anchor=2.0, next_run=3.0, trust=BORN_TAINTED,
                   workspace=str(tmp_path / "ws" / "config.toml"))
        store.add_task(new)
        again = store.get_task("new")
        assert (again.trust, again.workspace) == (BORN_TAINTED, new.workspace)
    finally:
        store.close()
    reopened = SchedulerStore(path)  # upgraded once: opening again changes nothing
    try:
        assert reopened.schema_version == 6 and reopened.get_task("new").workspace
    finally:
        reopened.close()
