"""What `jarvis mcp serve` tells clients beyond names and input schemas.

- Every tool gets a `title` and the three behaviour hints (`readOnlyHint`, `destructiveHint`,
  `idempotentHint`) so clients can decide what to confirm: from the tool's own
  `metadata["mcp_annotations"]` when it has them (a proxied MCP server's tool passes its
  server's annotations through unchanged), else from BUILTIN_HINTS, else conservative
  defaults (not read-only, destructive exactly when the tool requires confirmation).
- A tool with `metadata["output_schema"]` (proxied MCP tools carry their server's) is listed
  with that `outputSchema`, and its results carry structured content.
- jarvis's memory is served as resources: `memory://documents/ID`, one per stored document,
  text/plain, newest first; with `--memory`, or by default when a tool that reads the memory
  is served anyway.
- A result goes out as an MCP CallToolResult (`to_call_tool_result`).
"""

from __future__ import annotations

import json
from typing import Any

from jarvis.core.types import ImageBlock, ToolResult

# Built-in tools whose behaviour is known: (read only, idempotent, open world).
BUILTIN_HINTS: dict[str, tuple[bool, bool, bool]] = {
    "calculator": (True, True, False),
    "think": (True, True, False),
    "file_read": (True, True, False),
    "retrieval": (True, True, False),
    "memory_retrieve": (True, True, False),
    "memory_search": (True, True, False),
    "memory_store": (False, False, False),
    "memory_index": (False, True, False),
    "llm": (True, False, True),
    "repl": (False, False, False),
    "code_interpreter": (False, False, False),
    "list_scheduled_tasks": (True, True, False),
    "schedule_task": (False, False, False),
    "pause_scheduled_task": (False, True, False),
    "resume_scheduled_task": (False, True, False),
    "cancel_scheduled_task": (False, True, False),
    "mcp_read_resource": (True, True, True),
    "mcp_adapter": (False, False, True),
    "http_request": (False, False, True),
    "web_fetch": (True, True, True),
    "web_search": (True, True, True),
    "channel_send": (False, False, True),
    "channel_list": (True, True, False),
    "channel_status": (True, True, False),
}

MEMORY_SCHEME = "memory://documents/"
MEMORY_READERS = frozenset({"memory_search", "memory_retrieve", "retrieval"})
MAX_MEMORY_RESOURCES = 1000
MAX_MEMORY_READ_CHARS = 2_000_000


def title_of(spec: Any) -> str:
    """A human title: the tool's own, else its name in words ("file_read" -> "File read")."""
    title = spec.metadata.get("title")
    if isinstance(title, str) and title.strip():
        return title.strip()
    words = spec.name.replace("__", ": ").replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def annotations_of(spec: Any) -> dict[str, Any]:
    """The MCP ToolAnnotations (wire names) for a jarvis tool."""
    own = spec.metadata.get("mcp_annotations")
    out: dict[str, Any] = dict(own) if isinstance(own, dict) else {}
    if spec.metadata.get("mcp_server"):
        # A proxied server's tool: its hints as the server gave them (an absent hint has the
        # spec's default, e.g. destructive, which a value filled in here would contradict).
        out.setdefault("title", title_of(spec))
        return out
    known = BUILTIN_HINTS.get(spec.name)
    read_only = out.get("readOnlyHint", known[0] if known else False)
    out.setdefault("readOnlyHint", bool(read_only))
    out.setdefault("destructiveHint", bool(spec.requires_confirmation and not read_only))
    out.setdefault("idempotentHint", bool(known[1]) if known else bool(read_only))
    if known is not None:
        out.setdefault("openWorldHint", known[2])
    out.setdefault("title", title_of(spec))
    return out


def tool_entry(spec: Any) -> dict[str, Any]:
    """The `tools/list` entry for a jarvis tool."""
    entry = spec.to_mcp_tool()
    entry["annotations"] = annotations_of(spec)
    entry["title"] = entry["annotations"]["title"]
    schema = spec.metadata.get("output_schema")
    if isinstance(schema, dict) and schema.get("type") == "object":
        entry["outputSchema"] = schema
    return entry


def structured_for(result: Any, has_schema: bool) -> dict[str, Any] | None:
    """Structured content for a served result: the tool's own, or (for a tool with an output
    schema) its text when that is a JSON object."""
    structured = result.metadata.get("structured_content")
    if isinstance(structured, dict):
        return structured
    if has_schema and result.success:
        try:
            parsed = json.loads(result.content)
        except (ValueError, TypeError, RecursionError):
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


class MemoryResources:
    """jarvis's memory store as MCP resources (opened on first use, read only)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self._memory: Any = None

    def _store(self) -> Any:
        if self._memory is None:
            from jarvis.memory import open_memory

            self._memory = open_memory(self.config)
        return self._memory

    def list(self) -> list[dict[str, Any]]:
        """Resource entries (wire names) for the newest documents."""
        rows = self._store().documents(limit=MAX_MEMORY_RESOURCES)
        out = []
        for row in rows:
            name = row["source"] or row["id"]
            out.append({"uri": MEMORY_SCHEME + row["id"], "name": name[:200],
                        "title": f"memory: {name}"[:200], "mimeType": "text/plain",
                        "description": f"{row['kind']} in jarvis memory, {row['chars']} characters",
                        "size": row["chars"]})
        return out

    def read(self, uri: str) -> str | None:
        """The document's text, or None when `uri` names no stored document."""
        if not uri.startswith(MEMORY_SCHEME):
            return None
        doc_id = uri[len(MEMORY_SCHEME):]
        if not doc_id or len(doc_id) > 64:
            return None
        text = self._store().document(doc_id)
        if text is None:
            return None
        if len(text) > MAX_MEMORY_READ_CHARS:
            cut = len(text) - MAX_MEMORY_READ_CHARS
            text = text[:MAX_MEMORY_READ_CHARS] + f"\n[... {cut} characters cut]"
        return text

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None


def to_call_tool_result(result: ToolResult) -> Any:
    """A jarvis ToolResult as an MCP CallToolResult (for `jarvis mcp serve`). Text that is
    not valid Unicode (a lone surrogate, e.g. from a proxied server's "\\udc80") becomes
    U+FFFD: the SDK could not send it, and the server would stop."""
    from mcp.types import CallToolResult, ImageContent, TextContent

    from jarvis.core.text import escape, replace

    content: list[Any] = []
    for block in result.all_blocks():
        if isinstance(block, ImageBlock):
            content.append(ImageContent(type="image", data=block.data, mime_type=block.mimeType))
        else:
            content.append(TextContent(type="text", text=replace(block.text)))
    if not result.success and result.blocks:
        content.insert(0, TextContent(type="text", text=replace(result.content)))
    structured = escape(result.metadata.get("structured_content"))[0]
    return CallToolResult(content=content, is_error=not result.success,
                          structured_content=structured if isinstance(structured, dict) else None)
