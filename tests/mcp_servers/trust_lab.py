"""An MCP server for the trust suites (tests/test_trust_attacks.py, test_trust_utility.py),
written with the official SDK and started as a subprocess over stdio.

    python trust_lab.py --page FILE --record FILE

- tool `page` returns the text of --page (a source: whatever instructions it holds); it says
  readOnlyHint, which counts only when the person marks the server trusted;
- resource `lab://page` is the same text (a source through mcp_read_resource);
- tool `store(data)` appends `data` to --record (a sink: an MCP tool without annotations,
  so by the protocol's defaults destructive and open-world); `--store-description FILE`
  gives it that description instead (a poisoned tool description).

Over stdio by default; `--http PORT_FILE` serves streamable HTTP on a free loopback port
(written to PORT_FILE), so one server can serve a whole test module.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("--page", required=True)
parser.add_argument("--record", required=True)
parser.add_argument("--store-description")
parser.add_argument("--http")
opts = parser.parse_args()
STORE_DESCRIPTION = (Path(opts.store_description).read_text(encoding="utf-8")
                     if opts.store_description else "Store a note on the lab server.")

app = MCPServer("lab")


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
def page() -> str:
    """Today's briefing page."""
    return Path(opts.page).read_text(encoding="utf-8")


@app.tool(description=STORE_DESCRIPTION)
def store(data: str) -> str:
    with open(opts.record, "a", encoding="utf-8") as fh:
        fh.write(data + "\n")
    return "stored"


@app.resource("lab://page", name="page", description="Today's briefing page.",
              mime_type="text/plain")
def page_resource() -> str:
    return Path(opts.page).read_text(encoding="utf-8")


def serve_http(port_file: str) -> None:
    import asyncio
    import os
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # before the port file appears: a client reading it connects at once
    server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(host="127.0.0.1"),
                                           log_level="warning"))
    with open(port_file + ".tmp", "w") as fh:
        fh.write(str(sock.getsockname()[1]))
    os.replace(port_file + ".tmp", port_file)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    if opts.http:
        serve_http(opts.http)
    else:
        app.run()
