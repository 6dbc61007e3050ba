"""Scheduled runs on real Celery workers (`jarvis worker` subprocesses) with a real Redis broker
and a real PostgreSQL ledger, both started by the suite on loopback ports (tests/servers.py)."""

from __future__ import annotations

import json
import re
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from celery_support import daemon, pg_rows, scaleout_env, worker
from scheduler_support import jarvis, read_log
from waiting import wait_for

from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store_postgres import PostgresStore
from jarvis.testing import FakeOpenAIServer, reply, tool_call

FAST = textwrap.dedent("""
    [scheduler]
    poll_seconds = 0.2
    lease_seconds = 3

    [scheduler.celery]
    dispatch_timeout = 5
""")


@pytest.fixture
def env(cli_env, pg_url, redis_server, runlog):
    Path("config.toml").write_text(FAST)  # the cwd of every subprocess below
    return scaleout_env(cli_env, pg_url, redis_server.url, runlog)


@pytest.fixture
def api(pg_url):
    store = PostgresStore(pg_url)
    yield TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    store.close()


def make_due(url: str, *task_ids: str) -> None:
    pg_rows(url, "UPDATE jarvis_tasks SET next_run = %s WHERE id = ANY(%s)",
            (time.time() - 0.5, list(task_ids)))


def succeeded(url: str, task_id: str) -> list[tuple]:
    return pg_rows(url, "SELECT id, attempt, answer, claimed_by, epoch FROM jarvis_runs "
                        "WHERE task_id = %s AND status = 'succeeded'", (task_id,))


def test_daemon_dispatches_and_workers_execute_once(env, api, pg_url, runlog, procs):
    procs.append(worker(env, "--concurrency", "2", "--runner", "scheduler_support:ScriptRunner"))
    procs.append(daemon(env))
    tasks = [api.add(f"echo task {i}", every=3600) for i in range(6)]
    make_due(pg_url, *[t.id for t in tasks])
    for t in tasks:
        wait_for(lambda t=t: succeeded(pg_url, t.id), timeout=30, what=f"task {t.id} to succeed")
    rows = pg_rows(pg_url, "SELECT task_id, status, attempt, epoch, claimed_by, answer FROM jarvis_runs")
    assert len(rows) == 6
    assert all(r[1] == "succeeded" and r[2] == 1 and r[3] == 1 for r in rows)
    assert all(r[4].startswith("worker:") for r in rows)  # finished by a worker, not the daemon
    assert sorted(r[5] for r in rows) == sorted(f"task {i}" for i in range(6))
    ends = [e for e in read_log(runlog) if e["event"] == "end"]
    assert Counter(e["run_id"] for e in ends) == Counter({r: 1 for r in {e["run_id"] for e in ends}})
    assert len(ends) == 6
    assert "Traceback" not in procs[0].text()


def test_duplicate_and_stale_deliveries_are_dropped(env, api, pg_url, runlog, procs, redis_server):
    from jarvis.scheduler.celery_app import TASK_NAME, make_app

    store = api.store
    task = api.add("echo once", every=3600)
    make_due(pg_url, task.id)
    claims = store.claim_for_dispatch(now=time.time(), owner="test", dispatch_seconds=60,
                                      limit=10, default_grace=3600)
    assert [c.task.id for c in claims] == [task.id]
    run = claims[0].run
    # Sent again with a newer epoch (as the reaper does), then the old message arrives too,
    # and the current one twice (a redelivery).
    again = store.redispatch_expired(owner="test", dispatch_seconds=60, limit=10)
    assert again == []  # not expired yet
    pg_rows(pg_url, "UPDATE jarvis_runs SET lease_until = 0 WHERE id = %s", (run.id,))
    again = store.redispatch_expired(owner="test", dispatch_seconds=60, limit=10)
    assert [c.run.epoch for c in again] == [2]
    app = make_app(redis_server.url)
    # The daemon's own send, with its message expiring in the broker (here at once): the worker
    # discards it unread, whatever its epoch.
    from jarvis.scheduler.dispatch import CeleryDispatcher

    expiring = CeleryDispatcher(redis_server.url, dispatch_seconds=0.001, expiry_seconds=0.001)
    expiring.send(again[0])
    expiring.close()
    for epoch, task_id in ((1, "stale"), (2, "first"), (2, "duplicate")):
        app.send_task(TASK_NAME, args=(run.id, run.attempt, epoch), task_id=f"t-{task_id}",
                      queue="jarvis")
    w = worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner")
    procs.append(w)
    wait_for(lambda: succeeded(pg_url, task.id), timeout=30, what="the run")
    w.wait_for_line(f"Discarding revoked task: jarvis.scheduler.run[jarvis-run-{run.id}-e2]")
    w.wait_for_line(f"run {run.id} (attempt 1, epoch 1): not started here")  # the stale one
    w.wait_for_line(f"run {run.id} (attempt 1, epoch 2): not started here")  # the duplicate
    assert len([e for e in read_log(runlog) if e["event"] == "start"]) == 1
    (run_row,) = pg_rows(pg_url, "SELECT status, epoch, attempt FROM jarvis_runs")
    assert run_row == ("succeeded", 2, 1)
    app.close()


