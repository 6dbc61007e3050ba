"""One long-lived event loop thread that owns every MCP connection of the process.

MCP sessions are asyncio objects bound to the loop that opened them. Keeping them in one
background loop lets sync callers (the ToolExecutor's worker threads) and async callers (other
loops) reuse a warm session: a call is handed over with `submit` and costs one cross-thread
wake-up, not a reconnect. At interpreter exit the registered closers run on this loop, so
every stdio server is stopped.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

EXIT_TIMEOUT = 8.0  # bound on closing every server at exit (stdio shutdown may wait ~4 s)


class BackgroundLoop:
    """A daemon thread running an asyncio loop, started on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closers: list[Callable[[], Awaitable[None]]] = []

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is not None:
            return loop
        with self._lock:
            if self._loop is None:
                ready = threading.Event()
                loop = asyncio.new_event_loop()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="jarvis-mcp-loop", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
                atexit.register(self.shutdown)
            return self._loop

    def in_loop(self) -> bool:
        """True when called from the loop thread itself (blocking there would deadlock)."""
        return self._thread is not None and threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule `coro` on the loop; the returned future is safe to wait on from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (from a thread that is not the loop)."""
        if self.in_loop():
            coro.close()
            raise RuntimeError("BackgroundLoop.run called from the loop thread")
        return self.submit(coro).result(timeout)

    async def arun(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` running on the background loop from another event loop."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            return await coro
        return await asyncio.wrap_future(self.submit(coro))

    def on_exit(self, closer: Callable[[], Awaitable[None]]) -> None:
        """Run `closer()` on the loop at shutdown (registered once per owner)."""
        self._closers.append(closer)

    def forget(self, closer: Callable[[], Awaitable[None]]) -> None:
        try:
            self._closers.remove(closer)
        except ValueError:
            pass

    def shutdown(self, timeout: float = EXIT_TIMEOUT) -> None:
        """Run the closers (bounded), then stop the loop."""
        loop = self._loop
        if loop is None or not loop.is_running():
            return
        closers, self._closers = list(self._closers), []

        async def close_all() -> None:
            await asyncio.gather(*(c() for c in closers), return_exceptions=True)

        try:
            self.submit(close_all()).result(timeout)
        except Exception:  # noqa: BLE001 - exiting anyway; the sweep below still runs
            pass
        loop.call_soon_threadsafe(loop.stop)
        # A server whose polite close did not finish in time (stuck, ignoring SIGTERM, or a
        # stop still under way for a call that timed out) must not outlive us with parent 1.
        from jarvis.mcp.procs import sweep_live

        sweep_live()


_LOOP = BackgroundLoop()


def background_loop() -> BackgroundLoop:
    """The process-wide MCP loop."""
    return _LOOP
