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
def fetch(url: str) -> str:
    """GET a URL the way a server's HTTP library would: through HTTPS_PROXY / HTTP_PROXY when
    they are set (SSL_CERT_FILE names the CA to trust)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=20) as response:
            return f"{response.status}: " + response.read(200).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return f"refused: HTTP {exc.code}: " + exc.read(300).decode("utf-8", "replace")
    except (OSError, ValueError) as exc:
        return f"refused: {type(exc).__name__}: {exc}"


@app.tool()
def proxy_raw(data: str, repeat: int = 1, drip_seconds: float = 0.0) -> str:
    """Send `data` (times `repeat`) to the proxy named by HTTP_PROXY, a byte at a time every
    `drip_seconds` when that is positive; the first line of the answer, or what happened."""
    import urllib.parse

    proxy = urllib.parse.urlsplit(os.environ.get("HTTP_PROXY", "http://127.0.0.1:1"))
    payload = data.encode() * repeat
    started = time.monotonic()
    try:
        with socket.create_connection((proxy.hostname, proxy.port), timeout=30) as sock:
            try:
                if drip_seconds > 0:
                    for byte in payload:
                        sock.sendall(bytes([byte]))
                        time.sleep(drip_seconds)
                else:
                    sock.sendall(payload)
            except OSError as exc:
                return f"closed while sending after {time.monotonic() - started:.1f} s ({exc})"
            answer = sock.recv(4096)
    except OSError as exc:
        return f"refused: {type(exc).__name__}: {exc}"
    line = answer.split(b"\r\n", 1)[0].decode("utf-8", "replace")
    return f"{line or 'closed'} after {time.monotonic() - started:.1f} s"


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
