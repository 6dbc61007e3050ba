"""Deliveries of runs recorded while the scheduler stops: at the end of a `--once` pass and on
SIGTERM. Each gets its delivery within [scheduler] shutdown_delivery_seconds, or a delivery
record saying it was not sent and why (never silent). Real daemons as subprocesses, a real
SQLite file and a real HTTP receiver on loopback."""

from __future__ import annotations

import json
import signal
import threading
import time

import pytest
from net_support import Reply, serving
from scheduler_support import Daemon, daemon_env, jarvis, read_log
from waiting import wait_for

from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import SchedulerStore

RUNNER = ("--runner", "scheduler_support:ScriptRunner")


@pytest.fixture
def setup(cli_env, tmp_path):
    db, log = tmp_path / "scheduler.db", tmp_path / "runner.log"
    store = SchedulerStore(db)
    api = TaskScheduler(store=store, runner=lambda task, occurrence: "unused")

    def configure(hostport: str, retries: int = 0, backoff: float = 1.0,
                  **scheduler: float) -> dict[str, str]:
        config = tmp_path / "config.toml"
        lines = [f"{k} = {v}" for k, v in scheduler.items()]
        config.write_text("[scheduler]\n" + "\n".join(lines) + "\n"
                          f'[channels.hook]\nurl = "json://{hostport}/hook"\n'
                          f"retries = {retries}\nretry_backoff = {backoff}\n")
        return dict(daemon_env(cli_env, db, log), JARVIS_CONFIG=str(config))

    def due(prompt: str, **options) -> str:
        task = api.add(prompt, every=3600, notify="hook", **options)
        store.db.conn.execute("UPDATE tasks SET next_run = ? WHERE id = ?",
                              (time.time() - 1, task.id))
        store.db.conn.commit()
        return task.id

    def runs(env: dict[str, str], task_id: str) -> list[dict]:
        listed = jarvis(env, "schedule", "runs", task_id, "--json")
        assert listed.returncode == 0, listed.stderr
        return sorted(json.loads(listed.stdout), key=lambda r: r["run_id"])

    yield configure, due, runs, log
    store.close()


def test_a_run_timed_out_at_the_end_of_once_is_still_delivered(setup):
    configure, due, runs, _ = setup
    with serving({"/hook": lambda seen: Reply(200, "ok")}) as server:
        env = configure(server.hostport, shutdown_timeout=0.2)
        task_id = due("sleep 30", timeout_seconds=0.5)
        started = time.monotonic()
        once = jarvis(env, "scheduler", "start", "--once", *RUNNER)
        took = time.monotonic() - started
        assert once.returncode == 1, once.stderr  # the run failed (timed out)
        (record,) = runs(env, task_id)[:1]
    # Recorded as timed out by the pass, not by its (still running) call: before, its
    # delivery was never sent and nothing said so.
    assert record["status"] == "failed" and record["error_type"] == "timeout"
    assert record["delivery"]["status"] == "delivered", record
    (message,) = [json.loads(s.body) for s in server.seen]
    assert message["title"] == f"jarvis: task {task_id} failed"
    assert message["message"].startswith("The run failed (timeout): timed out after 0.5 s")
    assert "delivered" in once.stdout and took < 20


