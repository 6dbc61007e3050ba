"""E-mail in: IMAP for what arrives (imapclient), SMTP for the answers (smtplib, the email
package; no hand-written MIME).

- New mail is what is not `\\Seen` in the folder, taken by UID; each message's key is
  `account/folder/UIDVALIDITY/UID`, so a folder that was re-created never makes old keys match
  new mail. A message is marked `\\Seen` only once its handling is finished in the ledger.
- Size first: the server's RFC822.SIZE is read before anything else. A message over
  `max_message_bytes` is never fetched whole: its first 64 KiB of headers are, to see who sent
  it (an allowed, authenticated sender is told it was not read). The body fetch itself asks for
  at most `max_message_bytes` + 1 bytes, so a server that misstates a size cannot make jarvis
  read more.
- Answers thread: `In-Reply-To` and `References`, "Re: " subject, `Auto-Submitted:
  auto-replied` (RFC 3834: auto-responders do not answer it, no mail loops), a `Message-ID`
  derived from the inbound message, the same for every attempt.
- SMTP is driven step by step: the envelope (MAIL, RCPT) first, and the ledger's "sending"
  record just before DATA, so the only moment a crash leaves a reply unknown is the DATA
  transfer itself.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from jarvis.errors import ConfigError, DependencyError, JarvisError
from jarvis.inbound.message import InboundMessage
from jarvis.inbound.telegram import SendFailed, SendUnknown

log = logging.getLogger("jarvis.inbound")

HEADER_BYTES = 65_536
MAX_PER_POLL = 50
TIMEOUT = 30.0


def _imapclient() -> Any:
    try:
        import imapclient
    except ImportError:
        raise DependencyError("e-mail inbound needs imapclient: pip install 'jarvis[inbound]'") \
            from None
    return imapclient


class MailChannel:
    """One mailbox: fetch new messages over IMAP, answer them over SMTP."""

    kind = "email"

    def __init__(self, name: str, settings: Any) -> None:
        from jarvis.core.envvars import expand_env

        self.name = name
        self.settings = settings
        where = f"[inbound.{name}]"
        self.username = expand_env(settings.username or settings.address, f"{where} username")
        self.password = expand_env(settings.password, f"{where} password")
        self.smtp_username = expand_env(settings.smtp_username or settings.username
                                        or settings.address, f"{where} smtp_username")
        self.smtp_password = expand_env(settings.smtp_password or settings.password,
                                        f"{where} smtp_password")
        self.account = f"email:{self.username}@{settings.imap_host}/{settings.folder}"
        self._imap: Any = None
        self._uidvalidity: int | None = None

    # --- IMAP --------------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._imap is not None:
            return self._imap
        imapclient = _imapclient()
        s = self.settings
        try:
            client = imapclient.IMAPClient(s.imap_host, port=s.imap_port,
                                           ssl=s.imap_security == "ssl", timeout=TIMEOUT)
            if s.imap_security == "starttls":
                client.starttls()
            client.login(self.username, self.password)
            info = client.select_folder(s.folder)
        except imapclient.exceptions.LoginError as exc:
            raise ConfigError(f"[inbound.{self.name}]: the IMAP server {s.imap_host} refused "
                              f"the login of {self.username}: {exc}") from None
        except (OSError, imapclient.exceptions.IMAPClientError) as exc:
            raise _Transient(f"IMAP {s.imap_host}:{s.imap_port}: {exc}") from None
        self._uidvalidity = int(info.get(b"UIDVALIDITY", 0))
        self._imap = client
        return client

    def _drop(self) -> None:
        if self._imap is not None:
            try:
                self._imap.logout()
            except Exception:  # noqa: BLE001 (a dead connection: nothing to say goodbye to)
                pass
            self._imap = None

    def check(self) -> None:
        """Log in once (a wrong password is one clear error now, not a retry loop)."""
        try:
            self._connect()
        except _Transient as exc:
            raise JarvisError(f"[inbound.{self.name}]: cannot reach the mailbox: {exc}") from None

    def fetch(self, stop: Any) -> list[InboundMessage]:
        """New (unseen) messages, oldest first, at most MAX_PER_POLL; then wait poll_seconds."""
        imapclient = _imapclient()
        found: list[InboundMessage] = []
        try:
            client = self._connect()
            client.noop()  # a new message shows up in the selected folder
            uids = sorted(client.search(["UNSEEN"]))[:MAX_PER_POLL]
            for uid in uids:
                try:
                    found.append(self._read(client, uid))
                except (OSError, imapclient.exceptions.IMAPClientError):
                    raise
                except Exception as exc:  # a message the email package cannot take apart
                    found.append(self._unreadable(uid, exc))
        except (_Transient, OSError, imapclient.exceptions.IMAPClientError) as exc:
            log.warning("inbound %s: %s; reconnecting", self.name, exc)
            self._drop()
            stop.wait(min(self.settings.poll_seconds * 4, 30.0))
            return found
        if not found:
            stop.wait(self.settings.poll_seconds)
        return found

    def _read(self, client: Any, uid: int) -> InboundMessage:
        from email import policy
        from email.parser import BytesParser

        from jarvis.inbound.mailread import read_message

        s = self.settings
        key = f"{self.username}@{s.imap_host}/{s.folder}/{self._uidvalidity}/{uid}"
        msg = InboundMessage(self.name, "email", key, sender="", chat="",
                             received_at=time.time())
        msg.reply_to = {"uid": uid}
        sizes = client.fetch([uid], ["RFC822.SIZE"]).get(uid, {})
        size = int(sizes.get(b"RFC822.SIZE", 0))
        too_big = size > s.max_message_bytes
        if too_big:
            item = f"BODY.PEEK[HEADER]<0.{HEADER_BYTES}>"
            data = client.fetch([uid], [item]).get(uid, {})
            raw = data.get(b"BODY[HEADER]<0>", b"") or b""
        else:
            item = f"BODY.PEEK[]<0.{s.max_message_bytes + 1}>"
            data = client.fetch([uid], [item]).get(uid, {})
            raw = data.get(b"BODY[]<0>", b"") or b""
            if len(raw) > s.max_message_bytes:
                too_big, raw = True, raw[:HEADER_BYTES].split(b"\r\n\r\n", 1)[0] + b"\r\n\r\n"
        parsed = BytesParser(policy=policy.default).parsebytes(raw, headersonly=too_big)
        read_message(parsed, msg, s)
        msg.reply_to["uid"] = uid
        if too_big:
            msg.text, msg.untrusted = "", []
            if msg.allowed:
                # An allowed, authenticated sender is told; nobody else hears anything.
                msg.reply_note = (f"Your message was {size / 1e6:.1f} MB; I read messages up "
                                  f"to {s.max_message_bytes / 1e6:.1f} MB, so I did not read "
                                  f"it. Please send it shorter, or without the attachments.")
            msg.allowed = False
            msg.refusal = msg.refusal or f"too large: {size} bytes, over {s.max_message_bytes}"
        return msg

    def _unreadable(self, uid: int, exc: Exception) -> InboundMessage:
        """A message that could not be read: recorded (and marked seen) as such, never run."""
        s = self.settings
        key = f"{self.username}@{s.imap_host}/{s.folder}/{self._uidvalidity}/{uid}"
        msg = InboundMessage(self.name, "email", key, sender="", chat="",
                             received_at=time.time(), reply_to={"uid": uid})
        msg.refusal = f"could not be read: {type(exc).__name__}: {str(exc)[:200]}"
        return msg

    def ack(self, msg: InboundMessage) -> None:
        """Mark the message \\Seen (its handling is recorded as finished)."""
        imapclient = _imapclient()
        uid = msg.reply_to.get("uid")
        if uid is None:
            return
        try:
            self._connect().add_flags([uid], [imapclient.SEEN])
        except (_Transient, OSError, imapclient.exceptions.IMAPClientError) as exc:
            # Seen again next time: the ledger says it is finished, so it is only acked then.
            log.warning("inbound %s: could not mark message %s seen: %s", self.name, uid, exc)
            self._drop()

    # --- SMTP --------------------------------------------------------------------------------
    def parts(self, text: str) -> list[str]:
        return [text or "(no answer)"]  # one mail, however long

    def build_reply(self, msg: InboundMessage, text: str) -> Any:
        from email.message import EmailMessage
        from email.utils import formatdate

        from jarvis.inbound.mailread import domain_of, reply_subject

        s = self.settings
        reply = EmailMessage()
        reply["From"] = s.address
        reply["To"] = msg.reply_to.get("address") or msg.sender
        reply["Subject"] = reply_subject(msg.reply_to.get("subject") or "your message")
        reply["Date"] = formatdate(localtime=True)
        digest = hashlib.sha256(f"{self.account}\0{msg.key}".encode()).hexdigest()[:32]
        reply["Message-ID"] = f"<jarvis.{digest}@{domain_of(s.address)}>"
        original = msg.reply_to.get("message_id") or ""
        if original:
            reply["In-Reply-To"] = original
            reply["References"] = " ".join(x for x in (msg.reply_to.get("references"),
                                                       original) if x)
        reply["Auto-Submitted"] = "auto-replied"
        if s.secret_address:
            from jarvis.core.envvars import expand_env

            # Answers to the answer reach jarvis at the address that passes the check.
            reply["Reply-To"] = expand_env(s.secret_address, "inbound secret_address")
        reply.set_content(text)
        return reply

    def send_part(self, msg: InboundMessage, part: str, index: int,
                  wait: Callable[[float], bool], before_send: Callable[[], None]) -> None:
        """Send the answer: envelope, then `before_send()` (the ledger's "sending"), then DATA.
        SendFailed: not sent; SendUnknown: DATA went out without a final answer."""
        import smtplib
        from email import policy

        s = self.settings
        reply = self.build_reply(msg, part)
        data = reply.as_bytes(policy=policy.SMTP)
        try:
            smtp_class = smtplib.SMTP_SSL if s.smtp_security == "ssl" else smtplib.SMTP
            smtp = smtp_class(s.smtp_host, s.smtp_port, timeout=TIMEOUT)
        except OSError as exc:
            raise SendFailed(f"cannot reach SMTP {s.smtp_host}:{s.smtp_port}: {exc}") from None
        with smtp:
            try:
                smtp.ehlo()
                if s.smtp_security == "starttls":
                    smtp.starttls()
                    smtp.ehlo()
                if self.smtp_password and smtp.has_extn("auth"):
                    # A server that offers no AUTH (a local relay) takes mail without it; one
                    # that needs it refuses MAIL FROM below, saying so.
                    smtp.login(self.smtp_username, self.smtp_password)
                code, answer = smtp.mail(s.address)
                if code != 250:
                    raise SendFailed(f"SMTP MAIL FROM refused: {code} {answer!r}")
                code, answer = smtp.rcpt(str(reply["To"]))
                if code not in (250, 251):
                    raise SendFailed(f"SMTP RCPT TO refused: {code} {answer!r}")
            except (OSError, smtplib.SMTPException) as exc:
                raise SendFailed(f"SMTP {s.smtp_host}: {exc}") from None
            before_send()
            try:
                code, answer = smtp.data(data)
            except smtplib.SMTPDataError as exc:
                raise SendFailed(f"SMTP refused the message: {exc}") from None
            except (OSError, smtplib.SMTPException) as exc:
                raise SendUnknown(f"SMTP DATA got no answer: {exc}") from None
            if code != 250:
                raise SendFailed(f"SMTP refused the message: {code} {answer!r}")

    def close(self) -> None:
        self._drop()


class _Transient(JarvisError):
    """The mailbox could not be reached this time; tried again."""
