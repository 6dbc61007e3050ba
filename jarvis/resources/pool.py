"""ResourcePool: at most `max_size` live resources of one spec; callers past that wait.

Thread-based on purpose: tools run on executor threads, in fresh event loops and on the
server's loop, so an asyncio primitive would be bound to the wrong loop. Async callers use
`ResourceManager.aacquire`, which waits in a worker thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from jarvis.resources.spec import ResourceBusyError, ResourceSpec

log = logging.getLogger(__name__)


def _alive(resource: Any) -> bool:
    alive = getattr(resource, "alive", True)
    return bool(alive() if callable(alive) else alive)


def close_quietly(resource: Any) -> None:
    """Close a resource; a resource that fails to close must not break its pool."""
    try:
        resource.close()
    except Exception:  # noqa: BLE001 - logged, never raised into a tool call
        log.warning("closing resource %r failed", resource, exc_info=True)


class ResourcePool:
    """Hands out resources of one spec: reuses idle ones, builds new ones up to max_size,
    and makes further callers wait (up to a timeout) for a release."""

    def __init__(self, spec: ResourceSpec) -> None:
        self.spec = spec
        self.max_size = spec.max_size
        self._cond = threading.Condition()
        self._idle: list[Any] = []
        self._live = 0  # idle + in use + being built
        self._closed = False
        self.created = 0
        self.reused = 0
        self.waits = 0

    @property
    def in_use(self) -> int:
        with self._cond:
            return self._live - len(self._idle)

    @property
    def live(self) -> int:
        with self._cond:
            return self._live

    def acquire(self, timeout: float | None = None) -> Any:
        """A resource for the caller; waits while the pool is full. Raises ResourceBusyError
        after `timeout` seconds (None: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waited = False
        with self._cond:
            while True:
                if self._closed:
                    raise ResourceBusyError(f"the {self.spec.kind} pool is shut down")
                while self._idle:
                    candidate = self._idle.pop()
                    if _alive(candidate):
                        self.reused += 1
                        return candidate
                    self._live -= 1
                    close_quietly(candidate)
                if self._live < self.max_size:
                    self._live += 1  # reserve the slot, build outside the lock
                    break
                if not waited:
                    waited = True
                    self.waits += 1
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise ResourceBusyError(
                        f"all {self.max_size} {self.spec.kind} resources are in use and none was "
                        f"released within {timeout:g} s; try again later or raise the pool size")
                self._cond.wait(remaining)
        try:
            resource = self.spec.factory()
        except BaseException:
            with self._cond:
                self._live -= 1
                self._cond.notify()
            raise
        with self._cond:
            self.created += 1
        return resource

    def release(self, resource: Any, *, reuse: bool | None = None) -> None:
        """Give a resource back: kept for reuse when the spec allows it, else closed."""
        keep = self.spec.reusable if reuse is None else reuse
        if keep and _alive(resource):
            reset = getattr(resource, "reset", None)
            if reset is not None:
                try:
                    reset()
                except Exception:  # noqa: BLE001 - a resource that cannot reset is not reused
                    log.warning("reset of %r failed; closing it", resource, exc_info=True)
                    keep = False
        else:
            keep = False
        with self._cond:
            if keep and not self._closed and len(self._idle) < self.spec.max_idle:
                self._idle.append(resource)
                self._cond.notify()
                return
            self._live -= 1
            self._cond.notify()
        close_quietly(resource)

    def discard(self, resource: Any) -> None:
        """Close a broken resource and free its slot."""
        self.release(resource, reuse=False)

    def close(self) -> None:
        """Close the idle resources and refuse new acquires (in-use ones close on release)."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._live -= len(idle)
            self._cond.notify_all()
        for resource in idle:
            close_quietly(resource)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"kind": self.spec.kind, "max_size": self.max_size, "live": self._live,
                    "idle": len(self._idle), "created": self.created, "reused": self.reused,
                    "waits": self.waits}
