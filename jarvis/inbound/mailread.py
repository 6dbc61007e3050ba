"""Reading an e-mail that came in: is it really from an allowed sender, and which words are
theirs.

**Who sent it.** A `From:` header is whatever the sender's program wrote; anyone can write the
owner's address there. An inbound accepts a message only when every check it is configured
with passes (at least one is required):

- `authserv_id`: the receiving mail system (your provider, or your own Postfix with
  OpenDKIM/OpenDMARC or rspamd) vouches for the From: domain in an `Authentication-Results`
  header (RFC 8601) under its own id: `dmarc=pass` for that domain, or `dkim=pass` with a
  signing domain (`header.d`) equal to it. Only the topmost such header counts: that is the one
  the receiving system added last; RFC 8601 makes it remove or rename headers claiming its id
  that came with the message, and a forged one below the real one is never read.
- `secret_address`: the message was sent to a secret plus-address
  (`jarvis+k3Jd8sQ@example.org`), which only the person knows. Checked in `Delivered-To` /
  `X-Original-To` (set by the receiving system) and in `To`/`Cc`.

**Their words.** The text part they wrote, without quoted lines (`> ...`, and the "On ... wrote:"
line before them) and without forwarded messages (from "---------- Forwarded message ----------",
"Begin forwarded message:" or "-----Original Message-----" on). Those, attached messages and
text attachments are untrusted content; other attachments are named, not read.
"""

from __future__ import annotations

import re
from email.message import EmailMessage
from email.utils import getaddresses, parseaddr
from typing import Any

from jarvis.inbound.message import InboundMessage, cut_text

_FORWARD = re.compile(r"^\s*(-{2,}\s*forwarded message\s*-{2,}|begin forwarded message:|"
                      r"-{2,}\s*original message\s*-{2,})\s*$", re.IGNORECASE)
_WROTE = re.compile(r"^\s*on .{4,200} wrote:\s*$", re.IGNORECASE)
_FWD_SUBJECT = re.compile(r"^\s*(fwd?|fw)\s*:", re.IGNORECASE)
MAX_ATTACHMENT_CHARS = 50_000
MAX_PARTS = 100  # MIME parts walked per message


# --- who sent it ----------------------------------------------------------------------------
def _strip_comments(value: str) -> str:
    """An RFC 5322 header value without its (comments), nested ones too."""
    out, depth, escaped = [], 0, False
    for ch in value:
        if escaped:
            escaped = False
            if depth == 0:
                out.append(ch)
            continue
        if ch == "\\":
            escaped = True
            if depth == 0:
                out.append(ch)
        elif ch == "(":
            depth += 1
        elif ch == ")" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def parse_authentication_results(value: str) -> tuple[str, list[dict[str, str]]]:
    """(authserv-id, [{"method": "dkim", "result": "pass", "header.d": "example.org"}, ...])."""
    text = " ".join(_strip_comments(value).split())
    pieces = [p.strip() for p in text.split(";")]
    authserv = pieces[0].split()[0].lower() if pieces and pieces[0] else ""
    results = []
    for piece in pieces[1:]:
        tokens = piece.split()
        if not tokens or "=" not in tokens[0]:
            continue  # "none", or junk
        method, _, result = tokens[0].partition("=")
        entry = {"method": method.strip().lower(), "result": result.strip().lower()}
        for token in tokens[1:]:
            name, eq, prop = token.partition("=")
            if eq and "." in name:
                entry[name.lower()] = prop.strip().strip('"').lower()
        results.append(entry)
    return authserv, results


