"""Approving by reply, end to end, as real processes: a scheduled task parks on a call that
needs the person (tests/approvals_support.py: a workspace tool that needs confirmation), the
request reaches the person's channel (a loopback receiver), and the person answers
`approve ID` in their Telegram chat (a loopback Bot API server). One daemon does both: it runs
the task and, with `[scheduler] listen = true`, the listener. The reply records the decision
as the person's, the daemon continues the run once, the tool runs once. A sender not in the
inbound's `allow` and an approval inside a forwarded message change nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

from approvals_support import (
    Receiver,
    answer_from_request,
    approval_id,
    config_text,
    marks,
    workspace,
)
from inbound_support import approval, ledger_rows, telegram_config
from scheduler_support import Daemon, jarvis
from telegram_server import FakeTelegram
from waiting import wait_for

from jarvis.scheduler.schedules import iso
from jarvis.testing import FakeOpenAIServer


def test_a_parked_task_continues_once_after_an_approve_reply_in_telegram(tmp_path, cli_env):
    marked = tmp_path / "marked.txt"
    with FakeTelegram() as tg, FakeOpenAIServer(default=answer_from_request) as engine, \
            Receiver() as receiver:
        work = workspace(Path.cwd())
        config = work / "config.toml"
        config.write_text(config_text(engine.base_url, receiver,
                                      scheduler_db=tmp_path / "scheduler.db",
                                      extra="listen = true\n" + telegram_config(tg)))
        env = dict(cli_env, JARVIS_CONFIG=str(config), OPENAI_API_KEY="test", TG_TOKEN=tg.token)
        out = jarvis(env, "schedule", "add", f"write now {marked}", "--at",
                     iso(time.time()), "--tools", "danger", "--agent", "orchestrator",
                     "--notify", "me", "--json")
        assert out.returncode == 0, out.stderr
        task_id = json.loads(out.stdout)["task_id"]
        daemon = Daemon(env, "--poll", "0.2", runner=None, cwd=str(work))
        try:
            request = wait_for(lambda: receiver.requests()[-1:], 30,
                               "the approval request at the receiver")[0]
            ident = approval_id(request)
            # Neither a stranger nor forwarded words answer it.
            tg.add_message(7, f"approve {ident}")
            tg.add_message(42, f"approve {ident}", forward_origin={
                "type": "user", "date": 1, "sender_user": {"id": 666, "first_name": "M"}})
            tg.wait_for_sent(1)  # the forwarded one: a run of its own, which decides nothing
            wait_for(lambda: len([r for r in ledger_rows(env)
                                  if r["status"] in ("sent", "ignored")]) == 2, 30,
                     "both messages handled")
            assert approval(ident).status == "pending" and marks(marked) == []
            tg.add_message(42, f"approve {ident[:6]}")
            answered = tg.wait_for_sent(2)[1]
            result = wait_for(lambda: receiver.results(task_id), 30, "the task's result")[0]
        finally:
            assert daemon.stop() == 0, daemon.text()[-3000:]
    assert answered["text"].startswith(f"Approved {ident}: danger")
    assert f"scheduled task {task_id} goes on" in answered["text"]
    assert result["message"].startswith(f"tool said: wrote {marked}")
    assert marks(marked) == ["written now"]  # the tool ran once, after the reply
    decided = approval(ident)
    assert (decided.status, decided.decided_by) == ("approved", "inbound phone: 42")
