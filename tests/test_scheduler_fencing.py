"""Fenced side effects (issue 27), in process: a scheduled run that lost its lease makes no
further call, its tools get the run's key, attempt and epoch, and effect records keep a retried
attempt from sending the same key twice; on a real SQLite file and a real PostgreSQL database.
(The same on real Celery workers, with SIGSTOP and kill -9: test_scheduler_fencing_celery.py.)"""

from __future__ import annotations

import json
import time

import pytest
from mcp_support import stdio_server, write_config
from net_support import Reply, serving

from jarvis import tool
from jarvis.core.config import JarvisConfig
from jarvis.core.registry import ToolRegistry
from jarvis.errors import RunFenced
from jarvis.scheduler.fencing import ledger_fence
from jarvis.scheduler.scheduler import TaskScheduler
from jarvis.scheduler.store import QuotaError, SchedulerStore
from jarvis.scheduler.store_common import Claim
from jarvis.scheduler.store_postgres import PostgresStore
from jarvis.sdk import Jarvis
from jarvis.testing import ScriptedEngine, reply, tool_call
from jarvis.tools.channel_tools import ChannelSendTool
from jarvis.tools.context import ToolContext
from jarvis.tools.http_request import HttpRequestTool


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        made = SchedulerStore(tmp_path / "s.db")
    else:
        made = PostgresStore(request.getfixturevalue("pg_url"))
    yield made
    made.close()


def take_over(store) -> list:
    """Another daemon's reaper finds the run's lease expired and records it as crashed (on
    PostgreSQL leases are on the database clock: the lease is moved into the past)."""
    if isinstance(store, PostgresStore):
        store._query("UPDATE jarvis_runs SET lease_until = 0 WHERE status = 'running'")
    return store.recover(now=time.time() + 3600)


def running_claim(store, prompt: str = "echo", **options) -> Claim:
    """A task with a run of it held by "daemon" (as a claim makes it)."""
    api = TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    task = api.add(prompt, every=3600, **options)
    return store.claim_manual(task, now=time.time(), owner="daemon", lease_seconds=60)


def test_effect_records_never_send_a_key_twice_and_refuse_a_fenced_run(store):
    claim = running_claim(store)
    run = claim.run
    fence = ledger_fence(store, run, "daemon", 60)
    fence.check()  # held: the renew itself
    first = fence.begin("channel_send", "channel phone")
    assert first.go and first.recorded
    first.finish(True, "sent (ntfy)")
    # A retried attempt makes the same call at the same position: same key, not sent again.
    retry = ledger_fence(store, run, "daemon", 60)
    again = retry.begin("channel_send", "channel phone")
    assert again.key == first.key and not again.go
    assert again.prior.status == "sent" and again.prior.detail == "sent (ntfy)"
    assert "already sent by attempt 1" in again.describe_prior()
    # A second send to the same channel in the run is another position, another key.
    second = retry.begin("channel_send", "channel phone")
    assert second.go and second.key != first.key
    # Begun and never confirmed (its process died): never sent again; the record says so.
    pending = fence.begin("http_request", "POST http://x/orders")
    late = ledger_fence(store, run, "daemon", 60).begin("http_request", "POST http://x/orders")
    assert late.key == pending.key and not late.go and late.prior.status == "sending"
    assert "may or may not have arrived" in late.describe_prior()
    assert store.get_effect(pending.key).status == "unknown"
    # A failed send (nothing arrived) is taken over by the next attempt, under the same key.
    failed = fence.begin("http_request", "POST http://x/pay")
    failed.finish(False, "HTTP 503")
    taken = ledger_fence(store, run, "daemon", 60).begin("http_request", "POST http://x/pay")
    assert taken.go and taken.key == failed.key
    assert store.get_effect(taken.key).status == "sending"
    # The run is taken from its owner (recorded as crashed): no check, no effect passes.
    assert take_over(store)
    with pytest.raises(RunFenced):
        fence.check()
    with pytest.raises(RunFenced):
        ledger_fence(store, run, "daemon", 60).begin("channel_send", "channel other")
    assert len(store.list_effects()) == 4


