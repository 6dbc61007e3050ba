"""Memory: a SQLite full-text store (FTS5, BM25), chunking, folder indexing, context injection.

Nothing heavy is imported here: `jarvis.memory.sqlite` imports sqlite-utils only when a store
is opened, so the tools and CLI commands that mention memory stay cheap to import.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jarvis._lazy import lazy_getattr

if TYPE_CHECKING:
    from jarvis.memory.handle import MemoryHandle
    from jarvis.memory.sqlite import SQLiteMemory
    from jarvis.memory.types import MemoryBackend, RetrievalResult

__all__ = ["MemoryBackend", "MemoryHandle", "RetrievalResult", "SQLiteMemory", "memory_path", "open_memory"]

_LAZY = {
    "MemoryHandle": "jarvis.memory.handle",
    "SQLiteMemory": "jarvis.memory.sqlite",
    "MemoryBackend": "jarvis.memory.types",
    "RetrievalResult": "jarvis.memory.types",
}


__getattr__ = lazy_getattr("jarvis.memory", _LAZY, globals())


def memory_path(config: Any = None) -> Path:
    """The store's file: memory.db_path from the config (relative to the config file's
    folder), else JARVIS_HOME/memory.db."""
    from jarvis.core.paths import state_path

    configured = config.memory.db_path if config is not None else ""
    if configured:
        return Path(config.resolve_path(configured))
    return state_path(None, "memory.db")


def open_memory(config: Any = None, bus: Any = None,
                db_path: str | os.PathLike[str] | None = None) -> SQLiteMemory:
    """Open the SQLiteMemory a config describes (its path and chunking settings), as a
    MemoryHandle (it also has OpenJarvis's `index` and `search`)."""
    from jarvis.memory.handle import MemoryHandle

    options: dict[str, Any] = {}
    if config is not None:
        options = {"chunk_size": config.memory.chunk_size,
                   "chunk_overlap": config.memory.chunk_overlap}
    return MemoryHandle(memory_path(config) if db_path is None else db_path, bus=bus, **options)
