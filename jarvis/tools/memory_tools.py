"""The memory tools: memory_store, memory_retrieve, memory_search and memory_index.

Like `retrieval`, each takes the store by constructor injection (`backend=`). memory_index
reads files from disk, so it requires confirmation and goes through the same path policy as
file_read (`jarvis.security.paths`): the workspace plus `[tools.memory_index] allowed_dirs =
["~/notes"]` (without it, the folders of `[tools.file_read] allowed_dirs` apply), secrets
refused unless listed in `allowed_secret_paths`.
"""

from __future__ import annotations

import json
from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.errors import JarvisError, UserError
from jarvis.security.paths import PathDenied, PathPolicy, resolve_dirs
from jarvis.tools.retrieval import MAX_QUERY_CHARS, MemoryToolBase, RetrievalTool
from jarvis.tools.spec import ToolSpec

MAX_STORE_CHARS = 20_000
MAX_SOURCE_CHARS = 500
MAX_METADATA_CHARS = 4_000
MAX_SEARCH_K = 50
SNIPPET_CHARS = 240
DEFAULT_INDEX_FILES = 2_000


@ToolRegistry.register("memory_store")
class MemoryStoreTool(MemoryToolBase):
    """Store content in the memory backend."""

    tool_id = "memory_store"

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="memory_store",
            description="Store content in the memory backend so it can be found later by "
                        "retrieval and memory_search. Long text is split into chunks.",
            parameters={
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The text to remember",
                                "maxLength": MAX_STORE_CHARS},
                    "source": {"type": "string", "maxLength": MAX_SOURCE_CHARS,
                               "description": "Where it came from, e.g. 'conversation' or a "
                                              "title (optional)"},
                    "metadata": {"type": "object",
                                 "description": "Extra JSON fields kept with it (optional)"},
                },
                "required": ["content"],
            },
            category="memory",
            latency_estimate=0.01,
            timeout_seconds=30.0,
            output_labels=frozenset(),
            egress="persist",
            metadata={"persist": "memory"},
        )

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        from jarvis.trust.labels import Egress

        return [Egress.of("persist", "memory", method="store",
                          payload=[arguments.get("content"), arguments.get("source"),
                                   arguments.get("metadata")])]

    def invoke(self, arguments: dict[str, Any], context: Any = None) -> Any:
        # Through the executor for a model: the entry records that a model wrote it, in which
        # run, having read what; read back, it is untrusted (and private).
        grant = getattr(context, "grant", None)
        if grant is None or grant.by_person:
            return self.execute(**arguments)
        trust = getattr(context, "trust", None)
        provenance: dict[str, Any] = {"run_id": getattr(context, "run_id", None),
                                      "call_id": getattr(context, "call_id", None)}
        if trust is not None:
            summary = trust.summary()
            provenance.update(
                tainted=summary["tainted"], private=summary["private"],
                sources=sorted({m["tool"] for m in summary["tainted_by"] + summary["private_by"]
                                if m.get("tool")}))
        return self.execute(**arguments, _written_by="model", _provenance=provenance)

    def execute(self, **params: Any) -> ToolResult:
        written_by = params.pop("_written_by", "person")
        provenance = params.pop("_provenance", None)
        content = params.get("content")
        source = params.get("source") or ""
        metadata = params.get("metadata")
        if not isinstance(content, str) or not content.strip():
            return self._fail("content must be a non-empty string")
        if len(content) > MAX_STORE_CHARS:
            return self._fail(f"content is {len(content)} characters; the limit is "
                              f"{MAX_STORE_CHARS}. Store it in parts")
        if not isinstance(source, str) or len(source) > MAX_SOURCE_CHARS or "\x00" in source:
            return self._fail(f"source must be a string of at most {MAX_SOURCE_CHARS} characters")
        if metadata is not None:
            if not isinstance(metadata, dict):
                return self._fail("metadata must be a JSON object")
            try:
                size = len(json.dumps(metadata, ensure_ascii=False))
            except (TypeError, ValueError, RecursionError):
                return self._fail("metadata must be JSON, nested at most a few hundred levels")
            if size > MAX_METADATA_CHARS:
                return self._fail(f"metadata is {size} characters as JSON; the limit is "
                                  f"{MAX_METADATA_CHARS}")
        store, failure = self._store()
        if failure is not None:
            return failure
        try:
            if _takes_writer(store):
                doc_id = store.store(content, source=source, metadata=metadata,
                                     written_by=written_by, provenance=provenance)
            else:  # a backend that cannot record it: its entries read back as unknown
                doc_id = store.store(content, source=source, metadata=metadata)
        except UserError as exc:
            return self._fail(str(exc))
        except JarvisError as exc:
            return self._fail(str(exc), ErrorType.EXECUTION)
        except Exception as exc:
            return self._fail(f"storing failed: {exc}", ErrorType.EXECUTION)
        where = f" from {source!r}" if source else ""
        return ToolResult(tool_name="memory_store",
                          content=f"Stored {len(content)} characters{where} (id {doc_id}).",
                          metadata={"doc_id": doc_id, "source": source, "chars": len(content),
                                    "written_by": written_by})


def _takes_writer(store: Any) -> bool:
    import inspect

    try:
        return "written_by" in inspect.signature(store.store).parameters
    except (TypeError, ValueError):
        return False


@ToolRegistry.register("memory_retrieve")
class MemoryRetrieveTool(RetrievalTool):
    """Retrieve relevant content from the memory backend."""

    tool_id = "memory_retrieve"