@pytest.mark.parametrize("policy", ["retry", "fail"])
def test_worker_killed_mid_run_is_reaped_per_on_crash(env, api, pg_url, runlog, procs, policy):
    task = api.add("hang-first 60", every=3600, on_crash=policy)
    make_due(pg_url, task.id)
    first = worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner")
    procs.append(first)
    procs.append(daemon(env))
    wait_for(lambda: [e for e in read_log(runlog) if e["event"] == "start"], timeout=30,
             what="attempt 1 to start on the worker")
    first.kill9()
    procs.append(worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner"))

    def settled() -> list[tuple]:
        rows = pg_rows(pg_url, "SELECT attempt, status, error_type, trigger, answer FROM "
                               "jarvis_runs ORDER BY attempt")
        return rows if rows and rows[-1][1] in ("succeeded", "failed") else []

    rows = wait_for(settled, timeout=40, what="the crash to be reaped")
    assert rows[0][:4] == (1, "failed", "crashed", "schedule")
    if policy == "retry":
        assert rows[1:] == [(2, "succeeded", None, "recovery", "recovered")]
    else:
        time.sleep(1.0)  # a re-run would be queued by the same reaper transaction: none came
        assert len(pg_rows(pg_url, "SELECT 1 FROM jarvis_runs")) == 1
    starts = Counter(e["attempt"] for e in read_log(runlog) if e["event"] == "start")
    assert starts == (Counter({1: 1, 2: 1}) if policy == "retry" else Counter({1: 1}))


STAMP_TOOL = '''
import json
from pathlib import Path

from jarvis import tool
from jarvis.tools.context import ToolContext


@tool
def stamp(note: str, context: ToolContext) -> str:
    """Record that an external effect happened, keyed by the scheduled run's idempotency key.

    Args:
        note: What to record.
    """
    info = context.metadata.get("scheduled_run") or {}
    line = json.dumps({"note": note, "key": info.get("idempotency_key"),
                       "attempt": info.get("attempt")})
    with open(Path(__file__).with_name("effects.jsonl"), "a") as f:
        f.write(line + "\\n")
    return "stamped " + str(info.get("idempotency_key"))
'''


def test_worker_runs_through_ask_full_and_any_machine_reads_the_run_log(
        env, api, pg_url, procs, tmp_path, cli_env):
    """The real path: a worker runs the prompt with ask_full against a loopback OpenAI server;
    a workspace tool sees the idempotency key and attempt; the run log entry is read back from
    the ledger by a `jarvis` with another JARVIS_HOME (another machine)."""
    with FakeOpenAIServer([reply(tool_calls=[tool_call("stamp", {"note": "paid invoice"})]),
                           "Stamped the invoice."]) as server:
        Path("tools").mkdir()
        Path("tools/stamp.py").write_text(STAMP_TOOL)
        Path("config.toml").write_text(FAST + textwrap.dedent(f"""
            [engine]
            default = "openai"
            model = "test-model"
            max_retries = 0

            [engine.hosts]
            openai = "{server.base_url}"

            [memory]
            context = false
        """))
        added = jarvis(env, "schedule", "add", "Stamp the invoice", "--every", "3600",
                       "--tools", "stamp", "--json")
        assert added.returncode == 0, added.stderr
        task_id = json.loads(added.stdout)["task_id"]
        make_due(pg_url, task_id)
        procs.append(worker(env, "--concurrency", "1"))
        procs.append(daemon(env))
        (run_id, attempt, answer, claimed_by, epoch), = wait_for(
            lambda: succeeded(pg_url, task_id), timeout=40, what="the run")
    assert answer == "Stamped the invoice." and attempt == 1
    run = api.store.get_run(run_id)
    effects = [json.loads(line) for line in Path("tools/effects.jsonl").read_text().splitlines()]
    assert effects == [{"note": "paid invoice", "key": run.idempotency_key, "attempt": 1}]
    assert run.idempotency_key == f"{task_id}@" + time.strftime(
        "%Y-%m-%dT%H:%M:%S", time.gmtime(run.scheduled_for)) + run.idempotency_key[-10:]

    other_home = tmp_path / "another-machine"
    other_home.mkdir()
    elsewhere = dict(env, JARVIS_HOME=str(other_home))
    shown = jarvis(elsewhere, "schedule", "runs", "--run", str(run_id), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["idempotency_key"] == run.idempotency_key and data["attempt"] == 1
    log = data["log"]
    assert log["id"] == run.run_log_id and log["source"] == "scheduler"
    assert log["metadata"]["scheduled_run"]["idempotency_key"] == run.idempotency_key
    assert [c["tool_name"] for c in log["tool_calls"]] == ["stamp"]
    assert log["tool_calls"][0]["content"] == f"stamped {run.idempotency_key}"
    listed = jarvis(elsewhere, "schedule", "runs", task_id)
    assert re.search(rf"#{run_id}\s+{task_id}\s+succeeded", listed.stdout), listed.stdout
    text = jarvis(elsewhere, "schedule", "runs", "--run", str(run_id))
    assert text.returncode == 0, text.stderr
    assert f"idempotency_key: {run.idempotency_key}" in text.stdout
    assert f"log: {run.run_log_id} (ok, 1 tool call(s))" in text.stdout
    assert f"tool stamp: ok  stamped {run.idempotency_key}" in text.stdout


def test_misconfiguration_is_one_clear_line(cli_env, pg_url, tmp_path):
    no_store = jarvis(dict(cli_env, JARVIS_CELERY_BROKER="redis://127.0.0.1:1/0"), "worker")
    assert no_store.returncode != 0
    assert "needs the shared ledger" in no_store.stderr and "Traceback" not in no_store.stderr
    no_broker = jarvis(dict(cli_env, JARVIS_SCHEDULER_STORE=pg_url), "worker")
    assert no_broker.returncode != 0 and "needs a broker" in no_broker.stderr
    sqlite_celery = jarvis(dict(cli_env, JARVIS_SCHEDULER_RUNNER="celery",
                                JARVIS_CELERY_BROKER="redis://127.0.0.1:1/0"),
                           "scheduler", "start", "--once")
    assert sqlite_celery.returncode != 0
    assert "needs a ledger they share" in sqlite_celery.stderr
    bad_url = jarvis(dict(cli_env, JARVIS_SCHEDULER_STORE="mysql://x@y/z"), "schedule", "list")
    assert bad_url.returncode != 0 and "postgresql://" in bad_url.stderr
    assert "Traceback" not in bad_url.stderr + sqlite_celery.stderr + no_broker.stderr
    # Unreachable broker or ledger: one line at start (Celery itself would retry forever).
    down = "redis://user:secret@127.0.0.1:1/0"
    ledger_down = "postgresql://postgres@127.0.0.1:1/jarvis"
    outs = [jarvis(dict(cli_env, JARVIS_SCHEDULER_STORE=pg_url, JARVIS_CELERY_BROKER=down,
                        JARVIS_SCHEDULER_RUNNER="celery"), *args)
            for args in (["worker"], ["scheduler", "start"], ["scheduler", "start", "--once"])]
    outs.append(jarvis(dict(cli_env, JARVIS_SCHEDULER_STORE=ledger_down,
                            JARVIS_CELERY_BROKER=down), "worker"))
    outs.append(jarvis(dict(cli_env, JARVIS_SCHEDULER_STORE=ledger_down), "schedule", "list"))
    for out in outs:
        assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert "secret" not in out.stderr
    assert all("cannot reach the Celery broker redis://user:***@127.0.0.1:1/0" in o.stderr
               for o in outs[:3])
    assert all("cannot connect to the scheduler store" in o.stderr for o in outs[3:])
    # celery or psycopg not installed (stand-ins that fail to import, first on the path).
    missing = tmp_path / "missing"
    for name in ("celery", "psycopg"):
        (missing / name).mkdir(parents=True)
        (missing / name / "__init__.py").write_text(f"raise ImportError('No module named {name}')")
    bare = dict(cli_env, PYTHONPATH=str(missing), JARVIS_SCHEDULER_STORE=pg_url,
                JARVIS_CELERY_BROKER=down, JARVIS_SCHEDULER_RUNNER="celery")
    for args, needle in ((["worker"], "pip install 'jarvis[celery]'"),
                         (["scheduler", "start"], "pip install 'jarvis[celery]'"),
                         (["schedule", "list"], "pip install 'jarvis[postgres]'")):
        out = jarvis(bare, *args)
        assert out.returncode != 0 and needle in out.stderr, out.stderr
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_local_runner_gives_tools_the_idempotency_key_and_the_docs_example_works(tmp_path):
    """The key and attempt reach a tool on the local runner too (SdkRunner -> ask_full ->
    ToolContext), and the docs' pay_invoice example runs as written."""
    import re

    from jarvis.core.registry import ToolRegistry
    from jarvis.scheduler.store import SchedulerStore
    from jarvis.sdk import Jarvis
    from jarvis.testing import ScriptedEngine

    docs = (Path(__file__).parent.parent / "docs" / "scheduler.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", docs, re.S) if "pay_invoice" in b)
    namespace: dict = {}
    exec(compile(textwrap.dedent(block), "docs/scheduler.md pay_invoice", "exec"), namespace)
    ToolRegistry.register(namespace["pay_invoice"])
    engine = ScriptedEngine([reply(tool_calls=[tool_call("pay_invoice", {"invoice": "INV-7"})]),
                             "Paid."])
    store = SchedulerStore(tmp_path / "s.db")
    with Jarvis(engine=engine, model="m") as system:
        sched = TaskScheduler(store=store, system=system)
        task = sched.add("Pay INV-7", every=3600, tools=["pay_invoice"])
        run = sched.run_now(task.id)
        assert run.status == "succeeded", run.error
        tool_message = next(m for m in engine.calls[1]["messages"] if m["role"] == "tool")
        assert tool_message["content"] == (f"paid INV-7 (idempotency key INV-7:"
                                           f"{run.idempotency_key}, attempt 1)")
        logged = system.runlog.get(run.run_log_id)
        assert logged["metadata"]["scheduled_run"]["idempotency_key"] == run.idempotency_key
    store.close()


def test_a_run_past_its_timeout_ends_with_its_process_and_its_retry_never_overlaps_it(
        env, api, pg_url, runlog, procs):
    """Defect 7 on workers: the call of a timed-out run is ended with its pool process (a
    thread cannot be stopped), the timeout is recorded, and the retry starts only after that
    process is gone; the single-process worker then goes on with a new pool process."""
    import os

    slow = api.add("hang-first 30", every=3600, timeout_seconds=1, max_retries=1,
                   retry_backoff_seconds=0)
    quick = api.add("echo after", every=3600)
    make_due(pg_url, slow.id)
    procs.append(worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner"))
    procs.append(daemon(env))
    rows = wait_for(lambda: pg_rows(pg_url, "SELECT attempt, error_type, error, finished_at FROM "
                                            "jarvis_runs WHERE task_id = %s AND status = "
                                            "'failed'", (slow.id,)),
                    timeout=30, what="the timed-out run")
    assert rows[0][:2] == (1, "timeout") and "timed out after 1 s" in rows[0][2]
    assert "worker process was stopped" in rows[0][2]
    retry = wait_for(lambda: succeeded(pg_url, slow.id), timeout=30, what="the retry")
    assert [(r[1], r[2]) for r in retry] == [(2, "recovered")]
    starts = {e["attempt"]: e for e in read_log(runlog) if e["task_id"] == slow.id
              and e["event"] == "start"}
    # The first call never ended (its process was stopped) and was gone before the retry began.
    assert not [e for e in read_log(runlog) if e["task_id"] == slow.id
                and e["event"] == "end" and e["attempt"] == 1]
    assert starts[2]["pid"] != starts[1]["pid"]
    with pytest.raises(ProcessLookupError):
        os.kill(starts[1]["pid"], 0)
    assert starts[2]["time"] >= rows[0][3] + 5 - 0.5  # the retry waited for the stop
    make_due(pg_url, quick.id)  # the same single-process worker is free again
    wait_for(lambda: succeeded(pg_url, quick.id), timeout=30, what="the next run")


def test_once_dispatches_what_is_due_and_a_down_ledger_is_one_line(env, api, pg_url, runlog,
                                                                   procs, cli_env):
    tasks = [api.add(f"echo once {i}", every=3600) for i in range(2)]
    make_due(pg_url, *[t.id for t in tasks])
    once = jarvis(env, "scheduler", "start", "--once")
    assert once.returncode == 0, once.stderr
    assert "dispatched 2 run(s) to the workers" in once.stdout
    assert {r[0] for r in pg_rows(pg_url, "SELECT status FROM jarvis_runs")} == {"dispatched"}
    procs.append(worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner"))
    for t in tasks:
        wait_for(lambda t=t: succeeded(pg_url, t.id), timeout=30, what="the dispatched run")

    from ports import closed_port

    down = dict(cli_env, JARVIS_SCHEDULER_STORE=f"postgresql://jarvis:s3cret@127.0.0.1:{closed_port()}/x")
    listed = jarvis(down, "schedule", "list")
    assert listed.returncode != 0 and "Traceback" not in listed.stderr
    assert "cannot connect to the scheduler store postgresql://jarvis:***@" in listed.stderr
    assert "s3cret" not in listed.stderr and len(listed.stderr.strip().splitlines()) == 1


def test_a_worker_delivers_a_task_result_to_its_channel(pg_url, api):
    """A task with `notify` run on a worker: the result reaches the channel (a real loopback
    webhook) and the delivery is recorded with the run in the ledger."""
    from net_support import Reply, serving
    from scheduler_support import ScriptRunner

    from jarvis.core.config import JarvisConfig
    from jarvis.scheduler.worker import Worker

    with serving({"/hook": lambda seen: Reply(200, "ok")}) as server:
        config = JarvisConfig.model_validate({"channels": {
            "hook": {"url": f"json://{server.hostport}/hook"}}})
        api.config = config
        task = api.add("echo shipped", every=3600, notify="hook")
        make_due(pg_url, task.id)
        (claim,) = api.store.claim_for_dispatch(now=time.time(), owner="d", dispatch_seconds=60,
                                                limit=5, default_grace=3600)
        worker_ = Worker(pg_url, ScriptRunner(), lease_seconds=30, config=config)
        assert worker_.execute(claim.run.id, claim.run.attempt, claim.run.epoch) == "succeeded"
    run = api.store.get_run(claim.run.id)
    assert run.answer == "shipped" and run.delivery["status"] == "delivered"
    assert json.loads(server.seen[0].body)["message"].startswith("shipped")
    worker_.store().close()


def test_a_timed_out_run_whose_delivery_outlasts_its_stopped_process_says_not_sent(
        env, api, pg_url, procs):
    """A run past its timeout on a worker ends with its pool process; its delivery gets the
    seconds before that. A channel still retrying then (its backoff is 30 s) was left with no
    delivery record at all; now the run records that it was not sent, and why."""
    from net_support import Reply, serving

    with serving({"/hook": lambda seen: Reply(503, "busy")}) as server:
        Path("config.toml").write_text(FAST + f'[channels.hook]\nurl = "json://{server.hostport}'
                                              f'/hook"\nretries = 2\nretry_backoff = 30\n')
        task = api.add("sleep 30", every=3600, timeout_seconds=1, notify="hook")
        make_due(pg_url, task.id)
        procs.append(worker(env, "--concurrency", "1", "--runner",
                            "scheduler_support:ScriptRunner"))
        procs.append(daemon(env))
        rows = wait_for(lambda: pg_rows(pg_url, "SELECT error_type, delivery FROM jarvis_runs "
                                                "WHERE task_id = %s AND delivery IS NOT NULL",
                                        (task.id,)), timeout=40, what="the delivery record")
        tried = len(server.seen)
    ((error_type, delivery),) = rows
    delivery = json.loads(delivery) if isinstance(delivery, str) else delivery
    assert error_type == "timeout" and tried == 1
    assert delivery["status"] == "not_sent" and delivery["channel"] == "hook", delivery
    assert delivery["error"].startswith("not delivered: its worker process was stopped")


def test_a_backlog_is_not_sent_again_only_lost_messages_are(env, api, pg_url, runlog, procs,
                                                              redis_server):
    """No worker yet: the queue holds the runs; past dispatch_timeout they are not sent again
    (they wait, in order). A run claimed by a daemon that died before sending it is sent at
    once. When the broker loses its queue, the runs are sent again, oldest first, and each
    runs once."""
    import redis

    Path("config.toml").write_text(FAST.replace("dispatch_timeout = 5", "dispatch_timeout = 1"))
    tasks = [api.add(f"echo {i}", every=3600) for i in range(4)]
    for i, task in enumerate(tasks[:3]):
        pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s WHERE id = %s",
                (time.time() - 10 + i, task.id))
    d = daemon(env)
    procs.append(d)
    wait_for(lambda: len(pg_rows(pg_url, "SELECT 1 FROM jarvis_runs WHERE sent_at IS NOT NULL")) == 3,
             timeout=20, what="3 runs sent")
    make_due(pg_url, tasks[3].id)  # claimed by a daemon that dies before sending it
    api.store.claim_for_dispatch(now=time.time(), owner="dead", dispatch_seconds=3600, limit=5,
                                 default_grace=3600)
    d.wait_for_line("claimed but never sent")
    # By now the three sent runs were older than dispatch_timeout at a reaper pass: waiting in
    # the queue, they were left alone (before, each pass sent each again).
    epochs = dict(pg_rows(pg_url, "SELECT task_id, epoch FROM jarvis_runs"))
    assert [epochs[t.id] for t in tasks] == [1, 1, 1, 2]
    client = redis.Redis.from_url(redis_server.url)
    assert client.llen("jarvis") == 4
    client.delete("jarvis")  # the broker loses every message (a restart without persistence)
    client.close()
    wait_for(lambda: sum("it was lost" in line for line in d.lines) == 4, timeout=20,
             what="the lost messages sent again")
    procs.append(worker(env, "--concurrency", "1", "--runner", "scheduler_support:ScriptRunner"))
    for t in tasks:
        wait_for(lambda t=t: succeeded(pg_url, t.id), timeout=30, what=f"task {t.id}")
    starts = [e["task_id"] for e in read_log(runlog) if e["event"] == "start"]
    assert starts == [t.id for t in tasks]  # each once, in the order they were due


def test_a_visibility_timeout_a_task_outlasts_is_a_start_up_error(cli_env, api, pg_url):
    """Redis would hand a run's message to a second worker while the first still runs it:
    `jarvis worker` and the dispatching daemon refuse to start, in one line, naming the fix."""
    from jarvis.errors import UserError
    from jarvis.scheduler.dispatch import CeleryDispatcher

    long = api.add("echo long", every=86400, timeout_seconds=7200)
    Path("config.toml").write_text("[scheduler.celery]\nvisibility_timeout = 3600\n")
    env = dict(cli_env, JARVIS_SCHEDULER_STORE=pg_url, JARVIS_CELERY_BROKER="redis://127.0.0.1:1/0")
    out = jarvis(env, "worker")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    expected = f"visibility_timeout = 3600 s is shorter than task {long.id}'s timeout (7200 s)"
    assert expected in out.stderr and "at least 7260" in out.stderr
    # The daemon makes the same check when it starts (`jarvis scheduler start` calls it).
    dispatcher = CeleryDispatcher("redis://127.0.0.1:1/0", visibility_timeout=3600)
    with pytest.raises(UserError, match="at least 7260"):
        dispatcher.check(api.store)
    api.cancel_task(long.id)
    from jarvis.scheduler.celery_app import check_visibility

    check_visibility(3600, api.store)  # no active task outlasts it now
    dispatcher.app.close()