def authenticated(message: EmailMessage, from_domain: str, authserv_id: str) -> str | None:
    """None when the receiving system `authserv_id` vouches for `from_domain`; else why not."""
    wanted = authserv_id.strip().lower()
    for value in message.get_all("Authentication-Results") or []:
        authserv, results = parse_authentication_results(str(value))
        if authserv != wanted:
            continue
        # The topmost header of our receiving system: the only one that counts.
        for entry in results:
            if entry["result"] != "pass":
                continue
            if entry["method"] == "dmarc" and entry.get("header.from") == from_domain:
                return None
            if entry["method"] == "dkim":
                signer = entry.get("header.d") or entry.get("header.i", "").rpartition("@")[2]
                if signer == from_domain:
                    return None
        return (f"the Authentication-Results of {authserv_id} show no DKIM/DMARC pass for "
                f"{from_domain}")
    return f"no Authentication-Results header from {authserv_id}"


def _local_domain(address: str) -> tuple[str, str]:
    local, _, domain = address.strip().rpartition("@")
    return local, domain.lower()


def sent_to_secret(message: EmailMessage, secret_address: str) -> bool:
    """Whether the message went to the secret plus-address (exact local part, any case domain)."""
    wanted = _local_domain(secret_address)
    headers = []
    for name in ("Delivered-To", "X-Original-To", "To", "Cc"):
        headers += [str(v) for v in message.get_all(name) or []]
    return any(_local_domain(address) == wanted
               for _, address in getaddresses(headers) if address)


def sender_of(message: EmailMessage) -> tuple[str, str, str | None]:
    """(address lower case, display name, why it cannot be used or None)."""
    values = message.get_all("From") or []
    if len(values) != 1:
        return "", "", f"{len(values)} From: headers (one is required)"
    addresses = getaddresses([str(values[0])])
    if len(addresses) != 1 or not addresses[0][1] or "@" not in addresses[0][1]:
        return "", "", "the From: header does not hold exactly one address"
    name, address = addresses[0]
    return address.strip().lower(), name[:100], None