@ToolRegistry.register("memory_search")
class MemorySearchTool(MemoryToolBase):
    """Full-text search across stored memory."""

    tool_id = "memory_search"

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="memory_search",
            description="Full-text search across stored memory: a short list of matches (source, "
                        "position and a snippet), optionally only from one source. Use "
                        "retrieval to read whole passages.",
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Words to search for, plain text",
                              "maxLength": MAX_QUERY_CHARS},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_K,
                              "description": "How many matches (default 10)"},
                    "source": {"type": "string", "maxLength": MAX_SOURCE_CHARS,
                               "description": "Only matches from this source or folder"},
                },
                "required": ["query"],
            },
            category="memory",
            latency_estimate=0.01,
            timeout_seconds=30.0,
            output_labels=frozenset({"private"}),  # + untrusted per result (see _labels)
            egress="none",
        )

    def execute(self, **params: Any) -> ToolResult:
        source = params.get("source") or None
        if source is not None and (not isinstance(source, str) or len(source) > MAX_SOURCE_CHARS):
            return self._fail(f"source must be a string of at most {MAX_SOURCE_CHARS} characters")
        found = self._search(params, 10, MAX_SEARCH_K, source=source)
        if isinstance(found, ToolResult):
            return found
        query, results = found
        if not results:
            return self._empty_answer(self.backend, query)
        lines = [f"{len(results)} match{'es' if len(results) != 1 else ''} for {query!r}:"]
        for number, r in enumerate(results, 1):
            snippet = " ".join(r.content.split())
            if len(snippet) > SNIPPET_CHARS:
                snippet = snippet[:SNIPPET_CHARS] + "..."
            origin = getattr(r, "origin", "")
            lines.append(f"[{number}] {r.citation}" + (f" [{origin}]" if origin else "")
                         + f": {snippet}")
        return ToolResult(tool_name="memory_search", content="\n".join(lines),
                          metadata={"results": len(results),
                                    "matches": [{"source": r.source, "position": r.position,
                                                 "score": r.score, "doc_id": r.doc_id,
                                                 "written_by": getattr(r, "written_by",
                                                                       "unknown")}
                                                for r in results]},
                          labels=self._labels(results))


@ToolRegistry.register("memory_index")
class MemoryIndexTool(MemoryToolBase):
    """Index a file or directory into the memory backend."""

    tool_id = "memory_index"
    sequential = True  # two index jobs in one turn would only fight over the write lock

    def __init__(self, backend: Any = None, config: Any = None,
                 allowed_dirs: list[str] | None = None,
                 max_files: int = DEFAULT_INDEX_FILES,
                 allowed_secret_paths: list[str] | None = None) -> None:
        super().__init__(backend=backend, config=config)
        setting = "[tools.memory_index]"
        if allowed_dirs is None and allowed_secret_paths is None:
            # Without settings of its own, memory_index may read only where file_read may:
            # indexing a folder and then searching it is reading its files.
            allowed_dirs, allowed_secret_paths = _file_read_settings(config)
            setting = "[tools.file_read]"
        self.allowed_dirs = resolve_dirs(allowed_dirs)
        self.policy = PathPolicy.for_tool(allowed_dirs, allowed_secret_paths, config,
                                          setting=setting)
        self.max_files = max_files

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name="memory_index",
            description="Index a file or directory into the memory backend (text, Markdown and "
                        "source files; binary files are skipped). Files unchanged since the last "
                        f"index are skipped. At most {self.max_files} files per call."
                        + self.policy.describe(),
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File or folder to index"},
                },
                "required": ["path"],
            },
            category="memory",
            latency_estimate=2.0,
            requires_confirmation=True,
            timeout_seconds=600.0,
            output_labels=frozenset({"private"}),  # what it found: the person's file names
            egress="persist",
            metadata={"persist": "memory"},
        )

    def execute(self, **params: Any) -> ToolResult:
        raw = params.get("path")
        try:
            path = self.policy.check(raw)
        except PathDenied as exc:
            return self._fail(str(exc), ErrorType.DENIED)
        except ValueError as exc:
            return self._fail(str(exc))
        if not path.exists():
            # Same words as file_read: a missing path and a forbidden one look alike.
            return self._fail(f"file or folder not found: {raw}", ErrorType.EXECUTION)
        store, failure = self._store()
        if failure is not None:
            return failure
        from jarvis.memory.indexer import index_paths

        try:
            summary = index_paths(store, [path], policy=self.policy, max_files=self.max_files)
        except PermissionError as exc:
            return self._fail(str(exc), ErrorType.DENIED)
        except JarvisError as exc:
            return self._fail(str(exc), ErrorType.EXECUTION)
        except Exception as exc:
            return self._fail(f"indexing failed: {exc}", ErrorType.EXECUTION)
        return ToolResult(tool_name="memory_index", content=summary.describe(),
                          metadata=summary.to_dict())


def _file_read_settings(config: Any) -> tuple[Any, Any]:
    """[tools.file_read] allowed_dirs and allowed_secret_paths from a JarvisConfig (None: not
    set, or no config)."""
    tools = getattr(config, "tools", None)
    try:
        settings = tools.settings if tools is not None else {}
    except (AttributeError, ValueError):
        return None, None
    table = settings.get("file_read") if isinstance(settings, dict) else None
    if not isinstance(table, dict):
        return None, None
    return table.get("allowed_dirs"), table.get("allowed_secret_paths")
