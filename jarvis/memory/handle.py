"""MemoryHandle: the store `Jarvis.memory` gives, with OpenJarvis's memory-handle methods.

It is a SQLiteMemory (every store method works as before) plus `index(path)` and
`search(query, top_k=)`; `stats()` has OpenJarvis's `backend` and `count` keys already.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jarvis.memory.indexer import index_paths
from jarvis.memory.sqlite import SQLiteMemory, _folder_range


class MemoryHandle(SQLiteMemory):
    """A SQLiteMemory with `index` and `search` (see the module docstring)."""

    def index(self, path: str | os.PathLike[str], *, chunk_size: int | None = None,
              chunk_overlap: int | None = None) -> dict[str, Any]:
        """Index a file or folder, as `jarvis memory index PATH` does (unchanged files are
        skipped, vanished ones removed). `chunk_size`/`chunk_overlap` are characters
        (default: the store's). Returns `chunks` (added now), `doc_ids` (every file document
        now stored for `path`), `path` (resolved) and the index job's counts."""
        summary = index_paths(self, [path], chunk_size=chunk_size, chunk_overlap=chunk_overlap)
        resolved = str(Path(path).expanduser().resolve())
        low, high = _folder_range(resolved)
        with self._reader() as conn:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM documents WHERE kind = 'file' AND (source = ? OR (source >= ? "
                "AND source < ?)) ORDER BY source", (resolved, low, high))]
        return {"chunks": summary.chunks_added, "doc_ids": ids, "path": resolved,
                **summary.to_dict()}

    def search(self, query: str, *, top_k: int = 5) -> list[dict[str, Any]]:
        """`retrieve` as dicts: content, score, source, metadata, position, ..."""
        return [r.to_dict() for r in self.retrieve(query, top_k=top_k)]
