"""A request `jarvis mcp serve` cannot read, answered: text that is not valid Unicode.

A JSON `"\\udc80"` escape decodes to a lone surrogate, which no file, database or HTTP body can
hold. The SDK's stdio transport parses each line with pydantic, which refuses such a line,
and drops it without an answer: the client waits for a reply that never comes (its own
timeout, a minute or more). Over HTTP the SDK answers a parse error itself. Here the stdio
read stream is wrapped so that such a request gets a JSON-RPC error with its own id, naming
the character and where it is (jarvis.core.text), and nothing runs.
"""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any

INVALID_PARAMS = -32602


class InvalidTextAnswered:
    """`read_stream` (the SDK's stdio read stream) with lines it could not parse because
    they hold a lone surrogate answered on `write_stream` and left out."""

    def __init__(self, read_stream: Any, write_stream: Any) -> None:
        self._inner = read_stream
        self._write = write_stream

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if isinstance(item, Exception) and await self._answer(item):
                continue
            return item

    def __aiter__(self) -> InvalidTextAnswered:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> InvalidTextAnswered:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc_val: BaseException | None, exc_tb: TracebackType | None) -> None:
        await self.aclose()

    async def _answer(self, error: Exception) -> bool:
        """Answer a request whose line failed to parse because of a lone surrogate; False
        for any other failure (left to the SDK)."""
        found = _invalid_request(error)
        if found is None:
            return False
        request_id, message = found
        from mcp.shared.message import SessionMessage
        from mcp.types import ErrorData, JSONRPCError

        await self._write.send(SessionMessage(JSONRPCError(
            jsonrpc="2.0", id=request_id, error=ErrorData(code=INVALID_PARAMS, message=message))))
        return True


def _invalid_request(error: Exception) -> tuple[Any, str] | None:
    """(id, why) of the request in a parse failure that a lone surrogate caused, else None."""
    from jarvis.core.text import escape, find_problem

    errors = getattr(error, "errors", None)
    try:
        line = errors()[0].get("input") if callable(errors) else None
    except (IndexError, TypeError, AttributeError):
        return None
    if not isinstance(line, str) or "\\u" not in line:
        return None
    try:
        message = json.loads(line)  # Python's parser takes lone surrogates; pydantic's does not
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("id") is None:
        return None  # a notification: nothing to answer
    method = message.get("method")
    why = find_problem(message.get("params"), f"the params of {escape(method)[0]!r}"
                       if isinstance(method, str) else "the params")
    if why is None:
        return None
    request_id, _ = escape(message["id"])
    if not isinstance(request_id, (str, int)):
        return None
    return request_id, why
