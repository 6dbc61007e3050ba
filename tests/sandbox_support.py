"""Helpers for the sandbox tests: processes seen through /proc (no psutil), and calls made
through the ToolExecutor exactly as a model's would be."""

from __future__ import annotations

import os
import time

from jarvis.core.types import ToolCall, ToolResult
from jarvis.tools.executor import ToolExecutor


def pid_alive(pid: int) -> bool:
    """True for a live process (a zombie not reaped yet counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def parents() -> dict[int, int]:
    """pid -> parent pid of every live process on the host."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            table[int(name)] = int(fields[1])
    return table


def descendants(root: int | None = None) -> set[int]:
    """Every live process below `root` (default: this process), at any depth."""
    root = os.getpid() if root is None else root
    table = parents()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        children = {pid for pid, ppid in table.items() if ppid in frontier and pid not in found}
        found |= children
        frontier = children
    return found


def new_descendants(before: set[int]) -> set[int]:
    """Processes this test started: children of this process not in `before` (a snapshot of
    `descendants()`), with everything below them. Children that earlier tests' processes
    start meanwhile (a session's PostgreSQL forking a backend or an autovacuum worker) are
    not this test's."""
    table = parents()
    me = os.getpid()
    found = {pid for pid, ppid in table.items() if ppid == me and pid not in before}
    frontier = set(found)
    while frontier:
        children = {pid for pid, ppid in table.items() if ppid in frontier and pid not in found}
        found |= children
        frontier = children
    return found


def wait_until_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait for `pids` to end; returns those still alive after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    alive = {p for p in pids if pid_alive(p)}
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = {p for p in alive if pid_alive(p)}
    return alive


def call(executor: ToolExecutor, name: str, code: str) -> ToolResult:
    return executor.execute(ToolCall(id="", name=name, arguments={"code": code}))


# The host uid a sandbox runs as: [sandbox] uid (65534) when jarvis runs as root, else jarvis's
# own (the sandbox tests run as both: see tests/test_sandbox_unprivileged.py).
SANDBOX_HOST_UID = 65534 if os.geteuid() == 0 else os.getuid()


def give_to_sandbox(*paths) -> None:
    """Make folders a writable path for the sandbox: under a root jarvis it writes as
    [sandbox] uid, which must own them; otherwise they are already jarvis's own."""
    for path in paths:
        if os.geteuid() == 0:
            os.chown(path, SANDBOX_HOST_UID, SANDBOX_HOST_UID)
