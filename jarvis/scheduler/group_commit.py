"""Writes that arrive together share one transaction (a group commit).

When many runs are due at once, the daemon's workers finish their runs at the same moment and
each waited for the store's lock to write its one row in a transaction of its own. Here the
first writer to arrive leads: it writes what is waiting, its own and any that arrived
meanwhile, in one transaction, and hands each writer its result; the writers that arrived
while it wrote are written next, in the next transaction. Each writer returns only once the
transaction holding its write has committed: a write counts as done no sooner than before.

A batch whose transaction fails is written again one write per transaction, so each writer
gets its own result or error, exactly as if it had written alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


class _Waiter:
    __slots__ = ("done", "error", "finished", "item", "result")

    def __init__(self, item: Any) -> None:
        self.item = item
        self.result: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self.done = threading.Lock()
        self.done.acquire()  # released once written (or failed)

    def end(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.finished = result, error, True
        self.done.release()


class GroupCommit:
    """`submit(item)` applies `apply(conn, item)` inside a `transaction()` (a context manager
    yielding the connection) shared with the items submitted at the same time; returns what
    `apply` returned, or raises what it raised."""

    def __init__(self, transaction: Callable[[], AbstractContextManager[Any]],
                 apply: Callable[[Any, Any], Any]) -> None:
        self._transaction = transaction
        self._apply = apply
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._leading = False
        self.transactions = 0  # committed or attempted (for tests and benchmarks)

    def submit(self, item: Any) -> Any:
        waiter = _Waiter(item)
        with self._lock:
            self._queue.append(waiter)
            lead = not self._leading
            self._leading = True
        if lead:
            self._lead()
        waiter.done.acquire()  # the leader's own was written by itself: no wait then
        if waiter.error is not None:
            raise waiter.error
        return waiter.result

    def _lead(self) -> None:
        batch: list[_Waiter] = []
        try:
            while True:
                with self._lock:
                    batch, self._queue = self._queue, []
                    if not batch:
                        self._leading = False
                        return
                self._write(batch)
        except BaseException as exc:  # e.g. KeyboardInterrupt: no writer may wait forever
            with self._lock:
                rest, self._queue, self._leading = self._queue, [], False
            for waiter in batch + rest:
                if not waiter.finished:
                    waiter.end(error=exc)
            raise

    def _write(self, batch: list[_Waiter]) -> None:
        if len(batch) > 1:
            try:
                self.transactions += 1
                with self._transaction() as conn:
                    results = [self._apply(conn, waiter.item) for waiter in batch]
            except Exception:  # noqa: BLE001 - rolled back: each is written alone below
                pass
            else:
                for waiter, result in zip(batch, results, strict=True):
                    waiter.end(result)
                return
        for waiter in batch:
            try:
                self.transactions += 1
                with self._transaction() as conn:
                    result = self._apply(conn, waiter.item)
            except Exception as exc:  # noqa: BLE001 - its writer raises it
                waiter.end(error=exc)
            else:
                waiter.end(result)
