"""Reused threads for the daemon's runs: each run's call needs a thread of its own (Python
cannot stop a call past its timeout, so the daemon loop watches it from outside, with the
run's lease), but starting a thread per run was a large part of the daemon's cost when many
runs are due at once (each start waits for the new thread to be scheduled).

`ThreadPool.submit(fn, name)` hands `fn` to an idle thread of the pool, or starts one; a
thread whose call has ended waits `linger` seconds for the next and then ends, so an idle
daemon keeps no threads. The pool has no upper bound: a call that never returns holds its
thread and never delays another call (the daemon bounds how many runs it starts).

Each call runs as on a fresh thread: in an empty contextvars context (a run's fence, set with
`jarvis.scheduler.fencing.set_fence`, never leaks into the next call) and under the thread
name it is given.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("jarvis.scheduler")

IDLE_NAME = "jarvis-idle"


class Job:
    """One call handed to the pool; quacks like the Thread it replaces (is_alive, join)."""

    __slots__ = ("_done", "_ended", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._ended = False
        # Held until the call ends; a waiter takes it and gives it back at once. A plain lock,
        # not a threading.Event: waiters (a shutdown, a --once pass) wait on calls this way, and
        # an Event (a Condition making a lock per wait) was a measurable part of a run's cost.
        self._done = threading.Lock()
        self._done.acquire()

    def is_alive(self) -> bool:
        return not self._ended

    def join(self, timeout: float | None = None) -> None:
        if self._ended:
            return
        if self._done.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            self._done.release()

    def _end(self) -> None:
        self._ended = True
        self._done.release()


class ThreadPool:
    """Daemon threads reused between calls (see the module docstring)."""

    def __init__(self, linger: float = 1.0) -> None:
        self.linger = linger
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self.started = 0  # threads started so far (for benchmarks and tests)

    def submit(self, fn: Callable[[], Any], name: str, job: Job | None = None) -> Job:
        """Run `fn` on a thread of the pool; `job` (made by the caller, e.g. to register it
        before the call can end) is the handle returned."""
        job = job if job is not None else Job(name)
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self.started += 1
        if worker is None:
            worker = _Worker(self)
            worker.inbox.put((job, fn))
            worker.thread.start()
        else:
            worker.inbox.put((job, fn))
        return job

    def _park(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def _retire(self, worker: _Worker) -> bool:
        """True: `worker` left the idle list and may end; False: a call was just handed to it."""
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return True
            return False


class _Worker:
    def __init__(self, pool: ThreadPool) -> None:
        self.pool = pool
        self.inbox: queue.SimpleQueue[tuple[Job, Callable[[], Any]]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True, name=IDLE_NAME)

    def _serve(self) -> None:
        me = threading.current_thread()
        while True:
            try:
                job, fn = self.inbox.get(timeout=self.pool.linger)
            except queue.Empty:
                if self.pool._retire(self):
                    return
                continue  # handed a call while timing out: it is in the inbox
            me.name = job.name
            try:
                contextvars.Context().run(fn)
            except BaseException:  # noqa: BLE001 - as an uncaught error on its own thread
                log.exception("unhandled error in %s", job.name)
            finally:
                me.name = IDLE_NAME
                self.pool._park(self)  # idle before the waiter wakes: it may hand the next call
                job._end()


# The daemon's runs (jarvis.scheduler.daemon).
RUN_THREADS = ThreadPool()
