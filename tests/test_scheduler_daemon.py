"""Real `jarvis scheduler start` daemons as subprocesses against one real SQLite file."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter

import pytest
from scheduler_support import Daemon, daemon_env, jarvis, query, read_log
from waiting import wait_for

from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    import os
    from pathlib import Path

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def db(tmp_path):
    return tmp_path / "scheduler.db"


@pytest.fixture
def env(cli_env, db, runlog):
    return daemon_env(cli_env, db, runlog)


@pytest.fixture
def api(db):
    """The Python API on the same database, as another process would use it."""
    store = SchedulerStore(db)
    yield TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    store.close()


def test_idle_daemon_says_so_then_runs_a_task_added_while_it_sleeps(env, api, db, daemons):
    d = Daemon(env, "--poll", "0.5")
    daemons.append(d)
    d.wait_for_line("nothing to run: no active tasks")
    # Idle means asleep: well under 5% of one core over a second and a half (a busy loop is ~100%).
    cpu_before, wall_before = cpu_seconds(d.pid), time.monotonic()
    wait_for(lambda: time.monotonic() - wall_before > 1.5, what="an idle spell", interval=0.25)
    assert cpu_seconds(d.pid) - cpu_before < 0.075
    task = api.add("echo hello", every=1)
    rows = wait_for(lambda: query(db, "SELECT scheduled_for, started_at, answer, run_log_id FROM runs "
                                      "WHERE task_id = ? AND status = 'succeeded'", (task.id,)),
                    timeout=10, what="the first run")
    scheduled_for, started_at, answer, run_log_id = rows[0]
    assert answer == "hello" and run_log_id.startswith("log-")
    assert scheduled_for == pytest.approx(task.next_run)
    # Noticed within the poll interval (0.5 s), with room for a loaded machine: not on some
    # longer sleep.
    assert started_at - scheduled_for < 3.0
    assert d.stop(signal.SIGTERM) == 0
    assert "stopped" in d.text() and "Traceback" not in d.text()


def test_kill_9_mid_run_then_restart_recovers_per_policy(env, api, db, runlog, daemons):
    retry = api.add("hang-first 60", every=3600, on_crash="retry")
    give_up = api.add("hang-first 60", every=3600, on_crash="fail")
    # Make both due right now.
    api.store.db.conn.execute("UPDATE tasks SET next_run = ?", (time.time() - 1,))
    api.store.db.conn.commit()
    first = Daemon(env)
    daemons.append(first)
    wait_for(lambda: len([e for e in read_log(runlog) if e["event"] == "start"]) == 2,
             what="both runs to start")
    first.kill9()
    assert sorted(r[0] for r in query(db, "SELECT status FROM runs")) == ["running", "running"]

    second = Daemon(env)
    daemons.append(second)
    wait_for(lambda: query(db, "SELECT 1 FROM runs WHERE task_id = ? AND status = 'succeeded'",
                           (retry.id,)), what="the retried run")
    rows = query(db, "SELECT task_id, attempt, status, trigger, error_type, answer FROM runs "
                     "ORDER BY id")
    assert (retry.id, 1, "failed", "schedule", "crashed", None) in rows
    assert (give_up.id, 1, "failed", "schedule", "crashed", None) in rows
    assert (retry.id, 2, "succeeded", "recovery", None, "recovered") in rows
    assert not [r for r in rows if r[0] == give_up.id and r[1] == 2]  # on_crash=fail: no re-run
    second.wait_for_line("was interrupted by a scheduler that died")
    assert second.stop(signal.SIGINT) == 0


def test_two_daemons_never_run_one_occurrence_twice(env, api, db, runlog, daemons):
    a = Daemon(env, "--poll", "0.05", "--max-workers", "4")
    b = Daemon(env, "--poll", "0.05", "--max-workers", "4")
    daemons += [a, b]
    for d in (a, b):
        d.wait_for_line("nothing to run")
    tasks = [api.add(f"echo task {i}", every=1) for i in range(8)]
    wait_for(lambda: len(read_log(runlog)) >= 2 * 40, timeout=20, what="40 runs")
    assert a.stop() == 0 and b.stop(signal.SIGINT) == 0

    ends = [e for e in read_log(runlog) if e["event"] == "end"]
    per_occurrence = Counter((e["task_id"], e["scheduled_for"]) for e in ends)
    assert per_occurrence and max(per_occurrence.values()) == 1, per_occurrence.most_common(3)
    assert {e["pid"] for e in ends} == {a.pid, b.pid}  # both daemons really competed
    assert {e["task_id"] for e in ends} == {t.id for t in tasks}
    recorded = query(db, "SELECT task_id, scheduled_for, count(*) FROM runs WHERE trigger = 'schedule' "
                         "GROUP BY task_id, scheduled_for HAVING count(*) > 1")
    assert recorded == []


def test_once_runs_what_is_due_and_says_when_nothing_is(env, api, db):
    empty = jarvis(env, "scheduler", "start", "--once", "--runner", "scheduler_support:ScriptRunner")
    assert empty.returncode == 0
    assert "nothing to run: no active scheduled tasks" in empty.stdout

    later = api.add("echo later", every=3600)
    not_due = jarvis(env, "scheduler", "start", "--once", "--runner", "scheduler_support:ScriptRunner")
    assert "nothing to run: 1 active task(s), none due" in not_due.stdout

    ok = api.add("echo now", every=3600)
    bad = api.add("fail", every=3600)
    api.store.db.conn.execute("UPDATE tasks SET next_run = ? WHERE id IN (?, ?)",
                              (time.time() - 1, ok.id, bad.id))
    api.store.db.conn.commit()
    ran = jarvis(env, "scheduler", "start", "--once", "--runner", "scheduler_support:ScriptRunner")
    assert ran.returncode == 1, ran.stderr  # a run failed: cron and CI see it
    assert "ran 2 task run(s), 1 failed" in ran.stderr
    assert f"task {ok.id}: run #" in ran.stdout and "succeeded" in ran.stdout
    assert f"task {bad.id}: run #" in ran.stdout and "boom: the task failed on purpose" in ran.stdout
    statuses = dict(query(db, "SELECT task_id, status FROM runs"))
    assert statuses == {ok.id: "succeeded", bad.id: "failed"}
    assert api.get_task(later.id).last_run is None


def test_sigterm_gives_running_tasks_the_shutdown_timeout_then_requeues_them(env, api, db, runlog,
                                                                             daemons, tmp_path):
    from pathlib import Path

    Path("config.toml").write_text("[scheduler]\nshutdown_timeout = 0.5\n")  # cwd of the daemon
    task = api.add("hang-first 60", every=3600)
    api.store.db.conn.execute("UPDATE tasks SET next_run = ?", (time.time() - 1,))
    api.store.db.conn.commit()
    d = Daemon(env)
    daemons.append(d)
    wait_for(lambda: read_log(runlog), what="the run to start")
    started = time.monotonic()
    assert d.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 10
    rows = query(db, "SELECT attempt, status, error_type, trigger FROM runs WHERE task_id = ? "
                     "ORDER BY attempt", (task.id,))
    assert rows == [(1, "failed", "interrupted", "schedule"), (2, "pending", None, "recovery")]
    assert "interrupted by shutdown" in d.text()


def test_grace_0_runs_on_time_and_skips_only_really_late_occurrences(env, api, db, daemons):
    # Every claim is a few ms after the due time: with `--grace 0` taken literally, the task
    # never ran at all (each occurrence was recorded as missed).
    added = jarvis(env, "schedule", "add", "echo on time", "--every", "1", "--grace", "0", "--json")
    task_id = json.loads(added.stdout)["task_id"]
    d = Daemon(env, "--poll", "0.2")
    daemons.append(d)
    wait_for(lambda: query(db, "SELECT count(*) FROM runs WHERE task_id = ? AND status = "
                               "'succeeded'", (task_id,))[0][0] >= 3, timeout=15,
             what="three on-time runs")
    assert d.stop() == 0
    assert jarvis(env, "schedule", "pause", task_id).returncode == 0  # only `late` may be due
    # 30 s late is beyond the small on-time tolerance: skipped, as grace 0 promises.
    late = api.add("echo late", every=3600, grace_seconds=0)
    api.store.db.conn.execute("UPDATE tasks SET next_run = ? WHERE id = ?", (time.time() - 30, late.id))
    api.store.db.conn.commit()
    once = jarvis(env, "scheduler", "start", "--once", "--runner", "scheduler_support:ScriptRunner")
    assert once.returncode == 0 and "nothing to run" in once.stdout, once.stdout
    assert query(db, "SELECT status, error_type FROM runs WHERE task_id = ?", (late.id,)) == [
        ("skipped", "missed")]


def test_a_timed_out_attempt_holds_its_worker_until_its_call_really_ends(env, api, db, runlog,
                                                                      daemons):
    # timeout 0.5 s, 2 retries, a 2 s call: each timed-out call went on in its abandoned thread
    # while the retry started, so all three attempts (and other tasks) ran at once, beyond
    # max_workers.
    slow = api.add("sleep 2", every=3600, timeout_seconds=0.5, max_retries=2,
                   retry_backoff_seconds=0)
    other = api.add("echo other", every=3600)
    make_due = "UPDATE tasks SET next_run = ? WHERE id = ?"
    api.store.db.conn.execute(make_due, (time.time() - 1, slow.id))
    api.store.db.conn.execute(make_due, (time.time() - 0.5, other.id))
    api.store.db.conn.commit()
    d = Daemon(env, "--poll", "0.1", "--max-workers", "1")
    daemons.append(d)
    wait_for(lambda: query(db, "SELECT count(*) FROM runs WHERE task_id = ? AND attempt = 3 AND "
                               "status = 'failed'", (slow.id,))[0][0], timeout=30,
             what="the third attempt to time out")
    wait_for(lambda: query(db, "SELECT 1 FROM runs WHERE task_id = ? AND status = 'succeeded'",
                           (other.id,)), timeout=10, what="the other task")
    assert d.stop() == 0

    events = read_log(runlog)
    calls = {}  # run id -> [start, end] of the runner's call, as it really happened
    for e in events:
        calls.setdefault(e["run_id"], {})[e["event"]] = e["time"]
    spans = sorted((c["start"], c.get("end", float("inf"))) for c in calls.values())
    for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False):
        assert next_start >= end, spans  # one worker: never two calls at once
    assert len(spans) == 4 and all(len(c) == 2 for c in calls.values()), calls
    rows = query(db, "SELECT attempt, status, error_type, error FROM runs WHERE task_id = ? "
                     "ORDER BY attempt", (slow.id,))
    assert [r[:3] for r in rows] == [(1, "failed", "timeout"), (2, "failed", "timeout"),
                                     (3, "failed", "timeout")]
    assert "timed out after 0.5 s" in rows[0][3]
    assert "timed out" in d.text() and "still running" in d.text()


def test_schedule_run_never_overlaps_a_running_run_of_the_same_task(env, api, db, runlog, daemons,
                                                                     tmp_path):
    import subprocess
    import sys

    gates = tmp_path / "gates"  # each run waits until the test opens its gate: no races
    gates.mkdir()
    task = api.add(f"gate {gates}", every=3600)
    d = Daemon(env, "--poll", "0.1")
    daemons.append(d)

    def make_due() -> None:
        api.store.db.conn.execute("UPDATE tasks SET next_run = ? WHERE id = ?",
                                  (time.time() - 0.5, task.id))
        api.store.db.conn.commit()

    def started() -> list[dict]:
        return [e for e in read_log(runlog) if e["event"] == "start"]

    make_due()
    (scheduled,) = wait_for(started, what="the scheduled run to start")
    # While the daemon runs it, `schedule run` says so and runs nothing (it ran beside it).
    busy = jarvis(env, "schedule", "run", task.id, "--runner", "scheduler_support:ScriptRunner")
    assert busy.returncode == 3, (busy.stdout, busy.stderr)
    assert "is running now" in busy.stderr and "--wait" in busy.stderr
    assert len(busy.stderr.strip().splitlines()) == 1 and busy.stdout == ""
    assert query(db, "SELECT count(*) FROM runs WHERE trigger = 'manual'") == [(0,)]
    # --wait waits for it, and runs as soon as it has ended ...
    err_path = tmp_path / "wait.err"
    with open(err_path, "w") as err_file:
        waited = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "schedule", "run", task.id,
                                   "--wait", "--runner", "scheduler_support:ScriptRunner"],
                                  env=env, stdout=subprocess.PIPE, stderr=err_file, text=True)
    try:
        wait_for(lambda: "waiting for run #" in err_path.read_text(), timeout=20,
                 what="the manual run to wait")
        assert len(started()) == 1
        (gates / str(scheduled["run_id"])).touch()
        manual = wait_for(lambda: started()[1:], timeout=15, what="the manual run to start")[0]
        # ... and an occurrence due meanwhile waits for the manual run in turn.
        make_due()
        time.sleep(1.0)  # ten daemon polls: time for a wrong start to happen
        assert len(started()) == 2
        (gates / str(manual["run_id"])).touch()
        out, _ = waited.communicate(timeout=30)
    finally:
        waited.kill()
    assert waited.returncode == 0, err_path.read_text()
    assert out.strip() == "opened"
    third = wait_for(lambda: started()[2:], timeout=15, what="the occurrence due meanwhile")[0]
    (gates / str(third["run_id"])).touch()
    wait_for(lambda: len([e for e in read_log(runlog) if e["event"] == "end"]) == 3, timeout=15,
             what="the third run to end")
    assert d.stop() == 0
    calls = {}
    for e in read_log(runlog):
        calls.setdefault(e["run_id"], {})[e["event"]] = e["time"]
    spans = sorted((c["start"], c.get("end", float("inf"))) for c in calls.values())
    for (_, end), (next_start, _) in zip(spans, spans[1:], strict=False):
        assert next_start >= end, spans
    triggers = [r[0] for r in query(db, "SELECT trigger FROM runs WHERE status = 'succeeded' "
                                        "ORDER BY started_at")]
    assert triggers == ["schedule", "manual", "schedule"], triggers


def test_the_daemon_applies_keep_runs_by_age_and_count(env, api, db, daemons):
    from pathlib import Path

    now, day = time.time(), 86400.0
    busy = api.add("echo busy", every=3600)
    old = api.add("echo old", every=3600)

    def insert(task_id: str, age_days: float, *, status: str = "succeeded",
               trigger: str = "schedule", attempt: int = 1) -> int:
        at = now - age_days * day
        cursor = api.store.db.conn.execute(
            "INSERT INTO runs (task_id, scheduled_for, attempt, status, trigger, started_at, "
            "finished_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (task_id, at, attempt, status, trigger, at, None if status == "pending" else at))
        return cursor.lastrowid

    # Oldest first, as a daemon records them.
    lone = [insert(old.id, 42 - i) for i in range(3)]  # lone[-1] is that task's newest: kept
    ancient = [insert(busy.id, 40.1 - i / 100) for i in range(10)]
    manual = insert(busy.id, 35, trigger="manual")  # the task's only manual run: kept
    pending = insert(busy.id, 33, status="pending", attempt=2)  # not finished: kept
    recent = [insert(busy.id, 1.1 - i / 100) for i in range(10)]
    api.store.db.conn.commit()
    Path("config.toml").write_text("[scheduler]\nkeep_runs = { days = 30, count = 5 }\n")

    d = Daemon(env, "--poll", "0.2")
    daemons.append(d)
    line = d.wait_for_line("old run(s)")
    assert "deleted 17 old run(s) (keep_runs: 30 days and 5 runs per task)" in line
    assert d.stop() == 0
    left = {r[0] for r in query(db, "SELECT id FROM runs")}
    assert left == {*recent[5:], manual, pending, lone[-1]}, (left, ancient)
    # A count alone, and days alone, written the short ways.
    Path("config.toml").write_text("[scheduler]\nkeep_runs = 2\n")
    once = jarvis(env, "scheduler", "start", "--once", "--runner", "scheduler_support:ScriptRunner")
    assert once.returncode == 0 and "deleted 3 old run(s)" in once.stderr, once.stderr
    Path("config.toml").write_text('[scheduler]\nkeep_runs = "thirty days"\n')
    bad = jarvis(env, "scheduler", "start", "--once")
    assert bad.returncode == 2 and "keep_runs" in bad.stderr and "Traceback" not in bad.stderr
