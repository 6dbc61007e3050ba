"""Bounds on what an MCP server sends over HTTP (streamable HTTP and HTTP+SSE).

The SDK reads a JSON reply whole and an SSE event whole before jarvis sees any of it, and
httpx would inflate a gzip body of any ratio. jarvis's transport under the SDK's HTTP client
asks for no compression (a compressed reply is refused: a 1 MB gzip body can inflate to
gigabytes) and ends a reply when one message (a JSON body, or one SSE event: the bytes since
the last blank line, so a long-lived event stream is not cut for its total) passes
`max_message_mb` of [mcp.servers.NAME].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")


def bounded_http_transport(server: str, max_bytes: int,
                           on_refused: Callable[[str], None] | None = None) -> Any:
    """An httpx2 async transport for MCP server `server` with messages of `max_bytes` at most;
    `on_refused(reason)` hears why a reply was refused (the SDK reports only a closed
    connection)."""
    import httpx2

    from jarvis.mcp.stdio import megabytes

    def refuse(reason: str, error: type[Exception]) -> Exception:
        if on_refused is not None:
            on_refused(reason)
        return error(reason)

    def too_large() -> Exception:
        return refuse(f"it sent a message of over {megabytes(max_bytes)} MB, the limit "
                      f"(max_message_mb of [mcp.servers.{server}]); the reply was dropped",
                      httpx2.ReadError)

    class Capped(httpx2.AsyncByteStream):
        def __init__(self, stream: Any, events: bool) -> None:
            self.stream = stream
            self.events = events

        async def __aiter__(self) -> Any:
            size, tail = 0, b""
            async for chunk in self.stream:
                if self.events:
                    # Bytes since the last event boundary; `tail` catches one split between
                    # two chunks.
                    joined = tail + chunk
                    boundary = max(joined.rfind(end) + len(end) if end in joined else -1
                                   for end in _EVENT_ENDS)
                    size = len(joined) - boundary if boundary >= 0 else size + len(chunk)
                    tail = joined[-3:]
                else:
                    size += len(chunk)
                if size > max_bytes:
                    raise too_large()
                yield chunk

        async def aclose(self) -> None:
            await self.stream.aclose()

    class Bounded(httpx2.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = "identity"
            response = await super().handle_async_request(request)
            encoding = response.headers.get("content-encoding", "").strip().lower()
            if encoding not in ("", "identity"):
                await response.aclose()
                raise refuse(f"it answered with Content-Encoding {encoding[:40]!r}, which "
                             f"jarvis did not ask for (it asks for none: a compressed reply can "
                             f"inflate past any bound)", httpx2.RemoteProtocolError)
            events = response.headers.get("content-type", "").startswith("text/event-stream")
            response.stream = Capped(response.stream, events)
            return response

    return Bounded()