def test_a_delivery_that_cannot_finish_in_time_is_recorded_as_not_sent(setup):
    configure, due, runs, _ = setup
    # A receiver that is down for now: the channel's retries would wait 30 s, then 60 s...
    # The pass has 5 s for deliveries: the first attempt fits even on a loaded machine (with
    # 1 s it sometimes never reached the receiver), the retries do not.
    with serving({"/hook": lambda seen: Reply(503, "busy")}) as server:
        env = configure(server.hostport, retries=3, backoff=30, shutdown_timeout=0.2,
                        shutdown_delivery_seconds=5)
        task_id = due("sleep 30", timeout_seconds=0.5)
        started = time.monotonic()
        once = jarvis(env, "scheduler", "start", "--once", *RUNNER)
        took = time.monotonic() - started
        assert once.returncode == 1, once.stderr  # the run failed (timed out)
        (record,) = runs(env, task_id)[:1]
    assert len(server.seen) == 1  # it was tried...
    delivery = record["delivery"]  # ...and the record says it did not get through, and why
    assert delivery["status"] == "not_sent" and delivery["channel"] == "hook", delivery
    assert delivery["error"] == ("not delivered: the --once pass ended before the delivery was "
                                 "done (it had 5 s, [scheduler] shutdown_delivery_seconds)")
    assert f"run {record['run_id']} was NOT delivered to channel hook" in once.stderr
    assert "delivery to hook: not_sent" in once.stdout
    assert took < 20  # bounded: the channel's retries did not hold the pass


def test_sigterm_during_a_delivery_waits_for_it_within_the_delivery_time(setup):
    configure, due, runs, log = setup
    arrived, release = threading.Event(), threading.Event()

    def slow(seen):
        arrived.set()
        release.wait(60)
        return Reply(200, "ok")

    with serving({"/hook": slow}) as server:
        env = configure(server.hostport, shutdown_timeout=0.2, shutdown_delivery_seconds=30)
        task_id = due("echo the report is ready")
        daemon = Daemon(env)
        try:
            assert arrived.wait(20), daemon.text()
            daemon.proc.send_signal(signal.SIGTERM)
            # The run was recorded before the signal; only its delivery is under way, and the
            # daemon waits for it (before, it exited at shutdown_timeout, the delivery unrecorded).
            daemon.wait_for_line("waiting up to 30 s for 1 delivery(ies)")
            assert daemon.proc.poll() is None
            release.set()
            assert daemon.proc.wait(20) == 0
        finally:
            daemon.close()
        (record,) = runs(env, task_id)
    assert record["status"] == "succeeded" and record["answer"] == "the report is ready"
    assert record["delivery"]["status"] == "delivered", record
    assert read_log(log)[-1]["event"] == "end"


def test_sigterm_records_a_stuck_delivery_as_not_sent_and_delivers_interrupted_runs(setup):
    configure, due, runs, log = setup
    arrived = threading.Event()
    titles: list[str] = []

    def receiver(seen):
        title = json.loads(seen.body)["title"]
        titles.append(title)
        if title.endswith(" done"):  # the finished run's delivery waits 30 s for its retry
            arrived.set()
            return Reply(503, "busy")
        return Reply(200, "ok")

    with serving({"/hook": receiver}) as server:
        # 5 s for deliveries at shutdown: the interrupted run's fits even on a loaded
        # machine, the finished run's retry (30 s away) does not.
        env = configure(server.hostport, retries=2, backoff=30, shutdown_timeout=0.3,
                        shutdown_delivery_seconds=5)
        hung = due("hang-first 60")
        done = due("echo finished")
        daemon = Daemon(env)
        try:
            assert arrived.wait(20), daemon.text()
            wait_for(lambda: any(e["task_id"] == hung for e in read_log(log)),
                     what="the hanging run to start")
            daemon.proc.send_signal(signal.SIGTERM)
            assert daemon.proc.wait(20) == 0
        finally:
            daemon.close()
        finished, interrupted = runs(env, done)[0], runs(env, hung)[0]
    assert finished["status"] == "succeeded" and finished["answer"] == "finished"
    assert finished["delivery"]["status"] == "not_sent", finished
    assert finished["delivery"]["error"].startswith("not delivered: the scheduler stopped "
                                                    "before the delivery was done")
    # The run interrupted by the shutdown is recorded by the shutdown, and delivered by it.
    assert interrupted["error_type"] == "interrupted"
    assert interrupted["delivery"]["status"] == "delivered", interrupted
    assert f"jarvis: task {hung} failed" in titles
    assert f"run {finished['run_id']} was NOT delivered to channel hook" in daemon.text()
