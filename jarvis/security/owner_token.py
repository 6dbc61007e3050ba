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

import os
import re
import secrets
import stat
from pathlib import Path

from jarvis.errors import UserError

TOKEN_FILE = "serve.token"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{32,128}")


def token_path() -> Path:
    from jarvis.core.paths import jarvis_home

    return jarvis_home() / TOKEN_FILE


def owner_token(create: bool = True) -> str | None:
    """The owner's token, made (private) if there is none yet or the one there may be known
    to others; None when there is none and `create` is false. UserError when the file belongs
    to someone else or cannot be written."""
    import logging

    from jarvis.core.paths import private_dir

    path = token_path()
    try:
        private_dir(path.parent)
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UserError(f"cannot use {path.parent} for the serve token: {exc.strerror or exc}; "
                        f"point JARVIS_HOME at a folder of yours") from None
    if info is not None:
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise UserError(f"{path} is not a file of yours (owner uid {info.st_uid}); "
                            f"another user could know its token: remove it, and a new one is "
                            f"made")
        if stat.S_IMODE(info.st_mode) & 0o077:
            logging.getLogger("jarvis").warning(
                "jarvis: warning: %s was readable by other users (mode %04o): a new token "
                "replaces it", path, stat.S_IMODE(info.st_mode))
        else:
            token = _read(path)
            if token is not None:
                return token
    if not create:
        return None
    return _write_new(path, replace=info is not None)


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as fh:
        text = fh.read(256).strip()
    return text if _TOKEN.fullmatch(text) else None


def _write_new(path: Path, replace: bool) -> str:
    """A new token in a new 0600 file. A first one is linked into place only if there is
    still none (two servers starting together share the first one made); one that replaces
    a token others could read is moved over it."""
    token = secrets.token_urlsafe(32)
    tmp = path.with_name(f".{TOKEN_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(token + "\n")
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)
            except FileExistsError:
                made = _read(path)
                if made is None:
                    raise
                token = made
    except OSError as exc:
        raise UserError(f"cannot write the serve token {path}: {exc.strerror or exc}; point "
                        f"JARVIS_HOME at a writable folder of yours") from None
    finally:
        tmp.unlink(missing_ok=True)
    return token
