"""`McpTool`: one tool of a configured MCP server as an ordinary jarvis tool.

Named `NAME__tool` (`[mcp.servers.NAME]` in config.toml): its JSON schema is the server's,
every call goes through the ToolExecutor like any other tool, and it follows the protocol's
defaults (docs/trust.md): a tool that says nothing is destructive and open-world, and a
server's annotations count only when the person marked the server `trusted = true`; so a
tool of an untrusted server asks first, and counts as egress to its server with untrusted
results. `jarvis.mcp.manager` makes these from the server's tool list
and registers them; the bridge tools over them are in `jarvis.mcp.adapter`.

Imported with the built-in catalog (through the adapter), so it must not import `mcp`.
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Any

from jarvis.core.types import ToolResult
from jarvis.errors import ToolDefinitionError
from jarvis.tools.base import BaseTool
from jarvis.tools.context import ToolContext
from jarvis.tools.spec import ToolSpec

if TYPE_CHECKING:
    from jarvis.mcp.cache import RemoteTool

CALL_MARGIN = 2.0  # the executor's own timeout is ours plus this, so ours fires first

DEFAULT_DESCRIPTION = "Tool {remote!r} of MCP server {server!r}."
MAX_DESCRIPTION_CHARS = 4000


class McpTool(BaseTool):
    """One tool of an MCP server; calls go to the server over a warm, shared session.

    Both call paths are native: `invoke` blocks on the background loop, `ainvoke` awaits it.
    The tool bounds its own time (connect + call timeouts, enforced on the loop and again by
    the blocking wait), so the executor need not spend a watchdog thread on it (`inline`);
    inside a running event loop it reports itself async, so `aexecute` never blocks that loop.
    """

    inline = True
    strict_arguments = False  # the server's schema and validation decide, not ours

    def __init__(self, manager: Any, server: str, remote: Any, local_name: str,
                 config: Any) -> None:
        self.manager = manager
        self.server = server
        self.remote_name = remote.name
        self.tool_id = local_name
        self.call_timeout = float(config.tool_timeouts.get(remote.name, config.timeout))
        description = remote.description.strip() or remote.title or DEFAULT_DESCRIPTION.format(
            remote=remote.name, server=server)
        if len(description) > MAX_DESCRIPTION_CHARS:  # it goes into every prompt
            description = description[:MAX_DESCRIPTION_CHARS] + " [...]"
        metadata: dict[str, Any] = {"mcp_server": server, "mcp_tool": remote.name}
        if not getattr(config, "trusted", False):
            # The description and schema are the server's text in every prompt: a run offered
            # this tool has read untrusted content before its first turn (the executor marks it).
            metadata["untrusted_description"] = f"MCP server {server!r}, not marked trusted"
        if remote.annotations:
            metadata["mcp_annotations"] = dict(remote.annotations)
        if remote.output_schema:
            metadata["output_schema"] = remote.output_schema
        if remote.title:
            metadata["title"] = remote.title
        labels, egress = provenance(config, remote)
        self._spec = ToolSpec(
            name=local_name,
            description=description,
            parameters=dict(remote.input_schema),
            category="mcp",
            requires_confirmation=requires_confirmation(config, remote),
            # Connecting may come first; our own timeouts fire before the executor's.
            timeout_seconds=config.connect_timeout + call_bound(config, self.call_timeout)
            + CALL_MARGIN,
            metadata=metadata,
            output_labels=labels,
            egress=egress,
        )

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        if self._spec.egress == "none":
            return []
        from jarvis.trust.labels import Egress

        return [Egress.of("mcp", self.server, method=self.remote_name, payload=[arguments])]

    @property
    def is_async(self) -> bool:
        import asyncio

        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def validate_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            return super().validate_arguments(arguments)
        except ToolDefinitionError:
            # The server's schema is not valid JSON Schema for us; the server validates.
            self.__dict__["_jarvis_validator"] = _AcceptAll()
            return arguments

    def _progress(self, context: ToolContext | None) -> Any:
        """Progress reports of this call, published as TOOL_PROGRESS on the executor's bus."""
        bus = context.bus if context is not None else None
        if bus is None:
            return None
        from jarvis.core.events import EventType

        def report(progress: float, total: float | None, message: str | None) -> None:
            bus.publish(EventType.TOOL_PROGRESS, {
                "tool": self._spec.name, "call_id": context.call_id, "run_id": context.run_id,
                "progress": progress, "total": total, "message": (message or "")[:500]})

        return report

    def _meta(self, context: ToolContext | None) -> dict[str, Any] | None:
        """A scheduled run's call carries its fence in `_meta`: the effect key (the same in
        every attempt of the occurrence, at this call's position), the attempt and the epoch,
        for a server that de-duplicates."""
        fence = context.fence if context is not None else None
        if fence is None:
            return None
        from jarvis.tools.fence import meta_for

        target = f"mcp {self.server}/{self.remote_name}"
        return meta_for(fence, fence.effect_key("mcp", target, fence.position("mcp", target)))

    def invoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        return self.manager.call(self.server, self.remote_name, self._spec.name, arguments,
                                 self.call_timeout, on_progress=self._progress(context),
                                 meta=self._meta(context))

    async def ainvoke(self, arguments: dict[str, Any], context: ToolContext | None = None) -> ToolResult:
        from jarvis.mcp.loop import background_loop

        return await background_loop().arun(self.manager.acall(
            self.server, self.remote_name, self._spec.name, arguments, self.call_timeout,
            on_progress=self._progress(context), meta=self._meta(context)))

    def execute(self, **params: Any) -> ToolResult:
        """Call the tool directly (outside an executor: no validation or confirmation)."""
        return self.invoke(params)

    def __repr__(self) -> str:
        return f"<McpTool {self._spec.name} ({self.remote_name!r} on server {self.server!r})>"


