"""`jarvis mcp serve`: jarvis tools as an MCP server, over stdio or streamable HTTP.

Built on the SDK's low-level `Server` (not `MCPServer`), because a jarvis tool already has its
JSON schema: the schema is served as it is instead of being re-derived from a Python
signature. Every call goes through a ToolExecutor, so arguments are validated, timeouts and
output limits apply and failures come back as `isError` results with a readable message.

An entry point, so it sits beside `jarvis serve` (it uses this package's guard, limits and
runner, the executor and extensions); the MCP client it must not be confused with
(jarvis.mcp) sits below the SDK.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Callable
from typing import Any

import click

from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ToolCall
from jarvis.errors import UserError
from jarvis.tools.base import BaseTool
from jarvis.tools.executor import ToolExecutor


def parse_host_port(value: str) -> tuple[str, int]:
    """'HOST:PORT' (or ':PORT' for 127.0.0.1) -> (host, port); a bad value is a UserError.
    Port 0: a free port the system picks (the URL on stderr says which)."""
    host, sep, port_text = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) < 65536:
        raise UserError(f"--http needs HOST:PORT, e.g. 127.0.0.1:8765, got {value!r}")
    return host, int(port_text)


def _is_mcp_sourced(value: Any) -> bool:
    from jarvis.mcp.adapter import McpAdapterTool, McpTool

    return isinstance(value, McpTool) or value is McpAdapterTool


def select_tools(config: Any, names: list[str] | None,
                 system: Any = None) -> tuple[list[BaseTool], set[str]]:
    """The tools to serve and the names whose confirmation is given by naming them.

    Default (names None): every built-in, workspace and plugin tool that needs no
    confirmation (MCP servers' own tools are not re-served unless named); one that cannot be
    built here (the llm tool with no engine reachable) is named on stderr with the reason.
    Named tools are served as asked, or fail loudly; naming a tool that requires confirmation
    approves its calls. `system` (a Jarvis) gives each tool the services it declares
    (engine, model, memory, scheduler, ...); without it, only the config.
    """
    from jarvis.core.services import needed_services
    from jarvis.extensions import load_extensions
    from jarvis.tools.catalog import build_tool

    load_extensions(config)
    settings = config.tools.settings

    def services(name: str) -> dict[str, Any]:
        if system is None:
            return {"config": config}
        return system.services(needed_services(ToolRegistry.get(name)))

    if names is not None:
        for name in names:
            ToolRegistry.get(name)  # unknown names fail before anything is served
        tools = [build_tool(name, services(name), settings.get(name)) for name in names]
        # Tools that ask for some calls only (http_request's POST) are approved the same way.
        approved = {t.spec.name for t in tools
                    if t.spec.requires_confirmation or t.spec.metadata.get("confirmation")}
        return tools, approved
    entries = ToolRegistry.snapshot()[0]  # what is registered now: starts no MCP server
    enabled = config.tools.enabled
    tools = []
    for name, value in sorted(entries.items()):
        if _is_mcp_sourced(value) or (enabled is not None and name not in enabled):
            continue
        try:
            built = build_tool(name, services(name), settings.get(name))
        except Exception as exc:  # noqa: BLE001 - one tool that cannot be built is skipped, loudly
            click.echo(f"jarvis mcp serve: not serving {name}: {exc}", err=True)
            continue
        if not built.spec.requires_confirmation:
            tools.append(built)
    return tools, set()


def build_server(tools: list[BaseTool], executor: ToolExecutor, name: str = "jarvis",
                 memory: Any = None, per_connection: bool = False,
                 new_trust: Callable[[str], Any] | None = None) -> Any:
    """An SDK low-level Server whose tools/list and tools/call are the given jarvis tools
    (with titles, behaviour hints and output schemas: see jarvis.server.mcp_served); with
    `memory` (a MemoryResources), jarvis's memory documents are its resources.
    `per_connection`: each client connection is a run of its own (see _per_session), for a
    server many clients reach; its trust is `new_trust(run_id)` (run_trust: the grants of its
    time), or else a fork of the executor's."""
    from mcp.server import Server
    from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

    from jarvis.server.mcp_served import structured_for, to_call_tool_result, tool_entry

    listed = [Tool.model_validate(tool_entry(t.spec)) for t in tools]
    schemas = {t.name: t.input_schema for t in listed}
    has_output = {t.name for t in listed if t.output_schema}
    # Over HTTP many clients reach one server: each connection is a run of its own. Over
    # stdio the process has one client, whose calls all share its run.
    executor_for = (_per_session(executor, new_trust) if per_connection
                    else (lambda connection: executor))

    async def list_tools(ctx: Any, params: Any) -> Any:
        return ListToolsResult(tools=listed)

    async def call_tool(ctx: Any, params: Any) -> Any:
        call = ToolCall(id=f"mcp_{uuid.uuid4().hex[:12]}", name=params.name,
                        arguments=params.arguments or {})
        own = executor_for(_connection_of(ctx))
        try:
            result = await own.aexecute(call)
        except Exception as exc:  # noqa: BLE001 - the executor should not raise; never crash the server
            return CallToolResult(content=[TextContent(type="text", text=f"{type(exc).__name__}: {exc}")],
                                  is_error=True)
        finally:
            if per_connection and own is not executor and _single_exchange(ctx):
                # A 2026-protocol request is a run of its own and nothing can come after it:
                # release its run now. Left to the connection's garbage collection, four such
                # repl calls held the whole interpreter pool, and the fifth waited 30 s and
                # failed ("all 4 python-repl resources are in use").
                import anyio

                from jarvis.resources import release_run

                await anyio.to_thread.run_sync(release_run, own.run_id)
        structured = structured_for(result, params.name in has_output)
        if structured is not None:
            result.metadata["structured_content"] = structured
        return to_call_tool_result(result)

    handlers: dict[str, Any] = {}
    if memory is not None:
        handlers = _memory_handlers(memory)
    return Server(name, version=_version(), on_list_tools=list_tools, on_call_tool=call_tool,
                  get_tool_input_schema=schemas.get, **handlers)


def _single_exchange(ctx: Any) -> bool:
    """Whether a request came over the 2026 protocol, which has no sessions."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    return getattr(ctx, "protocol_version", None) in MODERN_PROTOCOL_VERSIONS


def _connection_of(ctx: Any) -> Any:
    """The client connection a request came on. The SDK makes a ServerSession per request;
    the Connection behind it lives as long as the client's session (stdio, or streamable
    HTTP with a session id), and a single-exchange request of the 2026 protocol has one of
    its own (that protocol has no sessions: a served repl keeps no state between its calls).
    No public accessor yet: without it, each request counts as a connection (nothing shared
    between clients either way)."""
    session = getattr(ctx, "session", None)
    return getattr(session, "_connection", session)


def _per_session(executor: ToolExecutor, new_trust: Callable[[str], Any] | None = None) -> Any:
    """executor_for(connection): the executor for one MCP client connection. Each connection is
    a run of its own (run id `<executor's run id>-N`), so what a tool keeps per run (a `repl`
    interpreter and its /tmp) is never shared between the clients of one `jarvis mcp serve
    --http`, and is released when the connection is gone; what one connection's calls read
    never taints another's (ToolExecutor.for_run). The copies share the executor's tools,
    limits and counters."""
    import itertools
    import threading
    import weakref

    from jarvis.resources import release_run

    connections: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
    numbers = itertools.count(1)
    lock = threading.Lock()
    base = executor.run_id or "mcp-serve"

    def release(run_id: str) -> None:
        # Ending a sandbox waits for its processes: not on the event loop's thread.
        threading.Thread(target=release_run, args=(run_id,), daemon=True,
                         name=f"jarvis-release-{run_id}").start()

    def executor_for(connection: Any) -> ToolExecutor:
        if connection is None:
            return executor
        with lock:
            own = connections.get(connection)
            if own is None:
                run_id = f"{base}-{next(numbers)}"
                own = executor.for_run(run_id, new_trust(run_id) if new_trust else None)
                connections[connection] = own
                # Released when the connection closes (the SDK unwinds its exit stack then);
                # garbage collection alone came late: four clients that had come and gone
                # held every repl interpreter of the pool. The finalizer stays as a backstop.
                stack = getattr(connection, "exit_stack", None)
                if stack is not None:
                    stack.callback(release, own.run_id)
                weakref.finalize(connection, release, own.run_id)
            return own

    return executor_for


def _memory_handlers(memory: Any) -> dict[str, Any]:
    """resources/list and resources/read over jarvis's memory (store access in a thread)."""
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp.types import (
        ListResourcesResult,
        ListResourceTemplatesResult,
        ReadResourceResult,
        Resource,
        ResourceTemplate,
        TextResourceContents,
    )

    async def list_resources(ctx: Any, params: Any) -> Any:
        rows = await anyio.to_thread.run_sync(memory.list)
        return ListResourcesResult(resources=[Resource.model_validate(r) for r in rows])

    async def read_resource(ctx: Any, params: Any) -> Any:
        uri = str(params.uri)
        text = await anyio.to_thread.run_sync(memory.read, uri)
        if text is None:
            raise MCPError(code=-32002, message=f"no such resource: {uri}")
        return ReadResourceResult(contents=[TextResourceContents(uri=uri, text=text,
                                                                 mime_type="text/plain")])

    async def list_resource_templates(ctx: Any, params: Any) -> Any:
        # The resources capability announces resources/templates/list too: answer it (a
        # client asking got "Method not found", and jarvis's own client gave up on that).
        return ListResourceTemplatesResult(resource_templates=[ResourceTemplate.model_validate({
            "uriTemplate": "memory://documents/{doc_id}", "name": "memory document",
            "description": "A document of jarvis's memory, by its id (resources/list names "
                           "them)", "mimeType": "text/plain"})])

    return {"on_list_resources": list_resources, "on_read_resource": read_resource,
            "on_list_resource_templates": list_resource_templates}


