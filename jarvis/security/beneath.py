"""Opening a file beneath a folder so that no symlink on the way is followed and nothing
outside the folder can be reached, whatever changes between a check and the open.

`open_beneath(root, parts)` uses openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
RESOLVE_NO_MAGICLINKS) from the folder's descriptor where the kernel has it (Linux 5.6+;
probed once at run time, ENOSYS or a seccomp filter's EPERM mean no), else walks the
components one by one from that descriptor, each folder opened with O_NOFOLLOW | O_DIRECTORY
and the file with O_NOFOLLOW | O_NONBLOCK. The folder itself is opened the same way from /
(no symlink anywhere on its resolved path), so swapping a folder *above* it cannot move the
read either. A symlink met on the way is PathChanged, never followed. The path policy
(`jarvis.security.paths`) decides *what* may be opened; this module is *how*.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from pathlib import Path
from typing import Any

# openat2(2): the syscall number is the same on the architectures listed (it was added after
# the syscall tables were unified); elsewhere the component walk is used.
_OPENAT2_NR = {"x86_64": 437, "amd64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437,
               "ppc64le": 437, "s390x": 437}
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_AT_FDCWD = -100


class NotAFile(ValueError):
    """The path is a folder, a FIFO, a socket or a device."""


class PathChanged(ValueError):
    """A component of the path changed between the check and the open."""


# getattr: the walk must still import where a flag is missing (O_NONBLOCK keeps a FIFO from
# blocking the open; O_NOCTTY keeps a terminal device from becoming ours).
_FILE_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_NOFOLLOW", 0))
_DIR_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
              | getattr(os, "O_NOFOLLOW", 0))
_probe_lock = threading.Lock()
_openat2_ok: bool | None = None


_ctypes_parts: tuple[Any, Any, Any] | None = None


def _machine() -> str:
    return os.uname().machine.lower()


def _libc() -> tuple[Any, Any, Any]:
    """(ctypes, struct open_how, syscall), loaded on first use: ctypes costs milliseconds of
    import time that `import jarvis` should not pay."""
    global _ctypes_parts
    if _ctypes_parts is None:
        import ctypes

        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                        ("resolve", ctypes.c_uint64)]

        call = ctypes.CDLL(None, use_errno=True).syscall
        call.restype = ctypes.c_long
        _ctypes_parts = (ctypes, OpenHow, call)
    return _ctypes_parts


def _openat2(dirfd: int, path: str, flags: int,
             resolve: int = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
             ) -> int:
    ctypes, open_how, call = _libc()
    how = open_how(flags, 0, resolve)
    fd = call(ctypes.c_long(_OPENAT2_NR[_machine()]), ctypes.c_int(dirfd), os.fsencode(path),
              ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


def openat2_supported() -> bool:
    """Whether this kernel (and seccomp filter) lets us call openat2; probed once."""
    global _openat2_ok
    if _openat2_ok is None:
        with _probe_lock:
            if _openat2_ok is None:
                _openat2_ok = _probe()
    return _openat2_ok


def _probe() -> bool:
    if not sys.platform.startswith("linux") or _machine() not in _OPENAT2_NR:
        return False
    try:
        fd = _openat2(_AT_FDCWD, ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        # ENOSYS: kernel before 5.6; EPERM/EACCES: a seccomp filter that does not know it.
        if exc.errno in (errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL, errno.E2BIG):
            return False
        return True  # it exists; the probe itself failed for another reason
    except (AttributeError, TypeError):
        return False
    os.close(fd)
    return True


def open_beneath(root: Path, parts: tuple[str, ...], *, use_openat2: bool | None = None) -> int:
    """Open root/parts for reading without following any symlink on the way and without
    leaving `root`; return the descriptor. A symlink (or a `..`) on the way raises
    PathChanged; a missing component raises FileNotFoundError."""
    if not parts:
        raise NotAFile(f"{root} is a directory")
    if any(p in ("", ".", "..") or "/" in p for p in parts):
        raise PathChanged(f"{'/'.join(parts)} is not a plain path below {root}")
    if use_openat2 is None:
        use_openat2 = openat2_supported()
    root_fd = _open_root(root, use_openat2)
    try:
        if use_openat2:
            try:
                return _openat2(root_fd, "/".join(parts), _FILE_FLAGS)
            except OSError as exc:
                raise _translate(exc, root, parts) from None
        return _walk_open(root_fd, root, parts)
    finally:
        os.close(root_fd)


def _open_root(root: Path, use_openat2: bool) -> int:
    """The allowed folder's descriptor, opened without following a symlink anywhere on its
    path: it was resolved when the policy was made, so a symlink on it now means a folder
    above it was swapped (by anyone who can write there) to move the read to a look-alike
    tree elsewhere. O_NOFOLLOW alone would guard only its last component."""
    text = os.fspath(root)
    if not os.path.isabs(text):
        raise ValueError(f"{text} is not an absolute folder")
    if use_openat2:
        try:
            return _openat2(_AT_FDCWD, text, _DIR_FLAGS,
                            _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            raise _translate_root(exc, text) from None
    fd = os.open("/", _DIR_FLAGS)
    try:
        for part in (p for p in text.split("/") if p):
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _translate_root(exc, text) from None
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _translate_root(exc: OSError, root: str) -> OSError | ValueError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        return PathChanged(f"the allowed folder {root} changed (a symlink appeared on its "
                           f"path); not read")
    exc.filename = root
    return exc


def _walk_open(root_fd: int, root: Path, parts: tuple[str, ...]) -> int:
    fd = root_fd
    try:
        for part in parts[:-1]:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _translate(exc, root, parts) from None
            if fd != root_fd:
                os.close(fd)
            fd = nxt
        try:
            return os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise _translate(exc, root, parts) from None
    finally:
        if fd != root_fd:
            os.close(fd)


def _translate(exc: OSError, root: Path, parts: tuple[str, ...]) -> OSError | ValueError:
    path = str(root.joinpath(*parts))
    if exc.errno in (errno.ELOOP, errno.EXDEV, errno.EAGAIN, errno.ENOTDIR):
        # A symlink met where the check saw a plain folder or file: the tree changed between
        # the check and the open (or someone is racing us). Refused, never followed.
        return PathChanged(f"{path} changed while it was being opened (a symlink appeared on "
                           f"the way); not read")
    exc.filename = path
    return exc