def test_a_run_whose_lease_was_taken_calls_no_tool_and_no_model(store):
    """The daemon's run waits on its model; meanwhile another daemon records the run as crashed
    (this one stalled past its lease). The reply asks for a tool: it is not called, and the
    model is not asked again."""
    calls: list[tuple] = []

    @tool
    def stamp(note: str, context: ToolContext) -> str:
        """Record an external effect.

        Args:
            note: What to record.
        """
        calls.append((note, context.idempotency_key, context.attempt, context.epoch))
        return "stamped"

    ToolRegistry.register(stamp)

    def after_the_takeover(request):
        take_over(store)  # another daemon's reaper, past the lease
        return reply(tool_calls=[tool_call("stamp", {"note": "late"})])

    engine = ScriptedEngine([reply(tool_calls=[tool_call("stamp", {"note": "first"})]),
                             after_the_takeover, "never asked"])
    with Jarvis(engine=engine, model="m") as system:
        sched = TaskScheduler(store=store, system=system)
        task = sched.add("Stamp twice", every=3600, tools=["stamp"], on_crash="fail")
        run = sched.run_now(task.id)
        log = system.runlog.list(limit=1)[0]
    assert run.status == "failed" and run.error_type == "crashed"
    assert calls == [("first", run.idempotency_key, 1, 0)]
    assert len(engine.calls) == 2  # the third reply was never asked for
    assert log["status"] == "cancelled" and "RunFenced" in log["error"]


def test_quota_counts_tasks_without_a_creator_as_a_persons_on_both_stores(store):
    """A task recorded without created_by is a person's: both stores count it the same."""
    api = TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    api.add("mine", every=3600)
    raw = api.add("also mine", every=3600)
    with store._write() as db:  # as recorded before created_by existed
        db.execute(store._sql("UPDATE {tasks} SET metadata = ? WHERE id = ?"), ("{}", raw.id))
    assert store.get_task(raw.id).created_by == "person"
    from jarvis.scheduler.records import Task

    extra = Task(id="person-3", prompt="x", schedule_type="interval", schedule_value="3600",
                 status="active", metadata={"created_by": "person"})
    with pytest.raises(QuotaError):
        store.add_task(extra, max_live=2)
    extra.metadata = {"created_by": "model"}
    extra.id = "model-1"
    store.add_task(extra, max_live=2)  # models have none yet


def test_tools_carry_the_key_attempt_and_epoch(tmp_path):
    """http_request sends Idempotency-Key (a structured-field string) only on requests that
    change something; channel_send records its sends; both give the same key to a retried
    attempt at the same position, and neither sends one a second time."""
    store = SchedulerStore(tmp_path / "s.db")
    claim = running_claim(store)
    hits: list = []

    def orders(seen):
        hits.append(seen)
        return Reply(201, "created")

    with serving({"/orders": orders, "/hook": lambda seen: Reply(200, "ok")}) as server:
        http = HttpRequestTool(allowed_hosts=["127.0.0.1"])
        config = JarvisConfig.model_validate({"channels": {
            "hook": {"url": f"json://{server.hostport}/hook", "confirm": False}}})
        channel = ChannelSendTool(config=config)
        url = f"http://{server.hostport}/orders"
        for attempt in (1, 2):
            fence = ledger_fence(store, claim.run, "daemon", 60)
            context = ToolContext(run_id=f"run-{attempt}", fence=fence)
            http.invoke({"url": url + "?t=1", "method": "GET"}, context)
            posted = http.invoke({"url": url + f"?t={attempt}", "method": "POST",
                                  "json": {"n": 1}}, context)
            sent = channel.invoke({"channel": "hook", "message": "done"}, context)
            if attempt == 1:
                key = posted.metadata["idempotency_key"]
                assert posted.success and sent.success
            else:  # the retried attempt: the same keys, nothing sent again
                assert posted.metadata == {"idempotency_key": key, "not_sent": True}
                assert posted.content.startswith("already sent by attempt 1")
                assert sent.success and sent.metadata["not_sent"]
    assert [h.method for h in hits] == ["GET", "POST", "GET"]  # a GET changes nothing
    assert "idempotency-key" not in hits[0].headers
    assert hits[1].headers["idempotency-key"] == f'"{key}"'
    hook = [s for s in server.seen if s.path == "/hook"]
    assert len(hook) == 1 and json.loads(hook[0].body)["message"] == "done"
    context = ToolContext(fence=ledger_fence(store, claim.run, "daemon", 60))
    assert (context.idempotency_key, context.attempt, context.epoch) == (
        claim.run.idempotency_key, 1, 0)
    store.close()


