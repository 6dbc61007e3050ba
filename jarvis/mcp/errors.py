"""How an MCP connection fails, and the one line that says why.

`McpServerError` (could not connect, dropped, broke the protocol), `McpCallTimeout` and
`McpCallError` (the server refused the request) are all that escape a connection
(jarvis.mcp.connection, which they can also be imported from); `describe` turns any exception
into one readable line, for those errors and for the SDK's log records (jarvis.mcp.logs).
"""

from __future__ import annotations

import asyncio


class McpServerError(Exception):
    """The server could not be started or reached, dropped the connection or broke the protocol."""

    def __init__(self, server: str, reason: str) -> None:
        self.server = server
        # Reasons quote URLs (a key in the path: Zapier's /mcp/sk-ak-.../sse) and servers'
        # stderr: shown and remembered without their secrets.
        self.reason = shown_reason(reason)
        super().__init__(f"MCP server {server!r}: {self.reason}")


def shown_reason(reason: str) -> str:
    """A failure reason as it may be shown, stored or logged: keys in URLs and tokens hidden."""
    from jarvis.security.redact import redact_value

    return redact_value("error", reason)


class McpCallTimeout(Exception):
    """A call got no answer within its timeout."""


class McpCallError(Exception):
    """The server answered a call with a JSON-RPC error (unknown tool, invalid params, ...)."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


class ServerSetupError(Exception):
    """A stdio server cannot be started as configured (its message says why and the fix)."""


class BadCwdError(ServerSetupError):
    """A stdio server's `cwd` is not a folder (else it would read as 'command not found')."""


def describe(exc: BaseException) -> str:
    """A one-line reason from an exception, looking inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, ServerSetupError):
        return str(exc)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "timed out"
    text = str(exc).strip() or type(exc).__name__
    if type(exc).__name__ not in ("MCPError", "McpServerError"):
        text = f"{type(exc).__name__}: {text}"
    return text.splitlines()[0][:300]
