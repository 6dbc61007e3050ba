"""Messages on the broker that jarvis would not send, and the same run delivered twice at once:
a real `jarvis worker` (Redis broker, PostgreSQL ledger) refuses each forged message with one
log line, runs nothing for it, sends nothing on, and still runs the real run exactly once."""

from __future__ import annotations

import pickle
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from celery_support import pg_rows, scaleout_env, worker
from scheduler_support import read_log
from waiting import wait_for

from jarvis.scheduler.celery_app import TASK_NAME, make_app, message_problem, task_id_for
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store_postgres import PostgresStore


@pytest.fixture
def api(pg_url):
    store = PostgresStore(pg_url)
    yield TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    store.close()


def _sig(task: str) -> dict:
    return {"task": task, "args": [], "kwargs": {}, "options": {}, "subtask_type": None,
            "immutable": False}


def test_forged_messages_are_refused_in_one_line_and_the_real_run_runs_once(
        cli_env, pg_url, redis_server, api, tmp_path):
    runlog = tmp_path / "runner.log"
    Path("config.toml").write_text(textwrap.dedent("""
        [scheduler]
        poll_seconds = 0.2
        lease_seconds = 3
    """))
    env = scaleout_env(cli_env, pg_url, redis_server.url, runlog)
    task = api.add("echo real", every=3600)
    pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))
    (claim,) = api.store.claim_for_dispatch(now=time.time(), owner="test", dispatch_seconds=60,
                                            limit=10, default_grace=3600)
    run = claim.run
    app = make_app(redis_server.url)

    def send(args=(), kwargs=None, name=TASK_NAME, **options) -> None:
        app.send_task(name, args=args, kwargs=kwargs or {}, queue="jarvis", **options)

    real = (run.id, run.attempt, run.epoch)
    forged = [
        ((str(run.id), 1, 1), None), ((run.id, 1), None), ((*real, 4), None),
        ((), {"run_id": run.id, "attempt": 1, "epoch": 1}), (([[[[run.id]]]], 1, 1), None),
        (("9" * 5000, 1, 1), None), ((True, True, True), None), ((2**70, 1, 1), None),
        ((float(run.id), 1.0, 1.0), None), (("x" * 500_000, 1, 1), None),
        ((run.id, 1, 2**40), None), ((-run.id, 1, 1), None),
    ]
    for args, kwargs in forged:
        send(args, kwargs)
    # Celery's own tasks: starmap would call jarvis's task once per item of one message.
    send(name="celery.starmap", kwargs={"task": _sig(TASK_NAME), "it": [list(real)] * 3})
    send(name="celery.accumulate", args=(1, 2))
    send(name="no.such.task", args=(1,))
    # The real run with a linked task: the worker would send celery.accumulate on.
    send(real, link=_sig("celery.accumulate"))
    with app.producer_or_acquire() as producer:
        headers = {"lang": "py", "task": TASK_NAME, "argsrepr": "", "kwargsrepr": ""}
        producer.publish(pickle.dumps((real, {}, {})), serializer=None, routing_key="jarvis",
                         content_type="application/x-python-serialize",
                         content_encoding="binary", headers={**headers, "id": "pickled"})
        producer.publish("[" * 100_000 + "]" * 100_000, serializer=None, routing_key="jarvis",
                         content_type="application/json", content_encoding="utf-8",
                         headers={**headers, "id": "nested"})
    # Held in the worker's memory until a day from now (prefetch does not bound these), unless
    # the worker handles it at once.
    later = datetime.now(UTC) + timedelta(days=1)
    for _ in range(5):
        send((run.id + 1000, 1, 1), eta=later)
    # Last, the message jarvis sends: it runs, once.
    app.send_task(TASK_NAME, args=real, task_id=task_id_for(run.id, run.epoch), queue="jarvis")
    w = worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner")
    try:
        wait_for(lambda: pg_rows(pg_url, "SELECT 1 FROM jarvis_runs WHERE status = 'succeeded'"),
                 timeout=30, what="the real run")
        refused = wait_for(lambda: (lambda n: n if n >= len(forged) + 1 else None)(
            sum("not a message jarvis sends" in line for line in w.lines)),
            timeout=15, what="every forged message to be refused")
        for name in ("celery.starmap", "celery.accumulate", "no.such.task"):
            w.wait_for_line(f"Received unregistered task of type '{name}'")
        w.wait_for_line("Refusing to deserialize untrusted content of type pickle")
        w.wait_for_line("Can't decode message body")
        wait_for(lambda: sum(f"run {run.id + 1000} (attempt 1, epoch 1): not started here" in line
                             for line in w.lines) == 5, timeout=15, what="the eta messages now")
        # The run's row says succeeded before Celery logs the task's end: wait for that line.
        wait_for(lambda: [line for line in w.lines if "] succeeded in" in line
                          and not line.endswith("'dropped'")], timeout=15,
                 what="the worker's line for the real run")
        text = w.text()
    finally:
        w.close()
        app.close()
    assert refused == len(forged) + 1  # + the real run with a link
    assert "Traceback" not in text
    assert "x" * 400 not in text and "[[[[[[[[[[" not in text  # bodies are not copied to the log
    # Only the real message ran a task: nothing was sent on, nothing ran from starmap.
    done = [line for line in text.splitlines()
            if "] succeeded in" in line and not line.endswith("'dropped'")]
    assert len(done) == 1 and task_id_for(run.id, run.epoch) in done[0], done
    starts = [e for e in read_log(runlog) if e["event"] == "start"]
    assert len(starts) == 1
    assert pg_rows(pg_url, "SELECT id, status, epoch FROM jarvis_runs") == [
        (run.id, "succeeded", run.epoch)]
    assert task.id == starts[0]["task_id"]


