"""The owner token: a keyless `jarvis serve` / `jarvis mcp serve --http` answers only the user
who started it (here, below the servers, so that their clients, jarvis.env's EnvClient among
them, can read it too).

A server on 127.0.0.1 is reachable by every local user (and every process of theirs), and
both servers run tools with their owner's rights: file_read, memory, the scheduler. So without
an API key each request must carry the owner's token, a random secret kept in
`$JARVIS_HOME/serve.token` (0600 in a 0700 folder: only the owner can read it), created the
first time a server starts (or `jarvis serve --print-token` asks for it):

    curl -H "Authorization: Bearer $(jarvis serve --print-token)" localhost:8765/jarvis/tools

It is checked like an API key (X-API-Key or Authorization: Bearer, constant time, before any
body is read), WebSocket handshakes included. A token file that others could read is replaced
by a new token (the old one may be known), one owned by another user is refused. With an API
key the key is required instead, as before.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

TOKEN_FILE = "serve.token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")


def token_path() -> Path:
    from jarvis.core.paths import jarvis_home

    return jarvis_home() / TOKEN_FILE


def owner_token(create: bool = True) -> str | None:
    """The owner's token, made (private) if there is none yet or the one there may be known
    to others; None when there is none and `create` is false. UserError when the file belongs
    to someone else or cannot be written."""
    from jarvis.security.secret_file import SecretFile, read_or_make

    return read_or_make(SecretFile(
        token_path(), _TOKEN, lambda: secrets.token_urlsafe(32), "the serve token",
        remedy="another user could know its token: remove it, and a new one is made",
        fix="point JARVIS_HOME at a writable folder of yours", on_replace=_warn_replaced),
        create)


def _warn_replaced(path: Path, mode: int) -> None:
    import logging

    logging.getLogger("jarvis").warning(
        "jarvis: warning: %s was readable by other users (mode %04o): a new token replaces it",
        path, mode)