def _memory_resources(config: Any, tools: list[BaseTool], memory: bool | None) -> Any:
    """jarvis's memory as resources: when asked (`memory`), else (None) only when a tool that
    reads the memory is served anyway (deny by default: serving the calculator must not
    publish your notes)."""
    from jarvis.server.mcp_served import MEMORY_READERS, MemoryResources

    if memory is None:
        memory = any(t.spec.name in MEMORY_READERS for t in tools)
    return MemoryResources(config) if memory else None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("jarvis")
    except Exception:  # noqa: BLE001 - an uninstalled checkout has no metadata
        return "0"


def run_trust(config: Any, run_id: str) -> Any:
    """A served run's starting trust: the person's [egress] rules and their grants as they
    are now (a grant made or revoked while the server runs counts from the next run); what
    the run reads taints it, and nobody is there to ask (docs/trust.md)."""
    from jarvis.approvals.parking import add_grants
    from jarvis.trust.run import EgressRules, RunTrust

    trust = RunTrust(run_id=run_id, rules=EgressRules.from_config(config))
    add_grants(config, trust)
    return trust


def make_executor(tools: list[BaseTool], config: Any, approved: set[str]) -> ToolExecutor:
    from jarvis.approvals.records import IN_CALL

    approver = (lambda spec, arguments: spec.name in approved) if approved else None
    # Over stdio the process's one client is one run, with the grants of the server's start;
    # over HTTP each connection is a run that starts from the grants of its time (run_trust).
    trust = run_trust(config, "mcp-serve")
    return ToolExecutor(tools, approver=approver, default_timeout=config.tools.default_timeout,
                        no_person=IN_CALL.format(what="jarvis mcp serve"),
                        max_output_chars=config.tools.max_output_chars, run_id="mcp-serve",
                        approved_tools=approved,
                        max_abandoned_per_tool=config.tools.max_abandoned_per_tool,
                        max_abandoned=config.tools.max_abandoned_threads, trust=trust,
                        trusted_tools=config.egress.trusted_tools)


