"""Approval links: single-use, expiring, signed tokens for the page `jarvis serve` shows.

A link sent to the person's channel carries a token naming one request:
`v1.<approval id>.<nonce>.<expires>.<signature>`, the signature an HMAC-SHA256 over the rest
with this install's secret (`$JARVIS_HOME/approvals.key`, 32 random bytes, 0600 in a 0700
folder, made on first use like the serve token). So a token cannot be made without the key
(forged), changed to name another request or a later expiry (the signature breaks), or used
after it expires. It is used once: answering records its nonce in the store in the same
transaction as the answer, so a replay is refused (jarvis.approvals.store.decide).

With workers on several machines, the machines that send links and the one serving the page
need the same key file (otherwise a link is refused as forged; the CLI command in the
message always works).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from jarvis.errors import UserError

KEY_FILE = "approvals.key"
VERSION = "v1"
_KEY = re.compile(r"[0-9a-f]{64}")
_TOKEN = re.compile(r"v1\.([0-9a-f]{4,64})\.([A-Za-z0-9_-]{16,64})\.(\d{1,12})\.([0-9a-f]{64})")


class BadToken(UserError):
    """A link token that is malformed, forged, expired or for another request."""


@dataclass(slots=True, frozen=True)
class LinkToken:
    approval_id: str
    nonce: str
    expires_at: int


def key_path() -> Path:
    from jarvis.core.paths import jarvis_home

    return jarvis_home() / KEY_FILE


def link_key(create: bool = True) -> bytes | None:
    """This install's signing key (made private on first use); None without one when not
    `create`. A key file others could read is replaced (links signed with it may be known)."""
    from jarvis.security.secret_file import SecretFile, read_or_make

    text = read_or_make(SecretFile(key_path(), _KEY, lambda: secrets.token_hex(32),
                                   "the approval link key",
                                   remedy="remove it, and a new key is made"), create)
    return None if text is None else bytes.fromhex(text)


def _signature(key: bytes, approval_id: str, nonce: str, expires_at: int) -> str:
    message = f"jarvis-approval-link|{VERSION}|{approval_id}|{nonce}|{expires_at}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def make_token(approval_id: str, expires_at: float, key: bytes | None = None) -> str:
    """A token for the request `approval_id`, good until `expires_at`."""
    key = key if key is not None else link_key(create=True)
    assert key is not None
    nonce = secrets.token_urlsafe(18)
    when = int(expires_at)
    return f"{VERSION}.{approval_id}.{nonce}.{when}.{_signature(key, approval_id, nonce, when)}"


def check_token(token: object, approval_id: str, *, now: float | None = None,
                key: bytes | None = None) -> LinkToken:
    """The token if it is well formed, signed with this install's key, for `approval_id`,
    and not expired; BadToken saying which it is not (never which part of a signature)."""
    text = str(token or "").strip()
    match = _TOKEN.fullmatch(text) if len(text) <= 200 else None
    if match is None:
        raise BadToken("this approval link is malformed; use the link from the message, or "
                       "`jarvis approvals approve ID`")
    found_id, nonce, expires, signature = match.groups()
    key = key if key is not None else link_key(create=False)
    if key is None or not hmac.compare_digest(signature,
                                              _signature(key, found_id, nonce, int(expires))):
        raise BadToken("this approval link is not signed by this jarvis (forged, or signed "
                       "with another install's key)")
    if found_id != approval_id:
        raise BadToken("this approval link is for another request")
    if int(expires) <= (now or time.time()):
        raise BadToken("this approval link has expired")
    return LinkToken(found_id, nonce, int(expires))
