"""An MCP server (official SDK) with what goes beyond plain text tools, for the MCP tests.

    python features.py [--http PORT_FILE] [--sse PORT_FILE] [--port N] [--junk]

Images (a filesystem-style `read_media_file` that repeats its content as structured content,
like @modelcontextprotocol/server-filesystem), resource links and embedded blobs, resources,
resource templates and prompts, progress notifications, and tools that need the client's
sampling, elicitation and roots. Over stdio by default; --http serves streamable HTTP and
--sse the older HTTP+SSE transport on a free loopback port (written to PORT_FILE); --junk
writes lines that are not JSON-RPC on stdout before and between answers.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import sys
import warnings
from typing import Annotated

from mcp.server.elicitation import ElicitationResult
from mcp.server.mcpserver import Context, Elicit, ListRoots, MCPServer, Resolve, Sample
from mcp.types import (
    BlobResourceContents,
    CallToolResult,
    CreateMessageResult,
    EmbeddedResource,
    ImageContent,
    ListRootsResult,
    ResourceLink,
    SamplingMessage,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel, Field

warnings.simplefilter("ignore")  # sampling and roots are deprecated at 2026-07-28; still used

# A 64x64 PNG of about 4 KB (random pixels do not compress): big enough that pasting it as
# base64 into the model's text would show.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
BIG = PNG + os.urandom(4000)  # not a valid PNG beyond the header; only its size matters here

parser = argparse.ArgumentParser()
parser.add_argument("--http", default=None)
parser.add_argument("--sse", default=None)
parser.add_argument("--junk", action="store_true")
parser.add_argument("--port", type=int, default=0, help="over HTTP: this port (0: a free one)")
parser.add_argument("--token", default=None, help="over HTTP: require 'Authorization: Bearer TOKEN'")
opts = parser.parse_args()

app = MCPServer("features")


def junk(text: str) -> None:
    if opts.junk:
        os.write(1, f"{text}\n".encode())


@app.tool()
def read_media_file(path: str) -> CallToolResult:
    """Read an image file (base64 image content, repeated as structured content)."""
    data = base64.b64encode(BIG).decode()
    junk("this line is not JSON-RPC")
    item = {"type": "image", "data": data, "mimeType": "image/png"}
    return CallToolResult(content=[ImageContent(type="image", data=data, mime_type="image/png")],
                          structured_content={"content": [item]})


@app.tool()
def attachments() -> CallToolResult:
    """A resource link and an embedded binary resource."""
    blob = base64.b64encode(b"\x00\x01binary" * 50).decode()
    return CallToolResult(content=[
        TextContent(type="text", text="two attachments"),
        ResourceLink(type="resource_link", name="readme", uri="notes://readme"),
        EmbeddedResource(type="resource", resource=BlobResourceContents(
            uri="data://blob", blob=blob, mime_type="application/octet-stream")),
    ])


@app.tool()
def report() -> CallToolResult:
    """A long report, embedded as a text resource (the same text as notes://huge)."""
    return CallToolResult(content=[
        TextContent(type="text", text="the report is attached"),
        EmbeddedResource(type="resource", resource=TextResourceContents(
            uri="notes://huge", text=huge(), mime_type="text/plain")),
    ])


@app.resource("notes://readme", name="readme", description="The read-me note.",
              mime_type="text/plain")
def readme() -> str:
    return "Read me first. " * 10


@app.resource("notes://huge", name="huge", mime_type="text/plain")
def huge() -> str:
    return "x" * 300_000


@app.resource("data://blob", name="blob", mime_type="application/octet-stream")
def blob() -> bytes:
    return b"\x00\x01binary" * 50


@app.resource("images://pixel", name="pixel", mime_type="image/png")
def pixel() -> bytes:
    return PNG


@app.resource("notes://item/{item_id}", name="item", mime_type="text/plain")
def item(item_id: str) -> str:
    return f"item {item_id}"


@app.prompt(description="Greet someone by name.")
def greet(name: str) -> str:
    return f"Please greet {name} warmly."


@app.tool()
async def slow(steps: int, delay: float, ctx: Context) -> str:
    """Report progress `steps` times, `delay` seconds apart, then answer."""
    for i in range(steps):
        await asyncio.sleep(delay)
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
    return f"done after {steps} steps"


def _sample(question: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=question))],
                  max_tokens=50)


@app.tool()
def ask_model(question: str, answer: Annotated[CreateMessageResult, Resolve(_sample)]) -> str:
    """Ask the client's model (MCP sampling)."""
    return f"model said: {answer.content.text}"


class Answer(BaseModel):
    colour: str = Field(description="your favourite colour")


def _ask() -> Elicit[Answer]:
    return Elicit("What is your favourite colour?", Answer)


@app.tool()
def ask_user(answer: Annotated[ElicitationResult[Answer], Resolve(_ask)]) -> str:
    """Ask the user a question (MCP elicitation)."""
    if answer.action == "accept":
        return f"user said: {answer.data.colour}"
    return f"user {answer.action}d"


def _roots() -> ListRoots:
    return ListRoots()


@app.tool()
def show_roots(roots: Annotated[ListRootsResult, Resolve(_roots)]) -> str:
    """The client's roots (MCP roots)."""
    return "\n".join(str(r.uri) for r in roots.roots)


def require_token(inner, token: str):
    """ASGI middleware: 401 with a Bearer challenge unless the request carries the token."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"www-authenticate", b'Bearer realm="features"'), (b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await inner(scope, receive, send)

    return guarded


def serve_http(port_file: str, sse: bool) -> None:
    import socket

    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A server started again on the port of one that was killed (a restart) can bind it.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", opts.port))
    # Listening before the port file appears: a client that reads it connects at once (a
    # bound socket that is not yet listening refuses, and uvicorn listens only once serving).
    sock.listen(128)
    port = sock.getsockname()[1]
    starlette_app = app.sse_app(host="127.0.0.1") if sse else app.streamable_http_app(host="127.0.0.1")
    if opts.token:
        starlette_app = require_token(starlette_app, opts.token)
    server = uvicorn.Server(uvicorn.Config(starlette_app, log_level="warning"))
    with open(port_file + ".tmp", "w") as fh:
        fh.write(str(port))
    os.replace(port_file + ".tmp", port_file)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    print("features: starting", file=sys.stderr, flush=True)
    if opts.http or opts.sse:
        serve_http(opts.http or opts.sse, sse=bool(opts.sse))
    else:
        junk("junk before the first message")
        app.run()
