"""Real mail servers for the e-mail inbound tests, on loopback ports.

- IMAP: Debian's Dovecot (`dovecot-imapd`, installed by .ci/run and the README's set-up
  command), started by the test with a throw-away config in a temporary folder, as a normal
  process (`dovecot -F`): one user, a Maildir, plain logins on 127.0.0.1 only. Mail "arrives"
  by IMAP APPEND, as a delivery agent would put it there. A missing dovecot binary is a
  failure, never a skip.
- SMTP: aiosmtpd, in a thread of the test process; `hold` keeps the final answer to DATA back
  after the message is recorded as received, so a test can kill the sender in between.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from email import policy
from pathlib import Path
from typing import Any

import net_support

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
START_TIMEOUT = 30.0

CONFIG = """\
base_dir = {folder}/run
state_dir = {folder}/state
log_path = {folder}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:{folder}/mail/%u
{users}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN {folder}/users
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={folder}/home/%u
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
  chroot =
}}
service anvil {{
  chroot =
}}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Dovecot:
    """A running Dovecot with one mailbox user."""

    def __init__(self, folder: Path, proc: subprocess.Popen, port: int, user: str,
                 password: str) -> None:
        self.folder, self.proc, self.port, self.user, self.password = (folder, proc, port, user,
                                                                       password)

    def log_tail(self) -> str:
        log = self.folder / "dovecot.log"
        return log.read_text(errors="replace")[-3000:] if log.exists() else ""

    def client(self) -> Any:
        import imapclient

        client = imapclient.IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=10)
        client.login(self.user, self.password)
        return client

    def deliver(self, message: bytes | Any, folder: str = "INBOX") -> int:
        """Put a message into the mailbox (unseen), as the receiving mail system would."""
        data = message if isinstance(message, bytes) else message.as_bytes(policy=policy.SMTP)
        client = self.client()
        try:
            answer = client.append(folder, data)
        finally:
            client.logout()
        # "[APPENDUID <uidvalidity> <uid>] Append completed."
        return int(answer.decode().split("]")[0].split()[-1])

    def flags(self, uid: int, folder: str = "INBOX") -> set[bytes]:
        client = self.client()
        try:
            client.select_folder(folder, readonly=True)
            return set(client.get_flags([uid]).get(uid, ()))
        finally:
            client.logout()

    def unseen(self, folder: str = "INBOX") -> list[int]:
        client = self.client()
        try:
            client.select_folder(folder, readonly=True)
            return sorted(client.search(["UNSEEN"]))
        finally:
            client.logout()

    def emptied(self) -> Dovecot:
        """This server with an empty INBOX (one server per test process, a clean box per test)."""
        client = self.client()
        try:
            client.select_folder("INBOX")
            uids = client.search(["ALL"])
            if uids:
                client.delete_messages(uids)
                client.expunge()
        finally:
            client.logout()
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def start_dovecot(user: str = "jarvis@example.org", password: str = "imap-secret") -> Dovecot:
    if not Path(DOVECOT).exists():
        raise AssertionError("no dovecot binary: apt-get install dovecot-imapd (see README)")
    folder = Path(tempfile.mkdtemp(prefix="jarvis-dovecot-"))
    folder.chmod(0o755)  # dovecot's own users must reach the run folder
    for sub in ("run", "state", "mail", "home"):
        (folder / sub).mkdir()
    (folder / "users").write_text(f"{user}:{{PLAIN}}{password}\n")
    if os.geteuid() == 0:
        # Dovecot refuses to log in or serve mail as root: its own users log in, mail
        # belongs to nobody.
        uid = gid = 65534
        users = "default_internal_user = dovecot\ndefault_login_user = dovenull"
        for sub in ("mail", "home"):
            os.chown(folder / sub, uid, gid)
    else:
        uid, gid = os.getuid(), os.getgid()
        import pwd

        name = pwd.getpwuid(uid).pw_name
        users = (f"default_internal_user = {name}\ndefault_login_user = {name}\n"
                 f"default_internal_group = {pwd.getpwuid(uid).pw_gid}")
    for _ in range(5):
        port = _free_port()
        (folder / "dovecot.conf").write_text(CONFIG.format(folder=folder, users=users, uid=uid,
                                                           gid=gid, port=port))
        proc = subprocess.Popen([DOVECOT, "-F", "-c", str(folder / "dovecot.conf")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                start_new_session=True)
        server = Dovecot(folder, proc, port, user, password)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                server.client().logout()
                return server
            except Exception:  # noqa: BLE001 (not up yet)
                time.sleep(0.05)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if "in use" not in server.log_tail():
            text = server.log_tail()
            shutil.rmtree(folder, ignore_errors=True)
            raise AssertionError(f"dovecot did not start:\n{text}")
    raise AssertionError("dovecot: no free port after 5 tries")


class SmtpReceiver(net_support.SmtpReceiver):
    """net_support's SMTP receiver, messages parsed as email.message.EmailMessage (the
    inbound mail tests read them as the listener's mail does)."""

    def __init__(self) -> None:
        super().__init__(policy=policy.default)
