"""Ending a stdio server's whole process tree.

The SDK stops the server it started (stdin closed, then SIGTERM/SIGKILL to its process group),
but a server that exits cleanly can leave children behind, and a child may start its own
session. Every stdio server gets a unique marker in its environment, which its descendants
inherit; after the SDK is done, any process still carrying the marker is killed. Linux only
(it reads /proc); elsewhere this is a no-op and the SDK's own shutdown is what you get.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

MARKER_VAR = "JARVIS_MCP_SERVER_TOKEN"

# Tokens of the stdio servers started by this process whose trees were not swept yet: at exit,
# whatever still carries one is killed, even when a polite close ran out of time.
LIVE: set[str] = set()


def new_token() -> str:
    token = uuid.uuid4().hex
    LIVE.add(token)
    return token


def sweep_live(grace: float = 0.3) -> list[int]:
    """Kill every process still carrying a token of this process (at exit)."""
    killed: list[int] = []
    for token in list(LIVE):
        killed.extend(kill_tree(token, grace))
        LIVE.discard(token)
    return killed


def pids_with_token(token: str) -> list[int]:
    """Processes whose environment carries MARKER_VAR=token (excluding this one)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    needle = f"{MARKER_VAR}={token}".encode()
    found = []
    own = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\x00") and not _is_zombie(entry):
            found.append(int(entry.name))
    return found


def _is_zombie(entry: Path) -> bool:
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def kill_tree(token: str, grace: float = 0.5) -> list[int]:
    """SIGTERM every process carrying `token`, SIGKILL the ones alive after `grace` seconds.
    Returns the pids that were signalled."""
    pids = pids_with_token(token)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    remaining = pids
    while remaining and time.monotonic() < deadline:
        time.sleep(0.02)
        remaining = [p for p in remaining if _alive(p)]
    for pid in remaining:
        _signal(pid, signal.SIGKILL)
    return pids


async def akill_tree(token: str, grace: float = 0.5) -> list[int]:
    """`kill_tree` for an event loop: the /proc scan is quick, the grace period is awaited
    (no worker thread: this also runs while the interpreter exits)."""
    import asyncio

    LIVE.discard(token)
    pids = pids_with_token(token)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    remaining = pids
    while remaining and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        remaining = [p for p in remaining if _alive(p)]
    for pid in remaining:
        _signal(pid, signal.SIGKILL)
    return pids


def _alive(pid: int) -> bool:
    entry = Path(f"/proc/{pid}")
    return entry.exists() and not _is_zombie(entry)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
