"""Sandboxes started ahead: a cold `code_interpreter` call takes one that is already up.

`[tools.code_interpreter] prestart = 1` keeps one sandbox of the tool's policy started in the
background. A call takes it (a fresh process that has run nothing: no state of any caller),
runs its code, and the sandbox is killed as always when the call returns; taking it starts a
replacement in the background, once the call has released its sandbox. The first call of a
process starts the first spare (nothing is started before a code tool is used).

A spare is a sandbox like any other: it dies with jarvis (bubblewrap's --die-with-parent, the
launcher's death signal, both on jarvis's sandbox thread) and is closed at exit. It counts
beside the pool's max_processes. Spares are kept per policy and per the folders the sandbox
hides (the home folder, JARVIS_HOME): one started for another JARVIS_HOME is never handed out.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
MAX_KINDS = 4  # policies kept warm at once; the least recently used one is closed past it

_lock = threading.Lock()
_kinds: OrderedDict[Any, Spares] = OrderedDict()


class Spares:
    """Up to `count` sandboxes of one kind, started ahead by `build`."""

    def __init__(self, build: Callable[[], Any], count: int) -> None:
        self.build = build
        self.count = count
        self.ready: list[Any] = []
        self.starting = 0
        self.closed = False
        self.handed = 0   # spares handed to callers
        self.cold = 0     # calls that found none ready and started their own

    def take(self) -> Any:
        """A started sandbox: a spare if one is ready (a replacement follows), else a new one
        started now."""
        with _lock:
            while self.ready:
                proc = self.ready.pop()
                if proc.alive:
                    self.handed += 1
                    break
                _close(proc)
            else:
                proc = None
                self.cold += 1
        if proc is None:
            proc = self.build()
        proc.after_close = self.refill  # the replacement starts once this one is gone
        return proc

    def refill(self) -> None:
        """Start what is missing, in the background."""
        with _lock:
            need = 0 if self.closed else self.count - len(self.ready) - self.starting
            self.starting += max(need, 0)
        for _ in range(need):
            threading.Thread(target=self._start, daemon=True, name="jarvis-sandbox-spare").start()

    def _start(self) -> None:
        try:
            proc = self.build()
        except Exception as exc:  # noqa: BLE001 - the next call starts its own, and says why
            log.info("a spare sandbox did not start: %s", exc)
            proc = None
        with _lock:
            self.starting -= 1
            keep = proc is not None and not self.closed
            if keep:
                self.ready.append(proc)
        if proc is not None and not keep:
            _close(proc)

    def close(self) -> None:
        with _lock:
            self.closed = True
            ready, self.ready = self.ready, []
        for proc in ready:
            _close(proc)


def _close(proc: Any) -> None:
    try:
        proc.close()
    except Exception:  # noqa: BLE001 - a spare that fails to close must not break a call
        log.warning("closing a spare sandbox failed", exc_info=True)


def spares_for(key: Any, build: Callable[[], Any], count: int) -> Spares:
    """The spares of `key` (made on first use; the folders a sandbox hides are part of it)."""
    from jarvis.sandbox.launch import secret_folders

    full = (key, tuple(secret_folders()), count)
    evicted = []
    with _lock:
        spares = _kinds.get(full)
        if spares is None:
            spares = _kinds[full] = Spares(build, count)
            while len(_kinds) > MAX_KINDS:
                evicted.append(_kinds.popitem(last=False)[1])
        _kinds.move_to_end(full)
    for old in evicted:
        old.close()
    return spares


def stats() -> list[dict[str, int]]:
    """Per kind: spares ready, starting, handed to calls, and calls that found none."""
    with _lock:
        return [{"ready": len(k.ready), "starting": k.starting, "handed": k.handed,
                 "cold": k.cold} for k in _kinds.values()]


def close_all() -> None:
    """Close every spare (at exit, and for tests)."""
    with _lock:
        kinds = list(_kinds.values())
        _kinds.clear()
    for spares in kinds:
        spares.close()


_owner = os.getpid()
atexit.register(lambda: os.getpid() == _owner and close_all())
