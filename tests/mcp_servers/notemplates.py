"""An MCP server (official SDK, low-level Server) that announces resources but has no
resources/templates/list, as a server may (the method is optional): a client asking gets
"Method not found". Over stdio.
"""

from __future__ import annotations

import anyio
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.types import ListResourcesResult, ReadResourceResult, Resource, TextResourceContents


async def list_resources(ctx, params):
    return ListResourcesResult(resources=[Resource.model_validate(
        {"uri": "notes://only", "name": "only", "mimeType": "text/plain"})])


async def read_resource(ctx, params):
    return ReadResourceResult(contents=[TextResourceContents(uri=str(params.uri), text="the note",
                                                             mime_type="text/plain")])


app = Server("notemplates", on_list_resources=list_resources, on_read_resource=read_resource)


async def main() -> None:
    async with stdio_server() as (read, write):
        await app.run(read, write, app.create_initialization_options())


anyio.run(main)
