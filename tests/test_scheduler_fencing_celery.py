"""Fenced side effects on real Celery workers (issue 27): `jarvis worker` subprocesses on a real
Redis broker and PostgreSQL ledger, runs that go through ask_full against the scripted
OpenAI-compatible server, and a loopback receiver that records every call that reaches it.

- a worker's pool process stopped (SIGSTOP) past its lease while its run waits on the model:
  the run is recorded as crashed and its retry succeeds elsewhere; when the process resumes
  it makes no tool call (the lease is checked before each call) and is ended;
- kill -9 between an HTTP POST and its record, then between a channel send and its record:
  the receiver sees each key once per occurrence, after recovery too.
"""

from __future__ import annotations

import json
import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest
from celery_support import Proc, daemon, pg_rows, scaleout_env, worker
from net_support import Reply, serving
from waiting import wait_for

from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store_postgres import PostgresStore
from jarvis.testing import FakeOpenAIServer, reply, tool_call

RUNNER = "scheduler_support:ScriptRunner"

STAMP_TOOL = '''
import json
import os
import urllib.request

from jarvis import tool
from jarvis.tools.context import ToolContext


@tool
def stamp(note: str, context: ToolContext) -> str:
    """Tell the receiver about an external effect, with the run's key, attempt and epoch.

    Args:
        note: What to record.
    """
    body = json.dumps({"note": note, "key": context.idempotency_key, "attempt": context.attempt,
                       "epoch": context.epoch, "pid": os.getpid()}).encode()
    request = urllib.request.Request(os.environ["STAMP_URL"], data=body, method="POST")
    urllib.request.urlopen(request, timeout=10).read()
    return "stamped"
'''


def config(model_url: str, extra: str = "") -> str:
    return textwrap.dedent(f"""
        [scheduler]
        poll_seconds = 0.2
        lease_seconds = 2

        [scheduler.celery]
        dispatch_timeout = 5

        [engine]
        default = "openai"
        model = "test-model"
        max_retries = 0

        [engine.hosts]
        openai = "{model_url}"

        [memory]
        context = false
    """) + textwrap.dedent(extra)


@pytest.fixture
def api(pg_url):
    store = PostgresStore(pg_url)
    yield TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    store.close()


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def runs_of(url: str, task_id: str) -> list[tuple]:
    return pg_rows(url, "SELECT attempt, status, error_type, trigger, epoch FROM jarvis_runs "
                        "WHERE task_id = %s ORDER BY attempt", (task_id,))


def test_a_stalled_worker_makes_no_call_after_its_lease_was_lost(cli_env, pg_url, redis_server,
                                                                 api, procs, tmp_path):
    calls: list[dict] = []
    held, release = threading.Event(), threading.Event()

    def first_reply(request):  # attempt 1's first model call: answered only when released
        held.set()
        release.wait(60)
        return reply(tool_calls=[tool_call("stamp", {"note": "late"})])

    with serving({"/stamp": lambda seen: (calls.append(json.loads(seen.body)), Reply(200))[1]}) \
            as receiver, FakeOpenAIServer([first_reply, reply(tool_calls=[tool_call(
                "stamp", {"note": "retry"})]), "done", "done", "done"]) as model:
        Path("tools").mkdir()
        Path("tools/stamp.py").write_text(STAMP_TOOL)
        Path("config.toml").write_text(config(model.base_url))
        env = dict(scaleout_env(cli_env, pg_url, redis_server.url, tmp_path / "runner.log"),
                   STAMP_URL=receiver.url("/stamp"))
        task = api.add("Stamp it", every=3600, tools=["stamp"], on_crash="retry")
        first = worker(env, "--concurrency", "1")
        procs += [first, daemon(env)]
        pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))
        assert held.wait(40), "attempt 1 never asked its model"
        (pool,) = children(first.pid)
        procs.append(worker(env, "--concurrency", "1"))  # where the retry will run
        os.kill(pool, signal.SIGSTOP)
        try:
            release.set()  # the model's answer waits in the stopped process's socket
            rows = wait_for(lambda: (lambda r: r if len(r) == 2 and r[1][1] == "succeeded"
                                     else None)(runs_of(pg_url, task.id)),
                            timeout=40, what="attempt 1 reaped and attempt 2 done")
        finally:
            os.kill(pool, signal.SIGCONT)
        # Resumed, attempt 1 finds its lease gone: at its worker's next renew, which ends the
        # process, or at its own next call, which stops the run (its result is dropped).
        # (An unfenced attempt 1 would call its tool now: that ends the wait too, and fails.)
        wait_for(lambda: not alive(pool) or any("it is no longer this worker's" in line
                                                for line in list(first.lines))
                 or any(c["attempt"] == 1 for c in calls),
                 timeout=30, what="attempt 1 to end (its process, or its run)")
    assert rows[0][:4] == (1, "failed", "crashed", "schedule")
    assert rows[1][:4] == (2, "succeeded", None, "recovery")
    run = api.store.list_runs(task.id)[0]
    # The receiver heard only from attempt 2: attempt 1 made no call after losing its lease.
    assert [(c["note"], c["attempt"], c["epoch"]) for c in calls] == [("retry", 2, rows[1][4])]
    assert calls[0]["key"] == run.idempotency_key
    assert len(model.requests) == 3  # attempt 1's one call, attempt 2's two; nothing after


