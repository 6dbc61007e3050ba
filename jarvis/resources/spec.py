"""ResourceSpec: what a stateful tool asks for, and the Resource protocol it gets back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jarvis.errors import JarvisError


class ResourceBusyError(JarvisError):
    """A pool stayed at its maximum for the whole acquire timeout."""


@runtime_checkable
class Resource(Protocol):
    """Anything a pool hands out. Optional extras the pool uses when present:
    `alive` (property: False means discard it), `reset()` (called before reuse)."""

    def close(self) -> None: ...


@dataclass(slots=True, frozen=True)
class ResourceSpec:
    """How to build one kind of resource and how many of it may exist at once.

    Args:
        kind: a short name ("python-repl"); with `params` it identifies the pool.
        factory: builds a new resource (called outside any lock; may be slow).
        max_size: most resources of this spec alive at once (in use + idle).
        reusable: after a run releases it, keep it (after `reset()`) for the next caller
            instead of closing it. Leave False when state must never cross runs.
        max_idle: how many released resources to keep when reusable.
        params: settings that make two specs different pools (limits, images, ...).
    """

    kind: str
    factory: Callable[[], Any] = field(compare=False, hash=False)
    max_size: int = 4
    reusable: bool = False
    max_idle: int = 2
    params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.max_size < 1:
            raise ValueError(f"resource spec {self.kind!r}: max_size must be at least 1")

    @property
    def key(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """Pool identity: the kind and its params (the factory and sizes are not part of it)."""
        return (self.kind, self.params)
