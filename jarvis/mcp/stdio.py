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

A server gets a session of its own (as with the SDK) only when jarvis has a controlling
terminal, which the server must then not share (it could write to it past jarvis). Without
one, it gets its own process group in jarvis's session: on Linux every session is a
scheduling group of its own (autogroup), and on a loaded machine a server in a group of its
own answered each call ~0.4-2 ms later (bench/bench_mcp_call.py, "pipe, new session").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
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

    process = await spawn([params.command, *params.args],
                          get_default_environment() | (params.env or {}), errlog, params.cwd)
    # No await between the spawn and the task group: a cancellation there would leak it.
    read_stream = _Inbox()
    stopping = False
    deliver = read_stream.put
    # The server stopped reading: the session's side ends, so a request waiting for an
    # answer ends now instead of at its timeout.
    write_stream = _MessageWriter(process.stdin, read_stream.end)

    async def stdout_reader() -> None:
        try:
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
            read_stream.end()
            await _drain(process)

    async def shutdown() -> None:
        read_stream.close()
        with anyio.move_on_after(FLUSH_SECONDS):
            await write_stream.aclose()  # what was written is still flushed to the server
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
        read_stream.close()

    async with anyio.create_task_group() as group:
        group.start_soon(stdout_reader)
        try:
            yield read_stream, write_stream
        finally:
            stopping = True
            with anyio.CancelScope(shield=True):  # the server must not outlive a cancel
                await shutdown()
            group.cancel_scope.cancel()


class _Inbox:
    """The session's read stream: what the reader task hands over, one message at a time
    (`put` returns once the session took it, as a memory stream of size 0 would, so the
    reader holds at most one message), then the end. A plain asyncio hand-over: anyio's
    memory streams cost more per message than the rest of the transport."""

    def __init__(self) -> None:
        from collections import deque

        self._items: deque[Any] = deque()
        self._ended = False  # no more items: EndOfStream once the pending one is taken
        self._closed = False  # the session's side is gone: put fails
        self._taker: asyncio.Future[None] | None = None
        self._putter: asyncio.Future[None] | None = None

    async def put(self, item: Any) -> None:
        import anyio

        if self._closed:
            raise anyio.BrokenResourceError
        if self._ended:
            raise anyio.ClosedResourceError
        self._items.append(item)
        _wake(self._taker)
        while self._items and not self._closed:  # until the session took it
            self._putter = asyncio.get_running_loop().create_future()
            await self._putter

    def end(self) -> None:
        self._ended = True
        _wake(self._taker)

    def close(self) -> None:
        self._closed = self._ended = True
        self._items.clear()
        _wake(self._taker)
        _wake(self._putter)

    async def receive(self) -> Any:
        import anyio

        while not self._items:
            if self._ended:
                raise anyio.EndOfStream
            self._taker = asyncio.get_running_loop().create_future()
            await self._taker
        item = self._items.popleft()
        _wake(self._putter)
        return item

    def __aiter__(self) -> _Inbox:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        self.close()

    async def __aenter__(self) -> _Inbox:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


def _wake(waiter: asyncio.Future[None] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class _MessageWriter:
    """The session's write stream: each message is serialized and written to the server's
    stdin by the task that sends it (no writer task between them: a hop per message).
    Concurrent sends cannot interleave: a message is written whole, and only then drained."""

    def __init__(self, stdin: _Writer, on_broken: Any) -> None:
        self._stdin = stdin
        self._on_broken = on_broken
        self._closed = False
        self._broken = False

    async def send(self, item: Any) -> None:
        import anyio

        if self._closed:
            raise anyio.ClosedResourceError
        if self._broken:
            raise anyio.BrokenResourceError
        data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
        try:
            await self._stdin.send(data.encode("utf-8") + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            self._broken = True
            self._on_broken()
            raise anyio.BrokenResourceError from exc

    async def aclose(self) -> None:
        self._closed = True

    async def __aenter__(self) -> _MessageWriter:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def has_controlling_terminal() -> bool:
    """Whether this process has a controlling terminal (one a child would share)."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return False
    os.close(fd)
    return True


async def spawn(command: list[str], env: dict[str, str], errlog: Any, cwd: Any) -> Process:
    """Start a server with piped stdin/stdout, leader of a process group of its own (the pgid
    the SDK's terminate_posix_process_tree signals); a session of its own too when there is
    a terminal to keep it away from."""
    if has_controlling_terminal():
        group: dict[str, Any] = {"start_new_session": True}
    else:
        group = {"process_group": 0}
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=errlog,
        env=env, cwd=cwd, **group)
    return Process(proc)


class Process:
    """What the transport uses of a server process, with anyio's stream semantics (a read at
    the end raises EndOfStream; a read or write after aclose raises ClosedResourceError)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._process = proc
        self.pid = proc.pid
        assert proc.stdin is not None and proc.stdout is not None
        self.stdin = _Writer(proc.stdin)
        self.stdout = _Reader(proc.stdout)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode


class _Reader:
    def __init__(self, stream: asyncio.StreamReader) -> None:
        self._stream = stream

    async def receive(self, max_bytes: int = 65536) -> bytes:
        import anyio

        data = await self._stream.read(max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> bytes:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        import anyio

        self._stream.set_exception(anyio.ClosedResourceError())
        await asyncio.sleep(0)


class _Writer:
    def __init__(self, stream: asyncio.StreamWriter) -> None:
        self._stream = stream
        self._closed = False

    async def send(self, data: bytes) -> None:
        import anyio

        if self._closed:
            raise anyio.ClosedResourceError
        try:
            self._stream.write(data)
            await self._stream.drain()
        except (ConnectionResetError, BrokenPipeError) as exc:
            if self._stream.is_closing():
                raise anyio.BrokenResourceError from exc
            raise

    async def aclose(self) -> None:
        self._closed = True
        self._stream.close()
        await asyncio.sleep(0)


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
