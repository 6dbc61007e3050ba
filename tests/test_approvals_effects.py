"""A scheduled run that parks twice and sends two side effects of the same kind, continued by
the local daemon (SQLite ledger) and by a Celery worker (PostgreSQL ledger, Redis broker): the
continuations run under the scheduler's claims and fences, and the second POST to the same
URL gets the NEXT effect key (a continuation keeps the run's effect positions), so it is sent,
not taken for the first one and skipped. Real processes throughout: `jarvis scheduler start`,
`jarvis worker`, the CLI answering, a loopback receiver for the orders and the channel."""

from __future__ import annotations

import json
import time
from pathlib import Path

from approvals_support import Receiver, approval_id, config_text
from celery_support import daemon as celery_daemon
from celery_support import pg_rows, scaleout_env, worker
from net_support import Reply
from scheduler_support import Daemon, jarvis, query
from waiting import wait_for

from jarvis.scheduler.schedules import iso
from jarvis.testing import FakeOpenAIServer, reply, tool_call


class Shop(Receiver):
    """The person's channel (/me) and a shop that takes orders (/orders)."""

    def __init__(self) -> None:
        super().__init__()
        self.routes["/orders"] = lambda seen: Reply(201, "order taken")

    def orders(self) -> list:
        return [s for s in list(self.seen) if s.path == "/orders"]


def planner(shop: Shop):
    """Order item 1, then item 2 (each POST needs the person), then say done."""
    def model(body: dict):
        done = [m for m in body.get("messages", []) if m.get("role") == "tool"]
        if len(done) < 2:
            return reply(tool_calls=[tool_call("http_request", {
                "url": shop.url("/orders"), "method": "POST", "json": {"item": len(done) + 1}})])
        return "done: " + " | ".join(str(m.get("content"))[:60] for m in done)
    return model


EXTRA = '[tools.http_request]\nallowed_hosts = ["127.0.0.1"]\n[memory]\ncontext = false\n'


def approve_each(env: dict, shop: Shop, count: int) -> list[str]:
    """Approve the requests as they reach the channel, one after another, through the CLI."""
    answered: list[str] = []
    for n in range(1, count + 1):
        request = wait_for(lambda n=n: shop.requests()[n - 1:n], 60,
                           f"approval request {n} at the receiver")[0]
        ident = approval_id(request)
        assert "POST 127.0.0.1" in request["message"] or "127.0.0.1" in request["message"]
        out = jarvis(env, "approvals", "approve", ident)
        assert out.returncode == 0, out.stderr
        answered.append(ident)
        # The call runs only after the answer: one order per answer so far.
        wait_for(lambda n=n: len(shop.orders()) == n, 60, f"order {n} at the shop")
    return answered


def check_orders(shop: Shop) -> None:
    orders = shop.orders()
    assert [json.loads(o.body) for o in orders] == [{"item": 1}, {"item": 2}]
    keys = [o.headers["idempotency-key"] for o in orders]
    assert len(set(keys)) == 2, keys  # the continuation's POST has the next key


def test_a_run_parked_twice_sends_both_orders_once_each_on_the_local_daemon(tmp_path, cli_env):
    with Shop() as shop, FakeOpenAIServer(default=planner(shop)) as engine:
        db = tmp_path / "scheduler.db"
        config = tmp_path / "config.toml"
        config.write_text(config_text(engine.base_url, shop, scheduler_db=db, extra=EXTRA))
        env = dict(cli_env, JARVIS_CONFIG=str(config), OPENAI_API_KEY="test")
        out = jarvis(env, "schedule", "add", "order items 1 and 2", "--at",
                     iso(time.time()), "--tools", "http_request", "--agent",
                     "orchestrator", "--notify", "me", "--json")
        assert out.returncode == 0, out.stderr
        task_id = json.loads(out.stdout)["task_id"]
        daemon = Daemon(env, "--poll", "0.2", runner=None)
        try:
            approve_each(env, shop, 2)
            result = wait_for(lambda: shop.results(task_id), 60, "the task's result")[0]
        finally:
            code = daemon.stop()
            assert code == 0, daemon.text()[-3000:]
    assert result["message"].startswith("done: "), result
    assert "not sent again" not in result["message"]
    check_orders(shop)
    (row,) = query(db, "SELECT status, resumes FROM runs")
    assert row == ("succeeded", 2)
    effects = query(db, "SELECT tool, status FROM effects ORDER BY created_at")
    assert effects == [("http_request", "sent"), ("http_request", "sent"), ("notify", "sent")]
    assert len(shop.results(task_id)) == 1


def test_a_run_parked_twice_continues_on_celery_workers(tmp_path, cli_env, pg_url,
                                                        redis_server):
    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store_postgres import PostgresStore

    procs: list = []
    store = PostgresStore(pg_url)
    api = TaskScheduler(store=store, runner=lambda task, occurrence: "unused")
    try:
        with Shop() as shop, FakeOpenAIServer(default=planner(shop)) as engine:
            Path("config.toml").write_text(
                config_text(engine.base_url, shop, extra=EXTRA)
                + "[scheduler]\npoll_seconds = 0.2\nlease_seconds = 5\n"
                  "[scheduler.celery]\ndispatch_timeout = 10\n")
            env = scaleout_env(dict(cli_env, OPENAI_API_KEY="test"), pg_url, redis_server.url,
                               tmp_path / "runner.log")
            env.pop("JARVIS_CONFIG", None)
            env["JARVIS_SCHEDULER_RUNNER"] = "celery"
            task = api.add("order items 1 and 2", every=3600, tools=["http_request"],
                           agent="orchestrator", notify="me")
            procs.append(worker(env, "--concurrency", "1"))
            procs.append(worker(env, "--concurrency", "1"))
            procs.append(celery_daemon(env))
            pg_rows(pg_url, "UPDATE jarvis_tasks SET next_run = %s", (time.time() - 0.5,))
            approve_each(env, shop, 2)
            result = wait_for(lambda: shop.results(task.id), 90, "the task's result")[0]
            rows = wait_for(lambda: (lambda r: r if r and r[0][0] == "succeeded" else None)(
                pg_rows(pg_url, "SELECT status, resumes, epoch FROM jarvis_runs WHERE "
                                "task_id = %s", (task.id,))), 30, "the run recorded")
    finally:
        for p in procs:
            p.close()
        store.close()
    assert result["message"].startswith("done: "), result
    assert "not sent again" not in result["message"]
    check_orders(shop)
    ((status, resumes, epoch),) = rows
    assert (status, resumes) == ("succeeded", 2) and epoch >= 3  # each continuation dispatched
    assert len(shop.results(task.id)) == 1