class _AcceptAll:
    def is_valid(self, instance: Any) -> bool:
        return True


def call_bound(config: Any, timeout: float) -> float:
    """How long one call may take in all: progress reports stretch `timeout` up to
    `max_timeout`, and a question to the person at the terminal (elicitation) pauses it."""
    from jarvis.mcp.capabilities import MAX_ANSWER_SECONDS, interactive

    most = max(timeout, config.max_timeout)
    if getattr(config, "elicitation", False) and interactive():
        most += MAX_ANSWER_SECONDS
    return most


def requires_confirmation(config: Any, tool: RemoteTool) -> bool:
    """Whether a call of this tool asks a person first: one listed in `confirm`; any tool of
    a server not marked `trusted` (its annotations are only its own claims, and the MCP
    defaults for a tool that says nothing are destructive and open-world); for a trusted
    server, a tool it does not mark read-only and not destructive=false."""
    if any(fnmatch.fnmatchcase(tool.name, p) for p in getattr(config, "confirm", []) or []):
        return True
    if not getattr(config, "trusted", False):
        return True
    ann = tool.annotations or {}
    if ann.get("readOnlyHint"):
        return False
    return ann.get("destructiveHint", True) is not False


def provenance(config: Any, tool: RemoteTool) -> tuple[frozenset[str], str]:
    """(output labels, egress kind) of a server's tool (docs/trust.md). A server not marked
    trusted: results both private and untrusted (a filesystem or mail server returns the
    person's data, written by anyone), and every call may send its arguments to the server
    (and beyond). A trusted server's annotations count: openWorldHint=false means its results
    are the person's own data (private) rather than also the world's; readOnlyHint with
    openWorldHint=false means a call sends nothing beyond this machine's server. An open-world
    tool says nothing about whose data it returns (a mailbox is open-world): both."""
    both = frozenset({"private", "untrusted"})
    if not getattr(config, "trusted", False):
        return both, "mcp"
    ann = tool.annotations or {}
    open_world = ann.get("openWorldHint", True) is not False
    labels = both if open_world else frozenset({"private"})
    egress = "none" if ann.get("readOnlyHint") and not open_world else "mcp"
    return labels, egress
