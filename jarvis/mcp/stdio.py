"""The stdio transport to an MCP server: the SDK's, with a reader that is linear and bounded.

The SDK's `stdio_client` joins each chunk read from the server to the part of the line read so
far and splits the whole again: time growing with the square of a line (a 16 MB reply took
3.7 s of the MCP event loop's CPU against 0.17 s here; a 56 MB one, a resource read of 40
images, ran past a 30 s call timeout on a loaded machine), with no bound on memory. Here a
line is kept as a list of pieces, each byte looked at once, and a message over `max_bytes` is
not kept at all: its bytes are read and dropped, and the request it answers
(its id is near the start of any SDK server's reply) gets a JSON-RPC error saying why, so the
call fails at once instead of at its timeout. Spawning and shutting down do what the SDK's
does (own process group; close stdin, wait, then SIGTERM and SIGKILL to the whole tree, with
the SDK's terminate_posix_process_tree).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator
from typing import Any, TextIO

log = logging.getLogger(__name__)

# Long enough for any SDK server's `{"jsonrpc":"2.0","id":...` before the result.
ID_PREFIX_BYTES = 512
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')
GRACE_SECONDS = 2.0  # for the server to exit once its stdin is closed (as the SDK)
KILL_SECONDS = 2.0   # between SIGTERM and SIGKILL to its process group
FLUSH_SECONDS = 0.5  # for messages already accepted to reach the server at shutdown


def megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.3g}"


class Oversized:
    """Stands for a message over the limit: its size and the first bytes, where its id is."""

    def __init__(self, size: int, head: bytes) -> None:
        self.size = size
        self.head = head


async def read_lines(stdout: Any, max_bytes: int) -> AsyncIterator[bytes | Oversized]:
    """Newline-delimited messages from a byte stream; one over `max_bytes` as Oversized."""
    pieces: list[bytes] = []
    size = 0
    head = b""
    async for chunk in stdout:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start:end]
            if len(head) < ID_PREFIX_BYTES:
                head += piece[:ID_PREFIX_BYTES - len(head)]
            size += len(piece)
            if size <= max_bytes:
                pieces.append(piece)
            elif pieces:
                pieces = []  # over the limit: what was kept goes, the rest is only counted
            if end < 0:
                break
            if size > max_bytes:
                yield Oversized(size, head)
            elif size:
                yield b"".join(pieces)
            pieces, size, head = [], 0, b""
            start = end + 1


def refusal(message: Oversized, server: str, max_bytes: int) -> Any:
    """The JSON-RPC error answering the request an oversized reply was for (None when its id
    cannot be found near its start: the call then ends at its timeout)."""
    import json

    from mcp.shared.message import SessionMessage
    from mcp.types import ErrorData, JSONRPCError

    found = _ID.search(message.head)
    if found is None:
        return None
    try:
        request_id = json.loads(found.group(1))
    except ValueError:
        return None
    text = (f"MCP server {server!r} sent a message of over {megabytes(max_bytes)} MB "
            f"({megabytes(message.size)} MB); it was dropped. Raise max_message_mb of "
            f"[mcp.servers.{server}] if that server's replies are really this large")
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request_id,
                                       error=ErrorData(code=-32603, message=text)))


@contextlib.asynccontextmanager
async def bounded_stdio_client(params: Any, errlog: TextIO, *, server: str,
                               max_bytes: int) -> AsyncIterator[tuple[Any, Any]]:
    """Like mcp.client.stdio.stdio_client(params, errlog), with messages bounded to
    `max_bytes` each (named `server` in the refusal)."""
    import anyio
    from mcp.client.stdio import get_default_environment
    from mcp.os.posix.utilities import terminate_posix_process_tree
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    process = await anyio.open_process(
        [params.command, *params.args], env=get_default_environment() | (params.env or {}),
        stderr=errlog, cwd=params.cwd, start_new_session=True)
    # No await between the spawn and the task group: a cancellation there would leak it.
    read_writer, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = anyio.Event()
    stopping = False

    async def deliver(item: Any) -> None:
        await read_writer.send(item)

    async def stdout_reader() -> None:
        try:
            async with read_writer:
                async for line in read_lines(process.stdout, max_bytes):
                    if isinstance(line, Oversized):
                        log.warning("MCP server %r sent a message of %d bytes (limit %d); "
                                    "dropped", server, line.size, max_bytes)
                        answer = refusal(line, server, max_bytes)
                        if answer is not None:
                            await deliver(answer)
                        continue
                    try:
                        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except ValueError as exc:  # the session surfaces it, as with the SDK's
                        log.error("Failed to parse JSONRPC message from server %r", server,
                                  exc_info=exc)
                        await deliver(exc)
                        continue
                    await deliver(SessionMessage(message))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone or we closed the pipe: only the drain below remains
        except (ConnectionError, OSError) as exc:
            if not stopping:
                log.warning("reading from MCP server %r failed: %s", server, exc)
        finally:
            await _drain(process)

    async def stdin_writer() -> None:
        try:
            async with write_reader:
                async for item in write_reader:
                    data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send(data.encode("utf-8") + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
            # The server stopped reading: close the session's side, so a request waiting
            # for an answer ends now instead of at its timeout.
            await read_writer.aclose()
        finally:
            writer_done.set()

    async def shutdown() -> None:
        read_stream.close()
        write_stream.close()
        with anyio.move_on_after(FLUSH_SECONDS):
            await writer_done.wait()
        await _close(process.stdin)
        if not await _exited(process, GRACE_SECONDS):
            with contextlib.suppress(OSError, ProcessLookupError):
                await terminate_posix_process_tree(process, KILL_SECONDS)
            if not await _exited(process, GRACE_SECONDS):
                log.warning("MCP server %r (pid %d) is still alive after SIGKILL", server,
                            process.pid)
        await _close(process.stdout)
        # asyncio's subprocess transport stays open (and warns when collected) while a child
        # of the server holds a pipe; nothing public closes it.
        transport = getattr(getattr(process, "_process", None), "_transport", None)
        if callable(getattr(transport, "close", None)):
            with contextlib.suppress(PermissionError):
                transport.close()
        for stream in (read_stream, write_stream, read_writer, write_reader):
            await _close(stream)

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        group.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            stopping = True
            with anyio.CancelScope(shield=True):  # the server must not outlive a cancel
                await shutdown()
            group.cancel_scope.cancel()


async def _drain(process: Any) -> None:
    """Read and drop what the server still writes, so it never blocks on a full pipe while
    it should be exiting; ends when shutdown closes the pipe."""
    import anyio

    with anyio.CancelScope(shield=True), contextlib.suppress(
            anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError,
            ConnectionError, OSError):
        while True:
            await process.stdout.receive()


async def _exited(process: Any, seconds: float) -> bool:
    """Whether the process died within `seconds` (polled: process.wait() also waits for the
    pipes, which a child of the server may hold open)."""
    import anyio

    deadline = anyio.current_time() + seconds
    while process.returncode is None:
        if anyio.current_time() >= deadline:
            return False
        await anyio.sleep(0.01)
    return True


async def _close(stream: Any) -> None:
    import anyio

    with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        await stream.aclose()
