"""Threads of tool calls the executor runs with a watchdog, and those it gave up on.

Python cannot stop a thread, so a tool that hangs keeps its thread after the executor gave up
on it (a timeout); `ABANDONED` counts those, per tool and in all, so the executor can refuse
new calls while too many still run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future


class _Abandoned:
    """Threads of timed-out calls that are still running, per tool and in all (process-wide:
    every executor's threads share the one process).

    Python cannot stop a thread, so a tool that hangs keeps its thread after the executor
    gave up on it. The executor refuses new calls of a tool (or of any tool) while too many
    of those are still running, and a thread leaves the count when it finally ends.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_tool: dict[str, int] = {}
        self.total = 0

    def add(self, name: str) -> None:
        with self._lock:
            self.by_tool[name] = self.by_tool.get(name, 0) + 1
            self.total += 1

    def remove(self, name: str) -> None:
        with self._lock:
            left = self.by_tool.get(name, 0) - 1
            if left > 0:
                self.by_tool[name] = left
            else:
                self.by_tool.pop(name, None)
            self.total -= 1

    def counts(self, name: str) -> tuple[int, int]:
        with self._lock:
            return self.by_tool.get(name, 0), self.total


ABANDONED = _Abandoned()


def abandoned_threads() -> dict[str, int]:
    """Timed-out tool calls whose threads are still running, per tool name."""
    with ABANDONED._lock:
        return dict(ABANDONED.by_tool)


class _Watch:
    """One call's thread, as seen by the caller that may give up on it."""

    __slots__ = ("future", "lock", "done", "abandoned", "name")

    def __init__(self, future: Future[Any], name: str) -> None:
        self.future = future
        self.lock = threading.Lock()
        self.done = False
        self.abandoned = False
        self.name = name

    def abandon(self) -> None:
        """The caller stopped waiting: count the thread until it really ends."""
        with self.lock:
            if self.done or self.abandoned:
                return
            self.abandoned = True
        ABANDONED.add(self.name)

    def finished(self) -> None:
        with self.lock:
            self.done = True
            counted = self.abandoned
        if counted:
            ABANDONED.remove(self.name)


def _start_thread(fn: Callable[[], Any], name: str) -> _Watch:
    """Run `fn` in a fresh daemon thread. A hung tool only ever holds its own thread."""
    # Imported here: concurrent.futures pulls in logging (~6 ms) and inline tools never
    # need it.
    from concurrent.futures import Future

    future: Future[Any] = Future()
    watch = _Watch(future, name)

    def runner() -> None:
        try:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(exc)
        finally:
            watch.finished()

    threading.Thread(target=runner, name=f"jarvis-tool-{name}", daemon=True).start()
    return watch