def sender_group(peer: tuple) -> int:
    """The process group of the process that holds the loopback client socket `peer` (the
    worker, with its pool processes, whose run sent a request)."""
    port = peer[1]
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if os.readlink(fd) in inodes:
                return os.getpgid(int(fd.parts[2]))
        except OSError:
            continue
    raise AssertionError(f"no process holds the socket of {peer}")


def test_kill_9_between_a_send_and_its_record_never_sends_a_key_twice(
        cli_env, pg_url, redis_server, api, procs, tmp_path):
    """Attempt 1 POSTs an order and its worker is killed (-9) the moment the receiver has it;
    attempt 2 does not POST it again, sends to a channel, and its worker is killed the moment
    the channel's receiver has the message; attempt 3 sends neither again and succeeds. The
    receiver saw the order's key once and the message once."""
    seen: dict[str, list] = {"orders": [], "hook": []}
    killed: list[int] = []

    def receiving(kind: str, status: int):
        def route(request):
            seen[kind].append(request)
            if len(seen[kind]) == 1:  # sent, not yet recorded as sent: its worker dies now
                group = sender_group(request.peer)
                os.killpg(group, signal.SIGKILL)
                killed.append(group)
            return Reply(status, "ok")
        return route

    def model(request):  # the same plan in every attempt: POST the order, tell the person
        done = [m for m in request["messages"] if m.get("role") == "tool"]
        if not done:
            return reply(tool_calls=[tool_call("http_request", {
                "url": receiver.url("/orders"), "method": "POST", "json": {"item": 7}})])
        if len(done) == 1:
            return reply(tool_calls=[tool_call("channel_send", {
                "channel": "hook", "message": "order 7 placed"})])
        return "done"

    with serving({"/orders": receiving("orders", 201), "/hook": receiving("hook", 200)}) \
            as receiver, FakeOpenAIServer([], default=model) as server:
        Path("config.toml").write_text(config(server.base_url, f"""
            [channels.hook]
            url = "json://{receiver.hostport}/hook"
            confirm = false
            retries = 0

            [tools.http_request]
            allowed_hosts = ["127.0.0.1"]
        """))
        env = scaleout_env(cli_env, pg_url, redis_server.url, tmp_path / "runner.log")
        task = api.add("Order item 7 and tell me", every=3600, on_crash="retry", max_retries=2,
                       tools=["http_request", "channel_send"], approved_tools=["http_request"])
        workers = [Proc(env, "worker", "--concurrency", "1") for _ in range(3)]  # start at once
        procs.extend(workers)
        for w in workers:
            w.wait_for_line("ready.")
        procs.append(daemon(env))
        pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))
        rows = wait_for(lambda: (lambda r: r if r and r[-1][1] == "succeeded" else None)(
            runs_of(pg_url, task.id)), timeout=60, what="attempt 3 to succeed")
    assert [r[:3] for r in rows] == [(1, "failed", "crashed"), (2, "failed", "crashed"),
                                     (3, "succeeded", None)]
    assert len(set(killed)) == 2 and {w.pid for w in workers} >= set(killed)
    assert len(seen["orders"]) == 1 and len(seen["hook"]) == 1  # each once, after recovery too
    assert json.loads(seen["hook"][0].body)["message"] == "order 7 placed"
    key = seen["orders"][0].headers["idempotency-key"].strip('"')
    effects = {e.tool: e for e in api.store.list_effects()}
    assert effects["http_request"].key == key and effects["http_request"].attempt == 1
    assert effects["channel_send"].attempt == 2
    assert {e.status for e in effects.values()} == {"unknown"}  # begun, never confirmed
    last = api.store.list_runs(task.id)[0]
    log = api.store.get_log_entry(last.run_log_id)
    said = [c["content"] for c in log["tool_calls"]]
    assert len(said) == 2 and all(s.startswith("not sent again: attempt") for s in said), said
