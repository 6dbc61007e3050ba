"""A message's own run that needs the person parks (with `[approvals] notify` set) and asks in
the same chat: the answer to the message is the request; `approve ID` replied there (or an
answer given anywhere else) continues the run once, in the listener, and its answer comes back
to the same chat. Without `notify` the call is refused as before. Real processes: `jarvis
listen`, the loopback Bot API, the loopback model, the channel receiver; the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from approvals_support import Receiver, answer_from_request, marks, workspace
from inbound_support import (
    Listen,
    approval,
    jarvis,
    ledger_rows,
    listen_env,
    mail,
    mail_config,
    telegram_config,
)
from mail_servers import SmtpReceiver, start_dovecot
from telegram_server import FakeTelegram
from waiting import wait_for

from jarvis.testing import FakeOpenAIServer


@pytest.fixture(scope="module")
def dovecot():
    server = start_dovecot()
    yield server
    server.stop()


def write_config(receiver: Receiver, tg: FakeTelegram | None, notify: bool = True,
                 inbound: str = "") -> None:
    work = workspace(Path.cwd())  # the `danger` tool: needs confirmation, marks each run
    (work / "config.toml").write_text(
        "[memory]\ncontext = false\n"
        f'[channels.me]\nurl = "json://{receiver.hostport}/me"\nretries = 0\n'
        f'[approvals]\nnotify = "{"me" if notify else ""}"\n'
        + (inbound or telegram_config(tg, extra='tools = ["danger"]')))


def request_id(text: str) -> str:
    return re.search(r"Or reply here: approve ([0-9a-f]+)", text).group(1)


def test_a_messages_run_parks_asks_in_the_chat_and_goes_on_once_after_the_reply(tmp_path,
                                                                                cli_env):
    target = tmp_path / "chat.txt"
    with FakeTelegram() as tg, FakeOpenAIServer(default=answer_from_request) as llm, \
            Receiver() as receiver:
        write_config(receiver, tg)
        env = listen_env(cli_env, llm, tg=tg)
        with Listen(env) as listen:
            tg.add_message(42, f"write chat {target}")
            asked = tg.wait_for_sent(1)[0]
            assert asked["chat_id"] == 42
            assert "needs your approval" in asked["text"], asked["text"]
            ident = request_id(asked["text"])
            assert f"jarvis approvals approve {ident}" in asked["text"]
            assert "danger" in asked["text"]
            assert marks(target) == []  # nothing ran before the person answered
            assert receiver.requests() == []  # asked in the chat, not also on `notify`

            # A stranger's reply decides nothing.
            tg.add_message(7, f"approve {ident}")
            wait_for(lambda: any(r["sender"] == "7" and r["status"] == "ignored"
                                 for r in ledger_rows(env)), 30, "the stranger ignored")
            assert approval(ident).status == "pending"

            tg.add_message(42, f"approve {ident}")
            sent = tg.wait_for_sent(3)
            said = [m["text"] for m in sent[1:3]]
            assert said[0].startswith(f"Approved {ident}: danger"), said
            assert "jarvis listen continues its run" in said[0]
            assert said[1] == f"tool said: wrote {target}", said
            assert all(m["chat_id"] == 42 for m in sent)
            assert marks(target) == ["written chat"]

            # A second approve is refused; nothing runs again.
            tg.add_message(42, f"approve {ident}")
            again = tg.wait_for_sent(4)[3]["text"]
            assert again.startswith("Nothing was approved") and "already" in again, again
            wait_for(lambda: all(r["status"] in ("sent", "ignored") for r in ledger_rows(env))
                     and len(ledger_rows(env)) == 5, 30, "every message finished")
            assert len(tg.sent) == 4
            assert listen.proc.poll() is None
        rows = ledger_rows(env)
    assert marks(target) == ["written chat"]
    (continued,) = [r for r in rows if "+continue:" in r["key"]]
    assert continued["status"] == "sent" and continued["run_id"]
    decided = approval(ident)
    assert (decided.status, decided.decided_by) == ("approved", "inbound phone: 42")
    # The chat's conversation keeps the turn with the continuation's answer.
    import json

    (first,) = [r for r in rows if r["run_id"] == continued["run_id"] and r is not continued]
    shown = json.loads(jarvis(env, "conversations", "show", first["conversation_id"],
                              "--json").stdout)
    assert [t["answer"] for t in shown["turn_list"]] == [f"tool said: wrote {target}"]


def test_denied_from_the_cli_the_listener_goes_on_and_answers_in_the_chat(tmp_path, cli_env):
    target = tmp_path / "deny.txt"
    with FakeTelegram() as tg, FakeOpenAIServer(default=answer_from_request) as llm, \
            Receiver() as receiver:
        write_config(receiver, tg)
        env = listen_env(cli_env, llm, tg=tg)
        with Listen(env):
            tg.add_message(42, f"write never {target}")
            ident = request_id(tg.wait_for_sent(1)[0]["text"])
            out = jarvis(env, "approvals", "deny", ident, "--reason", "no")
            assert out.returncode == 0, out.stderr
            assert "jarvis listen continues its run" in out.stderr
            answer = tg.wait_for_sent(2)[1]
    assert answer["chat_id"] == 42
    assert answer["text"].startswith("tool said: ERROR (denied)"), answer["text"]
    assert marks(target) == []


def test_without_notify_a_messages_run_is_refused_as_before(tmp_path, cli_env):
    target = tmp_path / "refused.txt"
    with FakeTelegram() as tg, FakeOpenAIServer(default=answer_from_request) as llm, \
            Receiver() as receiver:
        write_config(receiver, tg, notify=False)
        env = listen_env(cli_env, llm, tg=tg)
        with Listen(env):
            tg.add_message(42, f"write now {target}")
            answer = tg.wait_for_sent(1)[0]
    assert answer["text"].startswith("tool said: ERROR (denied)"), answer["text"]
    assert marks(target) == []


def test_a_listener_killed_during_a_continuation_does_not_run_it_again(tmp_path, cli_env):
    """kill -9 after the approved call ran, before the continuation's answer was recorded: the
    next listener takes the continuation's ledger entry over, does not continue the run again
    (the approvals store says it was continued), and says so in the chat, once."""
    import threading

    target = tmp_path / "once.txt"
    after_tool = threading.Event()
    gate = threading.Event()

    def model(body: dict):
        if body["messages"][-1].get("role") == "tool":
            after_tool.set()
            gate.wait(60)  # the killed listener's continuation waits here
        return answer_from_request(body)

    with FakeTelegram() as tg, FakeOpenAIServer(default=model) as llm, Receiver() as receiver:
        write_config(receiver, tg)
        env = listen_env(cli_env, llm, tg=tg)
        first = Listen(env)
        try:
            tg.add_message(42, f"write once {target}")
            ident = request_id(tg.wait_for_sent(1)[0]["text"])
            tg.add_message(42, f"approve {ident}")
            assert after_tool.wait(30)  # the approved call ran; the answer is not recorded
            assert marks(target) == ["written once"]
        finally:
            first.kill9()
        gate.set()
        with Listen(env) as second:
            second.wait_for_line("taking over message")
            said = tg.wait_for_sent(3)[2]["text"]
            wait_for(lambda: all(r["status"] in ("sent", "ignored") for r in ledger_rows(env)),
                     30, "every message finished")
        rows = ledger_rows(env)
    assert said.startswith("Your answer was recorded, but the run was not continued here"), said
    assert "continued already" in said
    assert marks(target) == ["written once"]  # the call ran once
    assert len(tg.sent) == 3
    (continued,) = [r for r in rows if "+continue:" in r["key"]]
    assert continued["attempts"] == 2 and continued["status"] == "sent"


def test_an_email_runs_request_and_answer_go_to_the_same_thread(tmp_path, cli_env, dovecot):
    mailbox = dovecot.emptied()
    target = tmp_path / "mail.txt"
    with SmtpReceiver() as smtp, FakeOpenAIServer(default=answer_from_request) as llm, \
            Receiver() as receiver:
        write_config(receiver, None,
                     inbound=mail_config(mailbox, smtp, extra='tools = ["danger"]'))
        env = listen_env(cli_env, llm, dovecot=mailbox)
        with Listen(env):
            mailbox.deliver(mail(f"Please write {target}", message_id="<q1@example.com>"))
            (_, _, asked) = smtp.wait_for(1)[0]
            text = asked.get_content()
            assert "needs your approval" in text, text
            ident = request_id(text)
            assert marks(target) == []
            mailbox.deliver(mail(f"approve {ident}", subject="Re: A question",
                                 message_id="<q2@example.com>"))
            replies = [m[2] for m in smtp.wait_for(3)]
    assert replies[1].get_content().startswith(f"Approved {ident}: danger")
    answer = replies[2]
    assert answer.get_content().strip() == f"tool said: wrote {target}"
    # The answer is a reply to the first mail, in its thread, with a Message-ID of its own.
    assert answer["In-Reply-To"] == "<q1@example.com>"
    assert answer["Message-ID"] != replies[0]["Message-ID"]
    assert len(marks(target)) == 1
