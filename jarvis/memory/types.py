"""Records and the protocol shared by memory backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jarvis.errors import JarvisError


class MemoryStoreError(JarvisError):
    """The memory database failed (locked for too long, damaged, disk full); not a misuse."""


@dataclass(slots=True)
class RetrievalResult:
    """One retrieved chunk: its text, where it came from, and how well it matched.

    `score` is the BM25 relevance (higher is better). `chunk_index` is the chunk's position in
    its document (0-based); `start`/`end` are character offsets and `line_start`/`line_end`
    1-based line numbers in the original text.

    `written_by` says who wrote the entry (docs/trust.md): "person" (the CLI, the SDK),
    "indexed" (a file indexed into memory: the person's, but its text may come from anyone),
    "model" (memory_store in a run; `provenance` has the run id and what it had read), or
    "unknown" (stored before jarvis recorded it, or a backend that does not say). Only a
    person's entries are trusted; the others taint the run that reads them.
    """

    content: str
    source: str = ""
    score: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    chunk_index: int = 0
    doc_id: str = ""
    chunk_id: int = 0
    start: int = 0
    end: int = 0
    line_start: int = 1
    line_end: int = 1
    written_by: str = "unknown"
    provenance: dict[str, Any] = field(default_factory=dict)

    @property
    def trusted(self) -> bool:
        """Written by the person (not a model, not an indexed file, not unknown)."""
        return self.written_by == "person"

    @property
    def origin(self) -> str:
        """Who wrote it, as a person reads it: "your note", "indexed file", "written by a
        model in run R", "origin unknown"."""
        if self.written_by == "person":
            return "your note"
        if self.written_by == "indexed":
            return "indexed file"
        if self.written_by == "model":
            run = self.provenance.get("run_id") if isinstance(self.provenance, dict) else None
            return f"written by a model in run {run}" if run else "written by a model"
        return "origin unknown"

    @property
    def position(self) -> str:
        """Where the chunk sits in its source, for citations: "chunk 3, lines 40-62"."""
        lines = (f"line {self.line_start}" if self.line_start == self.line_end
                 else f"lines {self.line_start}-{self.line_end}")
        return f"chunk {self.chunk_index + 1}, {lines}"

    @property
    def citation(self) -> str:
        """Source and position in one string: "notes.md (chunk 1, lines 1-20)". A source
        that a model (or an unknown writer) chose is shown as the label it is, never as if it
        were a real file: `model-written note labelled "notes.md" (chunk 1, ...)`."""
        if self.written_by in ("person", "indexed"):
            return f"{self.source or '(no source)'} ({self.position})"
        label = " ".join(self.source.split())[:200] if self.source else ""
        kind = "model-written note" if self.written_by == "model" else "unverified note"
        named = f" labelled {label!r}" if label else ""
        return f"{kind}{named} ({self.position})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content, "source": self.source, "score": self.score,
            "metadata": dict(self.metadata), "chunk_index": self.chunk_index,
            "doc_id": self.doc_id, "chunk_id": self.chunk_id, "start": self.start,
            "end": self.end, "line_start": self.line_start, "line_end": self.line_end,
            "position": self.position, "written_by": self.written_by,
            "provenance": dict(self.provenance),
        }


@runtime_checkable
class MemoryBackend(Protocol):
    """What a memory store offers the tools, the context injection and the SDK."""

    def store(self, content: str, source: str = "",
              metadata: dict[str, Any] | None = None) -> str: ...

    def retrieve(self, query: str, top_k: int = 5, source: str | None = None,
                 metadata: dict[str, Any] | None = None) -> list[RetrievalResult]: ...

    def delete(self, doc_id: str) -> bool: ...

    def clear(self) -> None: ...

    def count(self) -> int: ...

    def close(self) -> None: ...
