"""Cache files of jarvis's state under $JARVIS_HOME/cache/NAME: written atomically with mode
0600 (a temporary file renamed over the entry), read back only when this user alone can write
them. A cache is an optimisation: a failure to write means no cache next time, and a missing,
unreadable or untrusted file reads as None (the caller does the real work)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from jarvis.core.paths import jarvis_home, tighten


def cache_folder(name: str) -> Path:
    return jarvis_home() / "cache" / name


def read(folder: Path, filename: str) -> bytes | None:
    """The bytes of `folder/filename`, or None: missing, unreadable, or not private to this
    user (then it is made private, with a warning, and is rewritten by the next write)."""
    path = folder / filename
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            tighten(path)
            return None  # not ours alone: never trusted
        for held in (folder.parent, folder):  # private like the rest of JARVIS_HOME
            tighten(held)
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            return handle.read()
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def write(folder: Path, filename: str, body: bytes, keep: int) -> None:
    """Write `folder/filename` atomically (0600) and keep only the `keep` newest files with
    its suffix; an error only means no cache next time."""
    from jarvis.core.paths import private_dir

    target = folder / filename
    temp = folder / f".{filename}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        private_dir(folder)
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        os.replace(temp, target)
        _prune(folder, target, keep)
    except OSError:
        try:
            temp.unlink()
        except OSError:
            pass


def _prune(folder: Path, keep_path: Path, keep: int) -> None:
    entries = []
    for path in folder.glob(f"*{keep_path.suffix}"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:
            continue
    entries.sort(reverse=True)
    for _, path in entries[keep:]:
        if path != keep_path:
            try:
                path.unlink()
            except OSError:
                pass
