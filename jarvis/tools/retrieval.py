"""retrieval: search the memory store and return passages with their source and position.

The store comes by constructor injection (`RetrievalTool(backend=store)`; the SDK passes its
memory store). Built from the CLI with only `config`, the tool opens the configured store on
its first call. With neither, a call fails and says how to configure one.
"""

from __future__ import annotations

from typing import Any

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolResult
from jarvis.errors import JarvisError, UserError
from jarvis.tools.base import BaseTool
from jarvis.tools.spec import ToolSpec

MAX_QUERY_CHARS = 1_000
MAX_TOP_K = 20

NO_BACKEND = ("no memory backend configured: build the tool with a store, e.g. "
              "{cls}(backend=SQLiteMemory(db_path=\"memory.db\")), or use it through Jarvis, "
              "which passes its memory store")


class MemoryToolBase(BaseTool):
    """Shared plumbing of the memory tools: the injected store and argument checks."""

    # The memory store goes to `backend` (the reference's name); the config opens the
    # configured store when none is given (`jarvis mcp serve`, a bare build).
    needs = {"backend": "memory", "config": "config"}

    def __init__(self, backend: Any = None, config: Any = None) -> None:
        self.backend = backend
        self._config = config

    def _store(self) -> tuple[Any, ToolResult | None]:
        """The store, or a failed result saying none is configured."""
        if self.backend is None and self._config is not None and self._config.memory.enabled:
            from jarvis.memory import open_memory

            self.backend = open_memory(self._config)
        if self.backend is None:
            return None, ToolResult.failure(self.spec.name,
                                            NO_BACKEND.format(cls=type(self).__name__),
                                            ErrorType.EXECUTION)
        return self.backend, None

    def _fail(self, message: str, error_type: ErrorType = ErrorType.INVALID_ARGS) -> ToolResult:
        return ToolResult.failure(self.spec.name, message, error_type)

    def _query(self, params: dict[str, Any]) -> str | ToolResult:
        query = params.get("query")
        if not isinstance(query, str):
            return self._fail("query must be a string")
        if len(query) > MAX_QUERY_CHARS:
            return self._fail(f"query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}."
                              f" Search with a few key words")
        from jarvis.memory.query import query_terms

        if not query_terms(query, strict=False):
            return self._fail("query has no words to search for; give a few key words in plain "
                              "text")
        return query

    def _top_k(self, params: dict[str, Any], default: int, most: int) -> int | ToolResult:
        top_k = params.get("top_k", default)
        if top_k is None:
            return default
        if isinstance(top_k, float) and top_k.is_integer():
            top_k = int(top_k)  # JSON Schema counts 5.0 as an integer, and models send it
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= most:
            return self._fail(f"top_k must be an integer from 1 to {most}, got {top_k!r}")
        return top_k

    def _search(self, params: dict[str, Any], default_k: int, most_k: int,
                **filters: Any) -> tuple[str, list[Any]] | ToolResult:
        """Validate, then search: (query, results) or a failed ToolResult."""
        query = self._query(params)
        if isinstance(query, ToolResult):
            return query
        top_k = self._top_k(params, default_k, most_k)
        if isinstance(top_k, ToolResult):
            return top_k
        store, failure = self._store()
        if failure is not None:
            return failure
        try:
            return query, store.retrieve(query, top_k=top_k, **filters)
        except UserError as exc:
            return self._fail(str(exc))
        except JarvisError as exc:
            return self._fail(str(exc), ErrorType.EXECUTION)
        except Exception as exc:  # a broken database file, a full disk: report, never raise
            return self._fail(f"memory search failed: {exc}", ErrorType.EXECUTION)

    @staticmethod
    def _labels(results: list[Any]) -> frozenset[str]:
        """Private always; untrusted too when any hit was not written by the person (an
        indexed file, a model's note, an entry of unknown origin)."""
        if all(getattr(r, "written_by", "unknown") == "person" for r in results):
            return frozenset({"private"})
        return frozenset({"private", "untrusted"})

    def _empty_answer(self, store: Any, query: str) -> ToolResult:
        is_empty = getattr(store, "is_empty", None)
        empty = is_empty() if callable(is_empty) else store.count() == 0
        if empty:
            text = ("Memory is empty: nothing has been stored or indexed yet, so there is "
                    "nothing to search.")
        else:
            text = f"No stored memory matches {query!r}."
        return ToolResult(tool_name=self.spec.name, content=text,
                          metadata={"results": 0, "empty_store": bool(empty), "sources": []})


def format_results(query: str, results: list[Any]) -> str:
    """Numbered passages, each headed by its source and position (scores are in metadata:
    they mean little to a model and nothing to a citation)."""
    lines = [f"Found {len(results)} result{'s' if len(results) != 1 else ''} for {query!r}:"]
    for number, r in enumerate(results, 1):
        lines.append("")
        origin = getattr(r, "origin", "")
        lines.append(f"[{number}] {r.citation}" + (f" [{origin}]" if origin else ""))
        lines.append(r.content)
    return "\n".join(lines)


@ToolRegistry.register("retrieval")
class RetrievalTool(MemoryToolBase):
    """Search the memory backend for relevant context."""

    tool_id = "retrieval"

    def __init__(self, backend: Any = None, top_k: int = 5, config: Any = None) -> None:
        super().__init__(backend=backend, config=config)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            from jarvis.errors import ConfigError

            raise ConfigError(f"retrieval top_k must be an integer from 1 to {MAX_TOP_K}, "
                              f"got {top_k!r}")
        self.top_k = top_k

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(
            name=self.tool_id,
            description="Search the memory backend for relevant context: the user's stored notes "
                        "and indexed files. Returns the best-matching passages, each with its "
                        "source and position so you can cite it. The query is plain text "
                        "(key words work best).",
            parameters={
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What to search for, in plain text",
                              "maxLength": MAX_QUERY_CHARS},
                    "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K,
                              "description": f"How many passages to return (default {self.top_k})"},
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
        found = self._search(params, self.top_k, MAX_TOP_K)
        if isinstance(found, ToolResult):
            return found
        query, results = found
        if not results:
            return self._empty_answer(self.backend, query)
        return ToolResult(
            tool_name=self.spec.name,
            content=format_results(query, results),
            metadata={"results": len(results),
                      "sources": list(dict.fromkeys(r.source for r in results)),
                      "citations": [r.citation for r in results],
                      "scores": [r.score for r in results],
                      "written_by": [getattr(r, "written_by", "unknown") for r in results]},
            labels=self._labels(results),
        )