def _announce(tools: list[BaseTool], where: str) -> None:
    names = ", ".join(t.spec.name for t in tools) or "(none)"
    count = f"{len(tools)} tool{'' if len(tools) == 1 else 's'}"
    click.echo(f"jarvis mcp serve: {count} over {where}: {names}", err=True)


def run_stdio(tools: list[BaseTool], config: Any, approved: set[str],
              memory: bool | None = None) -> None:
    """Serve over this process's stdin/stdout until the client closes stdin."""
    import anyio
    from mcp.server.stdio import stdio_server

    server = build_server(tools, make_executor(tools, config, approved),
                          memory=_memory_resources(config, tools, memory))
    _announce(tools, "stdio")

    async def main() -> None:
        from jarvis.server.mcp_text import InvalidTextAnswered

        async with stdio_server() as (read_stream, write_stream):
            # A request holding a lone surrogate ("\udc80") is answered, not dropped.
            read_stream = InvalidTextAnswered(read_stream, write_stream)
            # The SDK points fd 1 at stderr while serving, but what tools print() sits in
            # sys.stdout's buffer and would reach the wire when fd 1 is restored at exit.
            with contextlib.redirect_stdout(sys.stderr):
                await server.run(read_stream, write_stream, server.create_initialization_options())

    anyio.run(main)


