"""Where jarvis keeps its state, JARVIS_HOME (default ~/.jarvis), and keeping it private.

Everything jarvis keeps there (memory, scheduler and run log databases with their -wal and
-shm files, MCP logs and caches, the serve token) is the user's private data: other local
users must not read it, whatever the umask says. So folders are created 0700 and files 0600
(`private_dir`, `private_file`, `open_private`, `private_database`); the modes are set
explicitly, never left to the umask (`umask 000` would make a new SQLite file 0666). A file
or folder jarvis owns that is already open to others (made by an older jarvis, or by hand) is
tightened when jarvis opens it, with a warning on stderr; one owned by another user cannot be
changed and gets a warning (`jarvis doctor` lists both).

SQLite gives a database's -wal, -shm and -journal files the mode of the database file, so a
database created 0600 keeps them 0600; those of an existing database are tightened with it.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

DIR_MODE = 0o700
FILE_MODE = 0o600
# Folders above JARVIS_HOME that jarvis has to create: not private (they may be shared), but
# never writable by others, whatever the umask.
PARENT_MODE = 0o755
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")
SQLITE_HEADER = b"SQLite format 3\x00"

log = logging.getLogger("jarvis")
_warned: set[str] = set()


def jarvis_home(create: bool = False) -> Path:
    """The state folder: $JARVIS_HOME, or ~/.jarvis (created private with `create`)."""
    home = Path(os.environ.get("JARVIS_HOME") or Path.home() / ".jarvis").expanduser()
    if create:
        try:
            private_dir(home)
        except OSError as exc:  # a file in the way, no permission, ...
            from jarvis.errors import ConfigError

            raise ConfigError(f"cannot use {home} as the jarvis state folder: {exc}; point "
                              "JARVIS_HOME at a writable folder") from exc
    return home


def state_path(configured: str | os.PathLike[str] | None, default_name: str) -> Path:
    """A state file: the configured path if given, else JARVIS_HOME/default_name."""
    if configured:
        return Path(configured).expanduser()
    return jarvis_home(create=True) / default_name


def private_dir(folder: str | os.PathLike[str]) -> Path:
    """Make `folder` exist for jarvis's state: created 0700 (missing parents too inside
    JARVIS_HOME, 0755 above it); an
    existing one jarvis owns is tightened to 0700 when it is JARVIS_HOME or inside it (a
    folder elsewhere that the user named may be shared on purpose)."""
    folder = Path(folder)
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for step in reversed(missing):
        mode = DIR_MODE if step == folder or _in_home(step) else PARENT_MODE
        try:
            os.mkdir(step, mode)
        except FileExistsError:  # another process made it first
            continue
        os.chmod(step, mode)  # exactly this: the umask only ever takes bits away
    if not folder.is_dir():
        raise NotADirectoryError(f"{folder} is not a folder")
    if not missing and _in_home(folder):
        tighten(folder)
    return folder


def private_file(path: str | os.PathLike[str]) -> Path:
    """Create `path` empty with mode 0600 if it does not exist, else tighten it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     FILE_MODE)
    except FileExistsError:
        tighten(path)
        return path
    try:
        os.fchmod(fd, FILE_MODE)
    finally:
        os.close(fd)
    return path


def open_private(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> IO[Any]:
    """open() for a file of jarvis's state (a log, a cache): a new file is 0600, an existing
    one is tightened; mode "w", "a" or "x" (with "b" for bytes)."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if "x" in mode:
        flags |= os.O_EXCL
    elif "a" in mode:
        flags |= os.O_APPEND
    else:
        flags |= os.O_TRUNC
    fd = os.open(path, flags, FILE_MODE)
    try:
        info = os.fstat(fd)
        if stat.S_IMODE(info.st_mode) & 0o077 and info.st_uid == os.geteuid():
            _warn_open(path, stat.S_IMODE(info.st_mode), FILE_MODE)
            os.fchmod(fd, FILE_MODE)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def private_database(path: str | os.PathLike[str]) -> Path:
    """Before a SQLite database is opened: its folder exists (private in JARVIS_HOME), the
    file exists 0600 (so SQLite gives its -wal and -shm files 0600 too), and the side files
    of an existing database are tightened."""
    path = Path(path)
    if str(path) in ("", ":memory:") or str(path).startswith("file:"):
        return path
    if path.parent != path:
        private_dir(path.parent)
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    if (info is not None and stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
            and not stat.S_IMODE(info.st_mode) & 0o077):
        # Private already: not opened here. Closing any descriptor of a database file drops
        # every POSIX lock this process holds on it, so a connection already open in this
        # process (a daemon's store while its run opens another) would lose its locks, and
        # another process could checkpoint and remove the WAL under it (stale reads).
        for suffix in SQLITE_SIDE_FILES:
            tighten(Path(str(path) + suffix))
        return path
    try:
        with open(path, "rb") as fh:
            header = fh.read(16)
    except FileNotFoundError:
        header = b""
    except OSError:
        return path  # a folder or an unreadable file: opening it gives the clear error
    if header not in (b"", SQLITE_HEADER):
        return path  # not a database: opening it gives the clear error, nothing is changed
    private_file(path)
    for suffix in SQLITE_SIDE_FILES:
        side = Path(str(path) + suffix)
        if side.exists():
            tighten(side)
    return path


def tighten(path: str | os.PathLike[str]) -> bool:
    """Take group and other permissions off a file or folder jarvis owns (not through a
    symlink), with a warning; warn about one owned by someone else. True if it was open."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except OSError:
        return False
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode) or not mode & 0o077:
        return False
    if info.st_uid != os.geteuid():
        if str(path) not in _warned:
            _warned.add(str(path))
            log.warning("jarvis: warning: %s is owned by another user (uid %d) and open to "
                        "others (mode %04o); jarvis cannot make it private: move it away or "
                        "fix its owner", path, info.st_uid, mode)
        return True
    private = mode & ~0o077
    try:
        os.chmod(path, private, follow_symlinks=False)
    except (OSError, NotImplementedError):
        return True
    _warn_open(path, mode, private)
    return True


def _warn_open(path: Path, was: int, now: int) -> None:
    if str(path) in _warned:
        return
    _warned.add(str(path))
    log.warning("jarvis: warning: %s was open to other users (mode %04o); it holds your private "
                "data, so it is now %04o", path, was, now)


def _in_home(folder: Path) -> bool:
    home = os.path.abspath(jarvis_home())
    here = os.path.abspath(folder)
    return here == home or here.startswith(home.rstrip("/") + "/")


def exposed(home: Path | None = None) -> Iterator[tuple[Path, int, bool]]:
    """(path, mode, owned by this user) of everything in JARVIS_HOME (and itself) that other
    users may read, write or enter; symlinks are not followed. For `jarvis doctor`."""
    home = home or jarvis_home()
    if not home.exists():
        return
    me = os.geteuid()
    stack = [home]
    while stack:
        path = stack.pop()
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            continue
        if stat.S_IMODE(info.st_mode) & 0o077:
            yield path, stat.S_IMODE(info.st_mode), info.st_uid == me
        if stat.S_ISDIR(info.st_mode):
            try:
                stack.extend(sorted(path.iterdir(), reverse=True))
            except OSError:
                continue
