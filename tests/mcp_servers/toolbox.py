"""A small MCP server written with the official SDK, started by the MCP tests as a subprocess.

    python toolbox.py [--label NAME] [--http PORT_FILE] [--fail-start] [--touch FILE]

Over stdio by default; with --http it serves streamable HTTP on a free loopback port and
writes the port to PORT_FILE. It prints noise on stderr on purpose (a client must not mix
that up with the protocol on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import subprocess
import sys
import time

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.types import ToolAnnotations
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

# A 1x1 PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

parser = argparse.ArgumentParser()
parser.add_argument("--label", default="toolbox")
parser.add_argument("--http", default=None)
parser.add_argument("--fail-start", action="store_true")
parser.add_argument("--touch", default=None, help="append a line to this file when starting")
opts = parser.parse_args()

if opts.touch:
    with open(opts.touch, "a") as fh:
        fh.write(f"{os.getpid()}\n")

print(f"{opts.label}: starting up, this line is stderr noise", file=sys.stderr, flush=True)
if opts.fail_start:
    print(f"{opts.label}: cannot open the database, giving up", file=sys.stderr, flush=True)
    sys.exit(3)

app = MCPServer(opts.label)


@app.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def search(query: str) -> str:
    """Search this server's (tiny) index."""
    return f"{opts.label} result for {query}"


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def delete_everything(confirm_phrase: str) -> str:
    """Pretend to delete everything."""
    return "deleted"


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def picture() -> Image:
    """Return a tiny PNG image."""
    return Image(data=PNG, format="png")


@app.tool()
def fail(message: str) -> str:
    """Fail with the given message (an isError result)."""
    raise ValueError(message)


@app.tool()
def crash() -> str:
    """Kill the server process in the middle of the call."""
    print(f"{opts.label}: crashing now", file=sys.stderr, flush=True)
    os._exit(7)


@app.tool()
async def hang(seconds: float = 3600) -> str:
    """Never answer (within any sane timeout)."""
    await asyncio.sleep(seconds)
    return "woke up"


_meetings: dict[str, tuple[list[int], asyncio.Event]] = {}


@app.tool()
async def meet(key: str, parties: int) -> str:
    """Wait until `parties` calls with this key are in progress at once (at most 10 s)."""
    arrived, everyone = _meetings.setdefault(key, ([0], asyncio.Event()))
    arrived[0] += 1
    if arrived[0] >= parties:
        everyone.set()
    try:
        await asyncio.wait_for(everyone.wait(), 10)
    except TimeoutError:
        return f"alone: {arrived[0]} of {parties} arrived"
    return "met"


@app.tool()
def sleep_ms(ms: int) -> str:
    """Sleep for `ms` milliseconds, then answer."""
    time.sleep(ms / 1000)
    return "slept"


@app.tool()
def spawn_child() -> int:
    """Start a long-running child process and return its pid."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    return child.pid


@app.tool()
def getenv(name: str) -> str:
    """The value of an environment variable of the server process ('' when unset)."""
    return os.environ.get(name, "")


@app.tool()
def echo_meta(ctx: Context) -> str:
    """The request's `_meta` as JSON: what the client sent beside the arguments."""
    import json

    meta = ctx.request_context.meta or {}
    if hasattr(meta, "model_dump"):
        meta = meta.model_dump(by_alias=True, exclude_none=True)
    return json.dumps(dict(meta), default=str)


@app.tool()
def pid() -> int:
    """The server's process id."""
    return os.getpid()


@app.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a new tool called `name` and tell clients the tool list changed."""

    def extra() -> str:
        return f"I am {name}"

    app.add_tool(extra, name=name, description=f"Added at run time: {name}")
    await ctx.notify_tools_changed()  # 2026 protocol: to `subscriptions/listen` streams
    if ctx.request_context.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        await ctx.request_context.session.send_tool_list_changed()  # handshake era
    return "grown"


def serve_http(port_file: str) -> None:
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port file appears: a client reading it connects at once
    port = sock.getsockname()[1]
    starlette_app = app.streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(starlette_app, log_level="warning"))
    tmp = port_file + ".tmp"
    with open(tmp, "w") as fh:
        fh.write(str(port))
    os.replace(tmp, port_file)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    if opts.http:
        serve_http(opts.http)
    else:
        app.run()