def check_http_access(host: str, api_key: str | None) -> None:
    """Like `jarvis serve`: anywhere but loopback needs an API key, since anyone who can reach
    the port could run the served tools (file_read, memory, the scheduler...)."""
    from jarvis.server.app import is_loopback

    if not is_loopback(host) and not api_key:
        raise UserError(f"refusing to serve MCP on {host} without an API key: anyone who can "
                        f"reach it could run your tools; pass --api-key (or set JARVIS_API_KEY), "
                        f"or listen on 127.0.0.1")
    if api_key is not None and len(api_key) < 8:
        raise UserError("the API key is too short; use at least 8 characters")


def transport_security(host: str) -> Any:
    """The SDK's DNS-rebinding protection for a bind address. The SDK turns it on by itself
    only for 127.0.0.1, localhost and ::1; on any other loopback address (127.0.0.2, ...)
    it would be off. Loopback binds get it always: Host and Origin must name a loopback
    address. Elsewhere an API key is required (check_http_access) and the Host a client uses
    is not known, so the SDK's check is off and the key guards the server."""
    from mcp.server.transport_security import TransportSecuritySettings

    from jarvis.server.app import is_loopback

    if not is_loopback(host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = ["127.0.0.1", "localhost", "[::1]"]
    bound = f"[{host.strip('[]')}]" if ":" in host else host
    if bound not in names:
        names.append(bound)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:*" for n in names] + names,
        allowed_origins=[f"http://{n}:*" for n in names] + [f"http://{n}" for n in names])


def http_app(server: Any, host: str, api_key: str | None, config: Any,
             owner_token: str | None = None) -> Any:
    """The streamable-HTTP ASGI app behind the same guard as `jarvis serve`: loopback Host
    and same-origin only without an API key, JSON POSTs, a deadline on the body; every
    request carries the API key, or without one the owner's token (jarvis.security.owner_token)."""
    from jarvis.server.app import access_key
    from jarvis.server.guard import guard_app
    from jarvis.server.http import ApiKeyMiddleware

    app = server.streamable_http_app(host=host, transport_security=transport_security(host))
    serve = getattr(config, "serve", None)
    guarded: Any = guard_app(app, api_key=api_key,
                             allowed_origins=getattr(serve, "allowed_origins", []) or [],
                             max_body_bytes=4 * 1_048_576,
                             body_timeout=getattr(serve, "body_timeout", 30.0))
    # The key (or token) first: without it, no body is buffered (the guard reads up to 4 MiB).
    key, owner = access_key(api_key, owner_token)
    return ApiKeyMiddleware(guarded, key, owner=owner)


def run_http(tools: list[BaseTool], config: Any, approved: set[str], host: str, port: int,
             api_key: str | None = None, memory: bool | None = None) -> None:
    """Serve streamable HTTP on host:port (endpoint /mcp) until interrupted; every request
    must carry `api_key`, or without one the owner's token from $JARVIS_HOME/serve.token
    (X-API-Key or Authorization: Bearer)."""
    from jarvis.server.app import access_key
    from jarvis.server.runner import bind, serve_forever, url_of

    check_http_access(host, api_key)
    # The owner's token exists before the port listens: a client may read it at once.
    token = None if api_key else access_key(None)[0]
    try:  # a busy port is a one-line error before anything starts
        sock = bind(host, port, listen=False)
    except UserError as exc:
        reason = str(exc).split(";")[0]
        raise UserError(f"{reason}; pick another --http HOST:PORT") from None
    server = build_server(tools, make_executor(tools, config, approved),
                          memory=_memory_resources(config, tools, memory), per_connection=True,
                          new_trust=lambda run_id: run_trust(config, run_id))
    app = http_app(server, host, api_key, config, owner_token=token)

    def announce() -> None:
        _announce(tools, f"{url_of(sock)}/mcp")
        if not api_key:
            click.echo("jarvis mcp serve: only you: requests carry your token, Authorization: "
                       "Bearer $(jarvis serve --print-token)", err=True)

    try:
        serve_forever(app, sock, limits=_limits(config), announce=announce)
    finally:
        sock.close()
    sys.stderr.flush()


def _limits(config: Any) -> Any:
    """Header deadline and connection cap from [serve], as for `jarvis serve`."""
    from jarvis.server.limits import ConnectionLimits

    serve = getattr(config, "serve", None)
    if serve is None:
        return ConnectionLimits()
    return ConnectionLimits(header_timeout=serve.header_timeout,
                            max_connections=serve.max_connections,
                            send_timeout=serve.send_timeout)