# --- their words ----------------------------------------------------------------------------
def split_body(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(the sender's own words, [(label, text)] of quoted and forwarded parts)."""
    lines = text.replace("\r\n", "\n").split("\n")
    own: list[str] = []
    quoted: list[str] = []
    forwarded: list[str] = []
    for index, line in enumerate(lines):
        if _FORWARD.match(line):
            forwarded = lines[index:]
            break
        if line.lstrip().startswith(">"):
            quoted.append(line)
            continue
        own.append(line)
    # "On Mon, ... Ada wrote:" right before the quote belongs to it.
    while own and not own[-1].strip():
        own.pop()
    if own and quoted and _WROTE.match(own[-1]):
        quoted.insert(0, own.pop())
    parts = []
    if quoted:
        parts.append(("quoted message", "\n".join(quoted)))
    if forwarded:
        parts.append(("forwarded message", "\n".join(forwarded)))
    return "\n".join(own).strip(), parts


def _text_of(part: Any) -> str:
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError, TypeError):
        payload = part.get_payload(decode=True) or b""
        content = payload.decode("utf-8", "replace")
    if not isinstance(content, str):
        return ""
    if part.get_content_type() == "text/html":
        return html_text(content)
    return content


def html_text(html: str) -> str:
    """The text of an HTML body (scripts and styles dropped), for a mail without a text part."""
    from html.parser import HTMLParser

    class Text(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.out: list[str] = []
            self.skip = 0

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag in ("script", "style"):
                self.skip += 1
            elif tag in ("br", "p", "div", "li", "tr", "blockquote"):
                self.out.append("\n")

        def handle_endtag(self, tag: str) -> None:
            if tag in ("script", "style") and self.skip:
                self.skip -= 1

        def handle_data(self, data: str) -> None:
            if not self.skip:
                self.out.append(data)

    parser = Text()
    parser.feed(html)
    return re.sub(r"\n{3,}", "\n\n", "".join(parser.out)).strip()


def read_message(message: EmailMessage, msg: InboundMessage, settings: Any) -> None:
    """Fill `msg` from a parsed e-mail: its sender, whether it may be answered, the sender's
    words and the untrusted parts."""
    address, name, problem = sender_of(message)
    msg.sender, msg.sender_name, msg.chat = address, name, address
    subject = " ".join(str(message.get("Subject") or "").split())[:300]
    references = " ".join(str(message.get("References") or "").split())[:4000]
    msg.reply_to = {"message_id": str(message.get("Message-ID") or "").strip()[:998],
                    "references": references, "subject": subject, "address": address}
    why = problem or refusal(message, address, settings)
    if why:
        msg.refusal = why
        return
    msg.allowed = True
    budget = [settings.max_message_chars]
    body = message.get_body(preferencelist=("plain", "html"))
    text = _text_of(body) if body is not None else ""
    own, others = split_body(text)
    if subject and not _FWD_SUBJECT.match(subject):
        own = f"Subject: {subject}\n\n{own}" if own else f"Subject: {subject}"
    elif subject:
        msg.add_untrusted("subject of the forwarded mail", subject, budget)
    msg.text = cut_text(own, settings.max_message_chars, msg)
    budget[0] -= len(msg.text)
    for label, part_text in others:
        msg.add_untrusted(label, part_text, budget)
    _attachments(message, body, msg, budget)


def refusal(message: EmailMessage, address: str, settings: Any) -> str | None:
    """Why this message is not answered (None: it is)."""
    allowed = {a.strip().lower() for a in settings.allow}
    own = settings.address.strip().lower()
    if address == own:
        return "it is from jarvis's own address (a loop)"
    auto = str(message.get("Auto-Submitted") or "no").strip().lower()
    if auto != "no" or str(message.get("Precedence") or "").strip().lower() in (
            "bulk", "list", "junk") or message.get("List-Id"):
        return "an automatic or list message (Auto-Submitted, Precedence or List-Id)"
    if address not in allowed:
        return f"sender {address} is not in allow"
    domain = _local_domain(address)[1]
    if settings.authserv_id:
        problem = authenticated(message, domain, settings.authserv_id)
        if problem:
            return f"From: {address} is not authenticated: {problem}"
    if settings.secret_address:
        from jarvis.core.envvars import expand_env

        secret = expand_env(settings.secret_address, "inbound secret_address")
        if not sent_to_secret(message, secret):
            return f"From: {address}, but not sent to the secret address"
    return None


def _attachments(message: EmailMessage, body: Any, msg: InboundMessage, budget: list[int]) -> None:
    seen = 0
    for part in message.walk():
        seen += 1
        if seen > MAX_PARTS:
            msg.note(f"parts after the first {MAX_PARTS}")
            return
        if part is body or part.is_multipart() and part.get_content_type() != "message/rfc822":
            continue
        if part is message:
            continue
        disposition = part.get_content_disposition()
        ctype = part.get_content_type()
        filename = (part.get_filename() or "")[:100]
        if ctype == "message/rfc822":
            inner = part.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            if isinstance(inner, EmailMessage):
                inner_body = inner.get_body(preferencelist=("plain", "html"))
                head = (f"From: {inner.get('From')}\nSubject: {inner.get('Subject')}\n\n")
                msg.add_untrusted("attached message", head + (_text_of(inner_body)
                                                              if inner_body is not None else ""),
                                  budget)
            continue
        if disposition != "attachment" and not filename:
            continue  # an alternative of the body (the HTML of a text mail)
        if ctype.startswith("text/"):
            msg.add_untrusted(f"attachment {filename or ctype}",
                              _text_of(part)[:MAX_ATTACHMENT_CHARS], budget)
        else:
            size = len(part.get_payload(decode=True) or b"")
            msg.note(f"attachment {filename or '(unnamed)'} ({ctype}, {size} bytes) is not "
                     f"text")


def reply_subject(subject: str) -> str:
    return subject if re.match(r"^\s*re\s*:", subject, re.IGNORECASE) else f"Re: {subject}"


def domain_of(address: str) -> str:
    return parseaddr(address)[1].rpartition("@")[2] or "localhost"

