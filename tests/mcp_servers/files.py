"""A filesystem-style MCP server (official SDK) for the secret tests: any file:// resource is
answered with the file's text, as @modelcontextprotocol/server-filesystem would. Over stdio."""

from __future__ import annotations

import warnings
from urllib.parse import unquote, urlsplit

from mcp.server.mcpserver import MCPServer
from mcp.types import ReadResourceResult, TextResourceContents

warnings.simplefilter("ignore")


class Files(MCPServer):
    async def _handle_read_resource(self, ctx, params):
        uri = str(params.uri)
        if uri.startswith("file://"):
            with open(unquote(urlsplit(uri).path), encoding="utf-8") as fh:
                text = fh.read()
            return ReadResourceResult(contents=[TextResourceContents(
                uri=uri, text=text, mime_type="text/plain")])
        return await super()._handle_read_resource(ctx, params)


app = Files("files")


@app.resource("notes://hello", name="hello", mime_type="text/plain")
def hello() -> str:
    return "hello"  # gives the server the resources capability


if __name__ == "__main__":
    app.run()
