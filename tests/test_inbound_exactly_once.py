"""Every inbound message answered exactly once: `jarvis listen` killed with SIGKILL before its
answer is sent and after it is sent (before it is recorded), restarted, and two listeners on
one bot or one mailbox. Real processes, real servers; the receiver counts the answers."""

from __future__ import annotations

import threading
from collections import Counter

from inbound_support import (
    Listen,
    ledger_rows,
    listen_env,
    mail,
    mail_config,
    telegram_config,
    wait_for_status,
)

from jarvis.testing import FakeOpenAIServer


class Gate:
    """A model whose first answer waits until the test opens the gate (the listener can be
    killed while its run is under way); later answers come at once."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.opened = threading.Event()
        self.first = True
        self.lock = threading.Lock()

    def __call__(self, request: dict) -> str:
        with self.lock:
            first, self.first = self.first, False
        if first:
            self.opened.wait(60)
        return self.answer


def telegram_setup(tmp_path, cli_env, tg, llm):
    (tmp_path / "work" / "config.toml").write_text(telegram_config(tg))
    return listen_env(cli_env, llm, tg=tg)


def mail_setup(tmp_path, cli_env, mailbox, smtp, llm):
    (tmp_path / "work" / "config.toml").write_text(mail_config(mailbox, smtp))
    return listen_env(cli_env, llm, dovecot=mailbox)


# --- Telegram -------------------------------------------------------------------------------
def test_telegram_killed_before_the_answer_is_sent(tmp_path, cli_env, tg):
    gate = Gate("the one answer")
    with FakeOpenAIServer([gate], default=gate) as llm:
        env = telegram_setup(tmp_path, cli_env, tg, llm)
        first = Listen(env)
        tg.add_message(42, "hello")
        assert llm.wait_for_requests(1, 30)  # the run is under way
        first.kill9()
        gate.opened.set()  # the killed run's answer goes nowhere
        with Listen(env) as second:
            second.wait_for_line("taking over message")
            (row,) = wait_for_status(env, 1, {"sent"})
        assert [s["text"] for s in tg.sent] == ["the one answer"]
        assert row["attempts"] == 2 and row["status"] == "sent"


def test_telegram_killed_after_sending_before_recording(tmp_path, cli_env, tg):
    with FakeOpenAIServer(["sent once"]) as llm:
        env = telegram_setup(tmp_path, cli_env, tg, llm)
        tg.hold_sends.set()
        first = Listen(env)
        tg.add_message(42, "hello")
        tg.wait_for_sent(1)  # delivered; the listener has not heard back, so not recorded
        first.kill9()
        tg.hold_sends.clear()
        tg.release_sends.set()
        with Listen(env) as second:
            (row,) = wait_for_status(env, 1, {"unconfirmed"})
            second.wait_for_line("may not have been sent")
            tg.add_message(42, "and another")  # the listener goes on normally
            tg.wait_for_sent(2)
        assert [s["text"] for s in tg.sent].count("sent once") == 1
        assert len(llm.requests) == 2  # the answer was recorded: the model was not asked again
        assert row["parts_sent"] == 1 and row["unconfirmed_parts"] == 1


def test_two_listeners_on_one_bot_answer_each_message_once(tmp_path, cli_env, tg):
    with FakeOpenAIServer(default=lambda request: "answer to "
                          + request["messages"][-1]["content"]) as llm:
        env = telegram_setup(tmp_path, cli_env, tg, llm)
        with Listen(env), Listen(env):
            for n in range(8):
                tg.add_message(42, f"message {n}")
            wait_for_status(env, 8, {"sent"}, timeout=60)
        counts = Counter(s["text"] for s in tg.sent)
        assert counts == Counter({f"answer to message {n}": 1 for n in range(8)})
        assert len(llm.requests) == 8
        assert tg.conflicts > 0  # they really polled the same bot at the same time


def test_a_restart_answers_nothing_twice(tmp_path, cli_env, tg):
    with FakeOpenAIServer(default="ok") as llm:
        env = telegram_setup(tmp_path, cli_env, tg, llm)
        with Listen(env):
            tg.add_message(42, "one")
            tg.wait_for_sent(1)
        with Listen(env):
            tg.add_message(42, "two")
            tg.wait_for_sent(2)
            wait_for_status(env, 2, {"sent"})
        assert len(tg.sent) == 2 and len(llm.requests) == 2


# --- e-mail ---------------------------------------------------------------------------------
def test_mail_killed_before_the_answer_is_sent(tmp_path, cli_env, mailbox, smtp):
    gate = Gate("the one reply")
    with FakeOpenAIServer([gate], default=gate) as llm:
        env = mail_setup(tmp_path, cli_env, mailbox, smtp, llm)
        uid = mailbox.deliver(mail("hello"))
        first = Listen(env)
        assert llm.wait_for_requests(1, 30)
        first.kill9()
        gate.opened.set()
        assert uid in mailbox.unseen()  # not finished, so not marked seen
        with Listen(env):
            (row,) = wait_for_status(env, 1, {"sent"})
            smtp.wait_for(1)
        assert [m[2].get_content().strip() for m in smtp.messages] == ["the one reply"]
        assert row["attempts"] == 2
        assert b"\\Seen" in mailbox.flags(uid)


def test_mail_killed_after_sending_before_recording(tmp_path, cli_env, mailbox, smtp):
    with FakeOpenAIServer(["sent once"]) as llm:
        env = mail_setup(tmp_path, cli_env, mailbox, smtp, llm)
        uid = mailbox.deliver(mail("hello"))
        smtp.hold.set()
        first = Listen(env)
        smtp.wait_for(1)  # received; the 250 to DATA is held back
        first.kill9()
        smtp.hold.clear()
        smtp.release.set()
        with Listen(env) as second:
            (row,) = wait_for_status(env, 1, {"unconfirmed"})
            second.wait_for_line("may not have been sent")
        assert len(smtp.messages) == 1 and len(llm.requests) == 1
        assert b"\\Seen" in mailbox.flags(uid)


def test_two_listeners_on_one_mailbox_answer_each_mail_once(tmp_path, cli_env, mailbox, smtp):
    with FakeOpenAIServer(default=lambda request: "re: "
                          + request["messages"][-1]["content"].split("\n\n")[-1]) as llm:
        env = mail_setup(tmp_path, cli_env, mailbox, smtp, llm)
        with Listen(env), Listen(env):
            for n in range(6):
                mailbox.deliver(mail(f"mail {n}", subject=f"n{n}"))
            wait_for_status(env, 6, {"sent"}, timeout=60)
        counts = Counter(m[2].get_content().strip() for m in smtp.messages)
        assert counts == Counter({f"re: mail {n}": 1 for n in range(6)})
        assert len(llm.requests) == 6
        assert mailbox.unseen() == []
        assert all(r["status"] == "sent" for r in ledger_rows(env))
