"""Memory: a SQLite full-text store (FTS5, BM25), chunking, folder indexing, context injection.

Nothing heavy is imported here: `jarvis.memory.sqlite` imports sqlite-utils only when a store
is opened, so the tools and CLI commands that mention memory stay cheap to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jarvis.memory.sqlite import SQLiteMemory
    from jarvis.memory.types import MemoryBackend, RetrievalResult

__all__ = ["MemoryBackend", "RetrievalResult", "SQLiteMemory"]

_LAZY = {
    "SQLiteMemory": "jarvis.memory.sqlite",
    "MemoryBackend": "jarvis.memory.types",
    "RetrievalResult": "jarvis.memory.types",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'jarvis.memory' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
