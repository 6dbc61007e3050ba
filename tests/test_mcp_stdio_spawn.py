"""How a stdio MCP server is started: leader of its own process group always (what is signalled
to end its tree); a session of its own only when jarvis has a controlling terminal, so the
server can never open that terminal; otherwise in jarvis's session (each session is a
scheduling group of its own on Linux, which delayed every answer on a busy machine)."""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys

from jarvis.mcp.stdio import has_controlling_terminal, spawn

SLEEPER = [sys.executable, "-c", "import sys; sys.stdin.read()"]

# Run under a pseudo-terminal that is the child's controlling terminal: spawn a server, then
# report (own sid, server's sid, server's pgid, server pid, whether the server can open it).
UNDER_TERMINAL = """
import asyncio, os, subprocess, sys
from jarvis.mcp.stdio import has_controlling_terminal, spawn

async def main():
    # The probe waits for its stdin to close: once it exits, asyncio reaps it at once and
    # its session and group can no longer be asked for.
    probe = ("import os, sys\\ntry:\\n    os.close(os.open('/dev/tty', os.O_RDWR))\\n"
             "    print('opened', flush=True)\\nexcept OSError:\\n"
             "    print('refused', flush=True)\\nsys.stdin.read()\\n")
    proc = await spawn([sys.executable, "-c", probe], dict(os.environ), subprocess.DEVNULL, None)
    out = await proc.stdout.receive()
    print(has_controlling_terminal(), os.getsid(0), os.getsid(proc.pid), os.getpgid(proc.pid),
          proc.pid, out.decode().strip(), flush=True)
    await proc.stdin.aclose()
    await proc._process.wait()

asyncio.run(main())
"""


def test_without_a_terminal_the_server_leads_its_own_group_in_our_session():
    async def run() -> tuple[int, int, int]:
        proc = await spawn(SLEEPER, dict(os.environ), subprocess.DEVNULL, None)
        try:
            return os.getsid(proc.pid), os.getpgid(proc.pid), proc.pid
        finally:
            await proc.stdin.aclose()
            await proc._process.wait()

    assert not has_controlling_terminal()  # the test run has none (CI, pytest's capture)
    sid, pgid, pid = asyncio.run(run())
    assert pgid == pid  # its own group: the SDK's terminate_posix_process_tree signals it
    assert sid == os.getsid(0)  # our session


def test_with_a_terminal_the_server_gets_a_session_and_cannot_open_the_terminal():
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        os.execve(sys.executable, [sys.executable, "-c", UNDER_TERMINAL], dict(os.environ))
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, output
    line = output.decode().strip().splitlines()[-1].split()
    terminal, own_sid, server_sid, server_pgid, server_pid, probe = line
    assert terminal == "True"
    assert server_sid == server_pid != own_sid  # a session of its own ...
    assert server_pgid == server_pid
    assert probe == "refused"  # ... so it has no controlling terminal to write to
