"""ResourceManager: pools by spec, and leases that bind a resource to a run (or to everyone).

A lease is (owner, spec key) -> resource. Scope "run" makes the owner the run (or ORS session)
id, so every call of one run gets the same resource and different runs get different ones;
scope "global" shares one resource per spec among all runs. `release_run(run_id)` ends a
run's leases (the SDK calls it when an ask finishes, the server when a session is deleted);
`close()` ends everything (also run at interpreter exit for the default manager).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from jarvis.resources.pool import ResourcePool, _alive
from jarvis.resources.spec import ResourceSpec

GLOBAL_OWNER = "__global__"
SCOPES = ("run", "global")


class ResourceManager:
    """Owns the pools of one process (or one server) and the leases of its runs."""

    def __init__(self, default_timeout: float = 30.0) -> None:
        self.default_timeout = default_timeout
        self._lock = threading.Lock()
        self._pools: dict[Any, ResourcePool] = {}
        self._leases: dict[tuple[str, Any], Any] = {}
        self._lease_locks: dict[tuple[str, Any], threading.Lock] = {}
        self._closed = False

    def pool(self, spec: ResourceSpec) -> ResourcePool:
        """The pool for `spec` (made on first use; its size comes from the first spec seen)."""
        with self._lock:
            pool = self._pools.get(spec.key)
            if pool is None:
                pool = self._pools[spec.key] = ResourcePool(spec)
            return pool

    def acquire(self, spec: ResourceSpec, *, scope: str = "run", owner: str | None = None,
                timeout: float | None = None) -> Any:
        """The resource of `spec` leased to `owner` (scope "run") or to everyone ("global"),
        taken from the pool on first use; waits up to `timeout` s when the pool is full and
        raises ResourceBusyError after that."""
        if scope not in SCOPES:
            raise ValueError(f"unknown resource scope {scope!r}; use one of {', '.join(SCOPES)}")
        if scope == "global":
            owner = GLOBAL_OWNER
        elif not owner:
            raise ValueError("scope='run' needs the run id as owner")
        key = (owner, spec.key)
        with self._lock:
            if self._closed:
                raise RuntimeError("the resource manager is closed")
            lock = self._lease_locks.setdefault(key, threading.Lock())
        with lock:  # one build per lease even when calls of a run race
            with self._lock:
                current = self._leases.get(key)
            if current is not None:
                if _alive(current):
                    return current
                with self._lock:
                    self._leases.pop(key, None)
                self.pool(spec).discard(current)
            resource = self.pool(spec).acquire(self.default_timeout if timeout is None else timeout)
            with self._lock:
                stale = self._closed or key not in self._lease_locks  # released meanwhile
                if not stale:
                    self._leases[key] = resource
            if stale:
                self.pool(spec).release(resource)
                raise RuntimeError(f"run {owner!r} ended while its resource was being built")
            return resource

    async def aacquire(self, spec: ResourceSpec, *, scope: str = "run", owner: str | None = None,
                       timeout: float | None = None) -> Any:
        """`acquire` for async tools: the wait happens in a worker thread, not on the loop."""
        import asyncio

        return await asyncio.to_thread(self.acquire, spec, scope=scope, owner=owner,
                                       timeout=timeout)

    def leased(self, owner: str, spec: ResourceSpec) -> Any | None:
        """The resource `owner` holds for `spec`, if any (never builds one)."""
        with self._lock:
            return self._leases.get((owner, spec.key))

    def release_run(self, owner: str) -> int:
        """End every lease of `owner` (a run or session id); returns how many were released."""
        with self._lock:
            keys = [k for k in self._leases if k[0] == owner]
            taken = [(k, self._leases.pop(k)) for k in keys]
            for k in [k for k in self._lease_locks if k[0] == owner]:
                del self._lease_locks[k]
            pools = {k: self._pools.get(k[1]) for k, _ in taken}
        for k, resource in taken:
            pool = pools[k]
            if pool is not None:
                pool.release(resource)
        return len(taken)

    @contextmanager
    def lease(self, spec: ResourceSpec, timeout: float | None = None) -> Iterator[Any]:
        """A resource for one block of code only (stateless tools): returned on exit."""
        pool = self.pool(spec)
        resource = pool.acquire(self.default_timeout if timeout is None else timeout)
        try:
            yield resource
        finally:
            pool.release(resource)

    def owners(self) -> list[str]:
        with self._lock:
            return sorted({k[0] for k in self._leases})

    def stats(self) -> list[dict[str, Any]]:
        with self._lock:
            pools = list(self._pools.values())
        return [p.stats() for p in pools]

    def close(self) -> None:
        """Release every lease and close every pool (idempotent)."""
        with self._lock:
            owners = {k[0] for k in self._leases}
        for owner in owners:
            self.release_run(owner)
        with self._lock:
            self._closed = True
            pools = list(self._pools.values())
        for pool in pools:
            pool.close()


_default: ResourceManager | None = None
_default_lock = threading.Lock()


def default_manager() -> ResourceManager:
    """The process-wide manager (closed at interpreter exit, killing leftover processes)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = ResourceManager()
            atexit.register(_default.close)
        return _default


def release_run(run_id: str | None) -> int:
    """Release the run-scoped resources of `run_id` in the default manager (no-op if none)."""
    if not run_id or _default is None:
        return 0
    return _default.release_run(run_id)