def test_mcp_calls_carry_the_key_in_meta(tmp_path):
    """A scheduled run's MCP call sends its effect key, attempt and epoch in the request's
    `_meta` (a real MCP server written with the official SDK echoes what it got)."""
    from jarvis.core.config import load_config
    from jarvis.mcp.manager import McpManager

    manager = McpManager(load_config(write_config(tmp_path, {"box": stdio_server(
        "box", timeout=30)})))
    store = SchedulerStore(tmp_path / "s.db")
    claim = running_claim(store)
    try:
        manager.refresh()
        manager.register_known()
        echo_meta = ToolRegistry.get("box__echo_meta")
        fence = ledger_fence(store, claim.run, "daemon", 60)
        first = echo_meta.invoke({}, ToolContext(fence=fence))
        again = echo_meta.invoke({}, ToolContext(fence=ledger_fence(store, claim.run, "daemon",
                                                                    60)))
        plain = echo_meta.invoke({}, ToolContext())
    finally:
        manager.close()
        store.close()
    meta = json.loads(first.content)
    assert meta["jarvis/attempt"] == 1 and meta["jarvis/epoch"] == 0
    assert len(meta["jarvis/idempotency-key"]) == 32
    assert json.loads(again.content)["jarvis/idempotency-key"] == meta["jarvis/idempotency-key"]
    assert "jarvis/idempotency-key" not in json.loads(plain.content)


def test_a_notify_delivery_is_never_sent_twice(store):
    """A finished run's delivery is keyed by the run (occurrence and attempt): sent once, even
    when delivered again; one begun by a process that died before confirming it is not sent."""
    from jarvis.channels.delivery import ChannelNotifier
    from jarvis.scheduler.fencing import deliver_once

    with serving({"/hook": lambda seen: Reply(200, "ok")}) as server:
        config = JarvisConfig.model_validate({"channels": {
            "hook": {"url": f"json://{server.hostport}/hook"}}})
        api = TaskScheduler(store=store, runner=lambda task, occurrence: "the answer",
                            config=config)
        task = api.add("echo", every=3600, notify="hook")
        run = api.run_now(task.id)
        assert run.delivery["status"] == "delivered" and len(server.seen) == 1
        again = deliver_once(store, task, run, ChannelNotifier(config))
        assert again["status"] == "delivered" and again["key"] == run.delivery["key"]
        assert again["note"].startswith("already sent by attempt 1")
        # Another run: its delivery was begun by a process that died before confirming it.
        second = api.run_now(task.id)
        assert len(server.seen) == 2
        store.finish_effect(second.delivery["key"], status="unknown")
        with store._write() as db:
            db.execute(store._sql("UPDATE {effects} SET status = 'sending' WHERE key = ?"),
                       (second.delivery["key"],))
        resent = deliver_once(store, task, second, ChannelNotifier(config))
    assert resent["status"] == "not_sent" and "may or may not have arrived" in resent["error"]
    assert len(server.seen) == 2
