"""Daemons with the same host name in different PID namespaces (containers sharing a hostname,
Docker `--network host`, Kubernetes `hostNetwork`) on one real SQLite file.

A pid means nothing across PID namespaces: a daemon must never judge another namespace's
daemon dead (or alive) from its pid. It relies on the lease the owner renews instead. The
second daemon really runs in a new PID namespace, made with `unshare` (util-linux).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest
from scheduler_support import Daemon, daemon_env, pid_namespace, query, read_log
from waiting import wait_for

from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore

LEASE = 4.0  # short, so that recovery by lease is quick; the heartbeat renews it every 1 s
# A new PID namespace (and a user namespace, so it also works without root), its own /proc,
# and the daemon killed with SIGKILL if unshare itself dies.
UNSHARE = ("unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc",
           "--kill-child")


@pytest.fixture
def db(tmp_path):
    return tmp_path / "scheduler.db"


@pytest.fixture
def env(cli_env, db, runlog):
    # The daemons' working folder is the test's: its config.toml sets the short lease.
    Path("config.toml").write_text(f"[scheduler]\nlease_seconds = {LEASE}\n")
    return daemon_env(cli_env, db, runlog)


@pytest.fixture
def api(db):
    store = SchedulerStore(db)
    yield TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    store.close()


def contained(env, *args: str) -> Daemon:
    """A daemon inside a new PID namespace, sharing the host name and the database file."""
    return Daemon(env, *args, prefix=UNSHARE)


def daemon_pid(d: Daemon) -> int:
    """The host pid of the daemon that `unshare` forked (its pid 1 inside the namespace)."""
    def child() -> int | None:
        path = Path(f"/proc/{d.pid}/task/{d.pid}/children")
        kids = path.read_text().split() if path.exists() else []
        return int(kids[0]) if kids else None

    return wait_for(child, 10, "unshare to fork the daemon")


def stop_contained(d: Daemon) -> int:
    """SIGTERM to the daemon itself (unshare ignores it while it waits for its child)."""
    import subprocess

    # As pid 1 of its namespace it ignores SIGTERM until its handler is set: wait for that.
    d.wait_for_line(" started on ")
    os.kill(daemon_pid(d), signal.SIGTERM)
    try:
        return d.proc.wait(15)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the contained daemon did not stop:\n{d.text()[-3000:]}") from None
    finally:
        d.close()


def starts(runlog: Path) -> list[dict]:
    return [e for e in read_log(runlog) if e["event"] == "start"]


def make_due(api: TaskScheduler, *task_ids: str) -> None:
    marks = ",".join("?" * len(task_ids))
    api.store.db.conn.execute(f"UPDATE tasks SET next_run = ? WHERE id IN ({marks})",
                              (time.time() - 0.5, *task_ids))
    api.store.db.conn.commit()


def test_the_namespace_tool_really_isolates_pids(tmp_path):
    # The premise of this file: the daemon inside sees other pids than the host does.
    import subprocess
    import sys

    out = subprocess.run([*UNSHARE, sys.executable, "-c",
                          "import os; print(os.getpid(), os.stat('/proc/self/ns/pid').st_ino)"],
                         capture_output=True, text=True, timeout=30, check=True).stdout.split()
    assert int(out[0]) == 1 and int(out[1]) != pid_namespace()


def test_live_daemons_in_two_pid_namespaces_never_double_a_run(env, api, db, runlog, daemons):
    # Before: the contained daemon found the host daemon's pid missing from its namespace,
    # declared it dead, and ran its occurrences again while they were still running.
    host = Daemon(env, "--poll", "0.1", "--max-workers", "3")
    inside = contained(env, "--poll", "0.1", "--max-workers", "3")
    daemons += [host, inside]
    for d in (host, inside):
        d.wait_for_line("nothing to run")
    tasks = [api.add("sleep 1.5", every=1) for _ in range(4)]
    # Each daemon checks for dead owners every LEASE / 2 s: give both several checks while
    # the other holds runs.
    wait_for(lambda: len([e for e in read_log(runlog) if e["event"] == "end"]) >= 16,
             timeout=60, what="16 finished runs")
    assert host.stop() == 0 and stop_contained(inside) == 0

    events = read_log(runlog)
    began = Counter((e["task_id"], e["scheduled_for"]) for e in events if e["event"] == "start")
    assert max(began.values()) == 1, began.most_common(3)  # no occurrence ran twice
    assert {e["attempt"] for e in events} == {1}  # no recovery attempt: nobody "crashed"
    assert query(db, "SELECT count(*) FROM runs WHERE error_type = 'crashed'") == [(0,)]
    # Both daemons really worked on the shared tasks, each from its own namespace.
    namespaces = Counter(e["pidns"] for e in events if e["event"] == "end")
    assert set(namespaces) > {pid_namespace()} and len(namespaces) == 2, namespaces
    assert {e["task_id"] for e in events} == {t.id for t in tasks}


@pytest.mark.slow
def test_a_daemon_killed_in_either_namespace_is_recovered_once_by_its_lease(env, api, db, runlog,
                                                                         daemons):
    # Contained daemon dies: the host daemon takes its run over when the lease expires (a pid
    # of another namespace is never looked up on this one), and runs it once more.
    inside = contained(env, "--poll", "0.1")
    daemons.append(inside)
    inside.wait_for_line("nothing to run")
    first = api.add("hang-first 60", every=3600)
    make_due(api, first.id)
    wait_for(lambda: starts(runlog), what="the contained daemon to start the run")
    host = Daemon(env, "--poll", "0.1")
    daemons.append(host)
    host.wait_for_line(" started on ")
    time.sleep(LEASE * 1.5)  # a live owner's run is left alone, however long it takes
    assert query(db, "SELECT status FROM runs WHERE task_id = ?", (first.id,)) == [("running",)]
    os.kill(daemon_pid(inside), signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: query(db, "SELECT 1 FROM runs WHERE task_id = ? AND attempt = 2 AND status "
                               "= 'succeeded'", (first.id,)), timeout=LEASE * 4, what="the recovery")
    assert time.monotonic() - killed < LEASE * 3  # lease expiry plus one recovery check
    assert "its lease expired" in query(db, "SELECT error FROM runs WHERE task_id = ? AND "
                                            "attempt = 1", (first.id,))[0][0]

    # Host daemon dies: a daemon in a new namespace takes its run over the same way (before,
    # it recovered the run at once, because the host pid did not exist in its namespace).
    second = api.add("hang-first 60", every=3600)
    make_due(api, second.id)
    wait_for(lambda: [e for e in starts(runlog) if e["task_id"] == second.id],
             what="the host daemon to start the run")
    other = contained(env, "--poll", "0.1")
    daemons.append(other)
    other.wait_for_line(" started on ")
    time.sleep(LEASE * 1.5)
    assert query(db, "SELECT status FROM runs WHERE task_id = ?", (second.id,)) == [("running",)]
    host.kill9()
    killed = time.monotonic()
    wait_for(lambda: query(db, "SELECT 1 FROM runs WHERE task_id = ? AND attempt = 2 AND status "
                               "= 'succeeded'", (second.id,)), timeout=LEASE * 4, what="the recovery")
    assert time.monotonic() - killed < LEASE * 3

    runs = Counter((e["task_id"], e["attempt"]) for e in starts(runlog))
    assert runs == {(first.id, 1): 1, (first.id, 2): 1, (second.id, 1): 1, (second.id, 2): 1}


@pytest.mark.slow
def test_kill_9_chaos_across_pid_namespaces_loses_and_doubles_nothing(env, api, db, runlog,
                                                                    daemons):
    # Three daemons (two on the host, one in its own PID namespace) share 150 one-off tasks due
    # over 20 s; one of them, chosen at random, is killed with SIGKILL about every 1.5 s and
    # replaced. Then everything drains. Every occurrence must end succeeded exactly once, or
    # failed by its on_crash policy (crashed again on its one recovery attempt); no attempt
    # may start twice.
    import random
    from datetime import UTC, datetime

    rng = random.Random(13)
    start = time.time() + 2
    tasks = [api.add("sleep 0.4", at=datetime.fromtimestamp(start + i * 0.13, UTC).isoformat())
             for i in range(150)]
    kinds = ["host", "inside", "host"]

    def launch(kind: str) -> Daemon:
        d = (contained if kind == "inside" else Daemon)(env, "--poll", "0.1", "--max-workers", "3")
        daemons.append(d)
        return d

    slots = [launch(kind) for kind in kinds]
    kills = 0
    while time.time() < start + 20:
        time.sleep(rng.uniform(0.8, 2.2))  # chaos is paced by the clock, on purpose
        victim = rng.randrange(len(slots))
        d = slots[victim]
        if kinds[victim] == "inside":
            os.kill(daemon_pid(d), signal.SIGKILL)
            d.close()
        else:
            d.kill9()
        kills += 1
        slots[victim] = launch(kinds[victim])

    def drained() -> bool:
        busy = query(db, "SELECT count(*) FROM runs WHERE status IN ('running', 'pending')")[0][0]
        active = query(db, "SELECT count(*) FROM tasks WHERE status = 'active'")[0][0]
        return busy == 0 and active == 0

    wait_for(drained, timeout=60, what="every occurrence to be done", interval=0.2)
    for d, kind in zip(slots, kinds, strict=True):
        assert (stop_contained(d) if kind == "inside" else d.stop()) == 0, d.text()[-3000:]

    events = read_log(runlog)
    began = Counter((e["task_id"], e["attempt"]) for e in events if e["event"] == "start")
    assert max(began.values()) == 1, began.most_common(3)  # no attempt ran twice
    ends = {e["run_id"] for e in events if e["event"] == "end"}
    # A re-run is only for a daemon that really died: its call never ends after the next
    # attempt began. (A live daemon's run taken for dead would: the true double of defect 1.)
    spans: dict[tuple, dict[int, dict[str, float]]] = {}
    for e in events:
        spans.setdefault((e["task_id"], e["scheduled_for"]), {}).setdefault(
            e["attempt"], {})[e["event"]] = e["time"]
    overlapping = [(occurrence, attempts) for occurrence, attempts in spans.items()
                   if any("end" in attempts[a] and a + 1 in attempts
                          and attempts[a]["end"] > attempts[a + 1]["start"] for a in attempts)]
    assert overlapping == [], overlapping[:3]
    rows = query(db, "SELECT id, task_id, attempt, status, error_type FROM runs")
    by_task: dict[str, list[tuple]] = {}
    for row in rows:
        by_task.setdefault(row[1], []).append(row)
    lost, doubled, crashed = [], [], 0
    for task in tasks:
        runs = sorted(by_task.get(task.id, []), key=lambda r: r[2])
        succeeded = [r for r in runs if r[3] == "succeeded"]
        crashed += sum(r[4] in ("crashed", "interrupted") for r in runs)
        if len(succeeded) > 1:
            doubled.append(runs)
        elif not succeeded and not (len(runs) == 2 and all(r[4] == "crashed" for r in runs)):
            lost.append(runs)  # neither done nor given up by policy
        assert all(r[0] in ends for r in succeeded), runs  # recorded = really ran to the end
    assert (lost, doubled) == ([], []), (lost, doubled)
    assert kills >= 8 and crashed >= 1, (kills, crashed)  # the chaos really hit running runs
    print(f"{len(tasks)} occurrences, {kills} kill -9, {crashed} runs crashed and recovered")