def test_message_shape_is_exact():
    class Request:
        callbacks = errbacks = chain = chord = None

    assert message_problem((1, 1, 1), {}, Request()) is None
    assert message_problem([2**63 - 1, 2**31 - 1, 2**31 - 1], {}, Request()) is None
    for args in [(0, 1, 1), (1, 0, 1), (1, 1, 2**31), (2**63, 1, 1), (1, 1, True), (1, 1, 1.0),
                 (1, 1), (1, 1, 1, 1), "111", None]:
        assert message_problem(args, {}, Request()), args
    assert message_problem((1, 1, 1), {"x": 1}, Request())
    linked = Request()
    linked.chain = [{"task": "x"}]
    assert "chain" in message_problem((1, 1, 1), {}, linked)


def test_a_run_delivered_to_many_workers_at_once_starts_once(api, pg_url):
    """The compare-and-set start under real concurrency: eight connections race for one
    dispatched run (a message delivered to several workers at the same moment)."""
    api.add("echo", every=3600)
    pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))
    (claim,) = api.store.claim_for_dispatch(now=time.time(), owner="test", dispatch_seconds=60,
                                            limit=10, default_grace=3600)
    stores = [PostgresStore(pg_url) for _ in range(8)]
    barrier = threading.Barrier(len(stores))
    won: list[str] = []

    def race(i: int, store: PostgresStore) -> None:
        barrier.wait(10)
        if store.start_dispatched(claim.run.id, claim.run.epoch, f"w{i}", 60) is not None:
            won.append(f"w{i}")

    threads = [threading.Thread(target=race, args=(i, s)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for s in stores:
        s.close()
    assert len(won) == 1
    assert pg_rows(pg_url, "SELECT status, claimed_by FROM jarvis_runs") == [("running", won[0])]


def _peak_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def test_a_message_far_larger_than_any_jarvis_message_is_refused_unread(
        cli_env, pg_url, redis_server, api, tmp_path):
    """64 MiB pushed on the queue (anyone who can write to the broker can): the worker's
    consumer throws it away as it comes off the socket, in one log line, its memory barely
    moves (read whole, copied, decoded and parsed it took several times its size), and the
    real run behind it runs."""
    import redis

    from jarvis.scheduler.broker import MAX_MESSAGE_BYTES

    runlog = tmp_path / "runner.log"
    env = scaleout_env(cli_env, pg_url, redis_server.url, runlog)
    api.add("echo real", every=3600)
    pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))
    (claim,) = api.store.claim_for_dispatch(now=time.time(), owner="test", dispatch_seconds=60,
                                            limit=10, default_grace=3600)
    w = worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner")
    app = make_app(redis_server.url)
    try:
        before = _peak_kib(w.pid)
        size = 64 << 20
        client = redis.Redis.from_url(redis_server.url)
        client.lpush("jarvis", b"{" + b"x" * (size - 1))
        client.close()
        app.send_task(TASK_NAME, args=(claim.run.id, claim.run.attempt, claim.run.epoch),
                      task_id=task_id_for(claim.run.id, claim.run.epoch), queue="jarvis")
        wait_for(lambda: pg_rows(pg_url, "SELECT 1 FROM jarvis_runs WHERE status = 'succeeded'"),
                 timeout=30, what="the real run")
        line = w.wait_for_line("refused a message of")
        grown = _peak_kib(w.pid) - before
        text = w.text()
    finally:
        w.close()
        app.close()
    assert f"refused a message of {size} bytes" in line and str(MAX_MESSAGE_BYTES) in line
    assert grown < 16 * 1024, f"the worker's peak memory grew by {grown} KiB"
    assert "Traceback" not in text and "x" * 100 not in text
    assert len([e for e in read_log(runlog) if e["event"] == "start"]) == 1
