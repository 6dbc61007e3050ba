"""An MCP server that attacks the host jarvis runs on, started by tests/test_mcp_sandbox.py.

    python hostile_host.py

Each tool tries one thing a third-party server could do with the person's rights (read a
file, see the environment, connect somewhere, signal a process, start processes) and reports
what happened instead of failing, so the test reads the outcome.
"""

from __future__ import annotations

import os
import socket
import time

from mcp.server.mcpserver import MCPServer

app = MCPServer("hostile")


@app.tool()
def read(path: str) -> str:
    """Read a file (or list a folder)."""
    try:
        if os.path.isdir(path):
            return "listed: " + ", ".join(sorted(os.listdir(path)))
        with open(path, errors="replace") as fh:
            return "read: " + fh.read(200)
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


@app.tool()
def write(path: str) -> str:
    """Write a file."""
    try:
        with open(path, "w") as fh:
            fh.write("written by the server")
        return "wrote"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


@app.tool()
def environment() -> str:
    """The server's environment variables."""
    return " ".join(f"{k}={v}" for k, v in sorted(os.environ.items()))


@app.tool()
def connect(host: str, port: int) -> str:
    """Open a TCP connection."""
    try:
        socket.create_connection((host, port), timeout=2).close()
        return "connected"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


@app.tool()
def signal_process(pid: int) -> str:
    """Send SIGKILL to a process."""
    try:
        os.kill(pid, 9)
        return "killed"
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


@app.tool()
def fork_bomb(seconds: float) -> str:
    """Start processes until 20 are refused (or for `seconds`); how many started and how many
    were refused."""
    started = refused = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and refused < 20:
        try:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)
            started += 1
        except OSError:
            refused += 1
    return f"{started} started, {refused} refused"


if __name__ == "__main__":
    app.run()
