"""What the inbound tests share: configs for the loopback servers, `jarvis listen` as a real
subprocess, e-mails as a receiving mail system would store them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from logged_process import LoggedProcess
from waiting import wait_for

OWNER = "ada@example.com"
AUTHSERV = "mx.example.org"


def telegram_config(tg: Any, *, allow: tuple[str, ...] = ("42",), extra: str = "",
                    name: str = "phone") -> str:
    return (f'[inbound.{name}]\ntype = "telegram"\ntoken = "${{TG_TOKEN}}"\n'
            f'api_url = "{tg.url}"\npoll_timeout = 1\n'
            f'allow = {json.dumps(list(allow))}\n{extra}\n')


def mail_config(dovecot: Any, smtp: Any, *, allow: tuple[str, ...] = (OWNER,),
                authserv_id: str = AUTHSERV, secret_address: str = "", extra: str = "",
                name: str = "mail") -> str:
    return (f'[inbound.{name}]\ntype = "email"\naddress = "jarvis@example.org"\n'
            f'imap_host = "127.0.0.1"\nimap_port = {dovecot.port}\nimap_security = "none"\n'
            f'password = "${{IMAP_PASSWORD}}"\n'
            f'smtp_host = "127.0.0.1"\nsmtp_port = {smtp.port}\nsmtp_security = "none"\n'
            f'poll_seconds = 0.1\nauthserv_id = "{authserv_id}"\n'
            f'secret_address = "{secret_address}"\nallow = {json.dumps(list(allow))}\n{extra}\n')


def listen_env(cli_env: dict[str, str], llm: Any, *, tg: Any = None,
               dovecot: Any = None) -> dict[str, str]:
    env = dict(cli_env, JARVIS_ENGINE="vllm", JARVIS_MODEL="test-model", VLLM_HOST=llm.url)
    env.pop("JARVIS_CONFIG", None)
    if tg is not None:
        env["TG_TOKEN"] = tg.token
    if dovecot is not None:
        env["IMAP_PASSWORD"] = dovecot.password
    return env


def jarvis(env: dict[str, str], *args: str, cwd: Path | None = None,
           timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, text=True,
                          capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          cwd=cwd or Path.cwd())


def in_process(env: dict[str, str], *args: str, cwd: Path | None = None
               ) -> subprocess.CompletedProcess:
    """`jarvis ARGS` in this process (tests/cli_support.py): for the commands that read what
    a listener left (conversations, runs); `jarvis listen` itself runs as a real process."""
    from cli_support import run_in_process

    return run_in_process(args, env=env, cwd=cwd or Path.cwd())


class Listen(LoggedProcess):
    """`jarvis listen ...` running as a real process."""

    def __init__(self, env: dict[str, str], *args: str, cwd: Path | None = None) -> None:
        proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "listen", *args], env=env,
                                cwd=cwd or Path.cwd(), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        super().__init__(proc, "jarvis listen")
        self.wait_for_line("listening")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.close_streams()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.close_streams()
        return self.proc.returncode

    def __enter__(self) -> Listen:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def ledger_rows(env: dict[str, str]) -> list[dict[str, Any]]:
    out = jarvis(env, "listen", "--list", "--json", "-n", "1000")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_for_status(env: dict[str, str], count: int, statuses: set[str],
                    timeout: float = 30) -> list[dict[str, Any]]:
    """Until `count` messages are recorded in one of `statuses`."""
    def done() -> list[dict[str, Any]] | None:
        rows = [r for r in ledger_rows(env) if r["status"] in statuses]
        return rows if len(rows) >= count else None

    return wait_for(done, timeout, f"{count} messages in {statuses}", interval=0.2)


def mail(body: str, *, sender: str = f"Ada <{OWNER}>", subject: str = "A question",
         auth: str | None = "pass", to: str = "jarvis@example.org",
         message_id: str | None = None, **headers: str) -> EmailMessage:
    """An e-mail as stored by the receiving system: with its Authentication-Results on top
    (`auth="pass"`: DKIM and DMARC pass for the From: domain; a string: that header value;
    None: none)."""
    message = EmailMessage()
    domain = sender.rpartition("@")[2].rstrip(">")
    if auth == "pass":
        message["Authentication-Results"] = (f"{AUTHSERV}; dkim=pass header.d={domain} "
                                             f"header.s=sel; spf=pass smtp.mailfrom={domain}; "
                                             f"dmarc=pass (p=reject) header.from={domain}")
    elif auth is not None:
        message["Authentication-Results"] = auth
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Message-ID"] = message_id or f"<{os.urandom(6).hex()}@{domain}>"
    for name, value in headers.items():
        message[name.replace("_", "-")] = value
    message.set_content(body)
    return message


def park_request(request_id: str, run_id: str = "run-parked") -> None:
    """A run parked on one egress request, in the approvals store the listener uses."""
    from jarvis.approvals import Approval, ParkedRun, open_approvals

    store = open_approvals(None)  # $JARVIS_HOME/approvals.db: the listener's too
    try:
        expires = time.time() + 3600
        egress = {"kind": "network", "destination": "api.example.com", "method": "GET",
                  "payload": ["https://api.example.com/"]}
        store.park(ParkedRun(run_id=run_id, state={}, expires_at=expires),
                   [Approval(id=request_id, run_id=run_id, call_id="c1", tool="http_request",
                             kind="egress", request={"egress": [egress], "size": 24,
                                                     "digest": "ab12"},
                             expires_at=expires)])
    finally:
        store.close()


def approval(request_id: str):
    from jarvis.approvals import open_approvals

    store = open_approvals(None)
    try:
        return store.get(request_id)
    finally:
        store.close()
