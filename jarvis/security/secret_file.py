"""A secret of this install kept in a file only its owner can read: the serve owner token
(jarvis.security.owner_token) and the approval links' signing key (jarvis.approvals.tokens).

`read_or_make` reads it, or makes a new one in a new 0600 file in a 0700 folder. A first one
is linked into place only if there is still none (two processes starting together share the
first one made); one that replaces a secret others could read is moved over it. A file owned
by someone else, or not a regular file, is refused: another user could know its secret.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jarvis.errors import UserError

MAX_CHARS = 256  # more than any secret kept this way; a longer file is not one of them


@dataclass(slots=True, frozen=True)
class SecretFile:
    """path: the file; valid: what its text must match; make: a new secret;
    what: its name in messages ("the serve token"); remedy: what to do when the file is not
    the user's; fix: appended to a write error (where to point JARVIS_HOME), may be empty;
    on_replace: called with (path, mode) before a secret others could read is replaced."""

    path: Path
    valid: re.Pattern[str]
    make: Callable[[], str]
    what: str
    remedy: str
    fix: str = ""
    on_replace: Callable[[Path, int], object] | None = None


def read_or_make(secret: SecretFile, create: bool = True) -> str | None:
    """The secret, made (private) if there is none yet or the one there may be known to
    others; None when there is none and `create` is false."""
    from jarvis.core.paths import private_dir

    path = secret.path
    try:
        private_dir(path.parent)
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise UserError(f"cannot use {path.parent} for {secret.what}: {exc.strerror or exc}"
                        + (f"; {secret.fix}" if secret.fix else "")) from None
    if info is not None:
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            raise UserError(f"{path} is not a file of yours (owner uid {info.st_uid}); "
                            f"{secret.remedy}")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            if secret.on_replace is not None:
                secret.on_replace(path, mode)
        else:
            text = _read(secret)
            if text is not None:
                return text
    if not create:
        return None
    return _write_new(secret, replace=info is not None)


def _read(secret: SecretFile) -> str | None:
    try:
        fd = os.open(secret.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as fh:
        text = fh.read(MAX_CHARS).strip()
    return text if secret.valid.fullmatch(text) else None


def _write_new(secret: SecretFile, replace: bool) -> str:
    path = secret.path
    value = secret.make()
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(value + "\n")
        if replace:
            os.replace(tmp, path)
        else:
            try:
                os.link(tmp, path)  # two processes making the first one share it
            except FileExistsError:
                made = _read(secret)
                if made is None:
                    raise
                value = made
    except OSError as exc:
        raise UserError(f"cannot write {secret.what} {path}: {exc.strerror or exc}"
                        + (f"; {secret.fix}" if secret.fix else "")) from None
    finally:
        tmp.unlink(missing_ok=True)
    return value
