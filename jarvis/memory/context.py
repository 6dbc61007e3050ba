"""Context injection: the most relevant memory for a prompt, as system-prompt text.

`jarvis ask` and `Jarvis.ask_full` call `memory_context(store, prompt, top_k)` and append the
text to the system prompt, so the model can answer from the user's notes and cite them.
"""

from __future__ import annotations

from typing import Any

from jarvis.memory.query import MAX_QUERY_CHARS, MAX_TERMS, STOPWORDS, query_terms

MAX_CHUNK_CHARS = 2_000  # per chunk shown to the model
MAX_CONTEXT_CHARS = 8_000  # all chunks together

HEADER = ("Relevant passages from the user's memory (their stored notes and indexed files). "
          "Use them when they help answer, and cite them by number and source, e.g. "
          "[1] notes.md. Ignore them when they are not relevant.")


def _context_query(prompt: str) -> str:
    """The words of a prompt worth searching for: a long prompt is cut to its first words;
    stop words, 1-character words and small numbers (which match almost anything) are left
    out, so "how are you?" brings no context at all."""
    terms = query_terms(prompt[: MAX_QUERY_CHARS * 4], max_terms=MAX_TERMS, strict=False)
    useful = [t for t in terms if len(t) > 1 and t not in STOPWORDS
              and not (t.isdigit() and len(t) < 3)]
    return " ".join(useful)


def _is_empty(memory: Any) -> bool:
    is_empty = getattr(memory, "is_empty", None)
    return bool(is_empty()) if callable(is_empty) else memory.count() == 0


def memory_context(memory: Any, query: str, top_k: int = 3) -> tuple[str, list[str]]:
    """(text for the system prompt, distinct sources used), or ("", []) when the store is
    empty or nothing matches. Each passage is numbered and labelled with its source and
    position (chunk and lines) so the model can cite it."""
    if memory is None or not isinstance(query, str) or not query.strip():
        return "", []
    if _is_empty(memory):
        return "", []
    search = _context_query(query)
    if not search:
        return "", []
    results = memory.retrieve(search, top_k=max(1, min(int(top_k), 20)))
    if not results:
        return "", []
    parts = [HEADER]
    sources: list[str] = []
    used = len(HEADER)
    for number, result in enumerate(results, 1):
        body = result.content
        if len(body) > MAX_CHUNK_CHARS:
            body = body[:MAX_CHUNK_CHARS] + " [...]"
        citation = getattr(result, "citation", None) or result.source or "(no source)"
        block = f"[{number}] {citation}\n{body}"
        if used + len(block) > MAX_CONTEXT_CHARS and number > 1:
            break
        parts.append(block)
        used += len(block)
        if result.source not in sources:
            sources.append(result.source)
    return "\n\n".join(parts), sources
