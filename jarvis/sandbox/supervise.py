"""What jarvis does to its sandboxes' processes from outside: start them on one long-lived
thread, read their CPU and children from /proc, set another uid's CPU limit, wait for them to
end (a pidfd, not a sleep loop), and keep jarvis itself out of their reach.
"""

from __future__ import annotations

import ctypes
import math
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_protected = False


def protect_jarvis() -> None:
    """Make this (jarvis) process non-dumpable: no core dumps, and no process of the same
    user can ptrace it or open its /proc/<pid>/mem or environ. Done once, before the first
    sandbox starts, because jarvis holds API keys."""
    global _protected
    if _protected or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    except OSError:
        return
    _protected = True


_spawner: Any = None  # the sandbox thread's job queue
_spawner_pid = 0
_spawner_lock = threading.Lock()


def _serve_spawns(jobs: Any) -> None:
    while True:
        fn, args, reply = jobs.get()
        try:
            reply.put((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
            reply.put((False, exc))


def _on_spawner(fn: Any, *args: Any) -> Any:
    """fn(*args) on jarvis's one long-lived sandbox thread (never the main thread).

    The hand-over is two SimpleQueues (C, no Python-level lock): an exception a signal
    handler raises in the caller (Ctrl-C's KeyboardInterrupt) can land between a Python lock's
    acquire and its `with` block and leave that lock held. A ThreadPoolExecutor's shared
    semaphore left so hung every later sandbox start; here only that one call is lost."""
    global _spawner, _spawner_pid
    import queue

    with _spawner_lock:
        if _spawner is None or _spawner_pid != os.getpid():  # a forked child has no thread
            _spawner = queue.SimpleQueue()
            threading.Thread(target=_serve_spawns, args=(_spawner,), name="jarvis-sandbox",
                             daemon=True).start()
            _spawner_pid = os.getpid()
        jobs = _spawner
    reply: queue.SimpleQueue = queue.SimpleQueue()
    jobs.put((fn, args, reply))
    ok, value = reply.get()
    if not ok:
        raise value
    return value


def spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """Popen on one long-lived thread. A sandbox dies with the thread that started it
    (PR_SET_PDEATHSIG, bwrap --die-with-parent, follow the *thread*), and tool calls run on
    short-lived executor threads: started there, a repl would die after its first call."""
    return _on_spawner(lambda: subprocess.Popen(argv, **kwargs))


_libc: Any = None
# Per-thread setresuid (a raw syscall: glibc's wrapper changes every thread).
_SETRESUID = {"x86_64": 117, "aarch64": 147}


def _prlimit_as_owner(pid: int, uid: int, limits: tuple[int, int]) -> None:
    """RLIMIT_CPU of a sandbox that runs as another host uid (SandboxPolicy.uid), for a root
    jarvis without CAP_SYS_RESOURCE (a container may drop it). The sandbox's user namespace
    is owned by that uid, and the kernel gives a namespace's owner every capability in it,
    CAP_SYS_RESOURCE included: so one thread takes that uid as its *effective* uid only, for
    the prlimit, and switches back.

    Not the real uid: the kernel lets a process signal another whose real or saved uid is its
    own, and while a thread's real uid was 65534, a process of that uid on the host (another
    daemon run as "nobody") could signal, so SIGKILL, jarvis (1 try in 8 while calls ran).
    The real and saved uids stay 0. And on the sandbox thread, never the caller's: an
    exception raised by a signal handler (Ctrl-C's KeyboardInterrupt lands in the main
    thread between any two bytecodes) left the caller with the sandbox's ids for good."""
    _on_spawner(_prlimit_with_euid, pid, uid, limits)


def _prlimit_with_euid(pid: int, uid: int, limits: tuple[int, int]) -> None:
    import platform
    import resource

    global _libc
    machine = platform.machine()
    if machine not in _SETRESUID:
        raise PermissionError(f"cannot set another uid's limits on {machine}")
    libc = _libc = _libc or ctypes.CDLL(None, use_errno=True)
    own = os.geteuid()
    if libc.syscall(_SETRESUID[machine], -1, uid, -1) != 0:
        raise OSError(ctypes.get_errno(), "setresuid")
    try:
        resource.prlimit(pid, resource.RLIMIT_CPU, limits)
    finally:
        # A jarvis thread that stayed the sandbox's uid would be a hole: never go on so.
        if libc.syscall(_SETRESUID[machine], -1, own, -1) != 0:
            os.write(2, b"jarvis: cannot switch a thread back to its own uid; exiting\n")
            os._exit(70)


def _joining(group: Any, then: Any) -> Any:
    """The child's step before exec: join the sandbox's cgroup (as jarvis: a root jarvis's
    sandbox uid could not write there), then `then` (bubblewrap's staging and uid drop)."""
    def preexec() -> None:
        group.join()
        if then is not None:
            then()

    return preexec


def _wait_for(fd: int, events: int, deadline: float) -> bool:
    """True once `fd` is ready for `events` (or hung up), False at `deadline`. poll, not
    select: jarvis serve may hold descriptors past select's 1024."""
    poller = select.poll()
    poller.register(fd, events)
    remaining = deadline - time.monotonic()
    return remaining > 0 and bool(poller.poll(max(1, math.ceil(remaining * 1000))))


def cpu_seconds_of(pid: int) -> float:
    """User + system CPU of process `pid`, all its threads together (from /proc)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return stat_cpu_seconds(f.read())


def stat_cpu_seconds(stat: bytes) -> float:
    """User + system CPU in a /proc/<pid>/stat line."""
    fields = stat.rsplit(b")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: scan /proc
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as f:
                        if int(f.read().rsplit(b")", 1)[1].split()[1]) == pid:
                            found.append(int(name))
                except (OSError, ValueError, IndexError):
                    continue
        return found


def wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to `timeout` s for `proc` to end, and reap it; False if it is still running.
    On a pidfd (poll wakes when the process ends): Popen.wait(timeout) sleep-polls, which
    cost every sandbox's teardown ~4 ms."""
    if proc.poll() is not None:
        return True
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # before Linux 5.3: Popen's own polling
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        ready = _wait_for(fd, select.POLLIN, time.monotonic() + timeout)
    finally:
        os.close(fd)
    if not ready:
        return proc.poll() is not None
    proc.wait()
    return True
