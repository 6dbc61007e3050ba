"""`jarvis mcp`: list the configured MCP servers and their tools, or serve jarvis tools over MCP."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import click

from jarvis.commands._common import Group, echo_json, load_cli_config, shown_data
from jarvis.core.terminal import visible


@click.group(cls=Group)
def mcp() -> None:
    """Use MCP servers' tools, and serve jarvis tools over MCP.

    Servers are declared in config.toml as [mcp.servers.NAME] tables; their tools appear as
    NAME__tool in `jarvis tools list`.
    """


@mcp.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print servers, status and tools as JSON.")
@click.option("--cached", is_flag=True,
              help="Show the cached tool lists without starting or contacting any server.")
def list_servers(as_json: bool, cached: bool) -> None:
    """List the configured MCP servers: status (and why one failed) and tools.

    Every enabled server is contacted (concurrently) unless --cached is given; the fresh tool
    lists are cached for the next commands. Exits 1 when a server failed.
    """
    from jarvis.mcp.manager import register_mcp_tools

    config = load_cli_config()
    manager = register_mcp_tools(config)
    if manager is None:
        if as_json:
            echo_json([])
        else:
            click.echo("No MCP servers configured. Add one to config.toml, e.g.:\n\n"
                       "  [mcp.servers.files]\n"
                       "  command = \"npx\"\n"
                       "  args = [\"-y\", \"@modelcontextprotocol/server-filesystem\", \".\"]")
        return
    if not cached:
        manager.refresh()
    rows = manager.status()
    if as_json:
        echo_json(rows)
    else:
        for i, row in enumerate(rows):
            if i:
                click.echo("")
            # Everything a server wrote is shown with its escape sequences made visible: a
            # listing on the terminal must not clear the screen or retitle the window.
            bare = " (not sandboxed: sandbox = false)" if row["sandbox"] is False else ""
            click.echo(f"{row['name']}  [{row['status']}]  {row['transport']}{bare}: "
                       f"{visible(row['target'], one_line=True)}")
            if row["error"]:
                click.echo(f"  error: {visible(row['error'], one_line=True)}")
            for tool in row["tools"]:
                flag = " [confirm]" if tool["requires_confirmation"] else ""
                first = tool["description"].splitlines()[0] if tool["description"] else ""
                click.echo(f"  {tool['name']}{flag}  {visible(first, 300, one_line=True)}")
            if row["hidden_tools"]:
                click.echo(f"  (not exposed by include/exclude: "
                           f"{visible(', '.join(row['hidden_tools']), one_line=True)})")
            for conflict in row["conflicts"]:
                click.echo(f"  (skipped, name taken: {visible(conflict, one_line=True)})")
            for skipped in row.get("skipped") or ():
                click.echo(f"  (skipped: {visible(skipped, one_line=True)})")
            if row["status"] == "cached" and not row["tools"]:
                click.echo("  (no tools)")
            if row["status"] == "not started":
                click.echo("  (no cached tool list; run without --cached to fetch it)")
    if any(row["status"] == "failed" for row in rows):
        sys.exit(1)


def _manager_for(server: str) -> Any:
    """The manager of the CLI's config, with `server` checked to be an enabled server."""
    from jarvis.errors import UserError
    from jarvis.mcp.manager import register_mcp_tools

    manager = register_mcp_tools(load_cli_config())
    state = manager.servers.get(server) if manager is not None else None
    if state is None or not state.enabled:
        known = ", ".join(sorted(n for n, s in (manager.servers.items() if manager else [])
                                 if s.enabled)) or "(none)"
        raise UserError(f"no enabled MCP server {server!r} in config.toml; enabled servers: {known}")
    return manager


def _ask(server: str, what: Any) -> Any:
    """Run a request; an MCP failure becomes one line on stderr and exit 1."""
    from jarvis.mcp.connection import McpCallError, McpCallTimeout, McpServerError

    try:
        return what()
    except McpCallError as exc:
        click.echo(f"error: MCP server {server!r} refused: {visible(exc, one_line=True)}",
                   err=True)
    except (McpServerError, McpCallTimeout) as exc:
        click.echo(f"error: {visible(exc, one_line=True)}", err=True)
    sys.exit(1)


@mcp.command("resources")
@click.argument("server")
@click.option("--json", "as_json", is_flag=True, help="Print resources and templates as JSON.")
def resources(server: str, as_json: bool) -> None:
    """List the resources (and resource templates) MCP server SERVER offers.

    \b
    Example:
      jarvis mcp resources files
    """
    from jarvis.mcp.resources import describe_resource

    manager = _manager_for(server)
    found = _ask(server, lambda: manager.resources(server))
    rows = {"resources": [describe_resource(r) for r in found["resources"]],
            "templates": [describe_resource(t) for t in found["templates"]]}
    if as_json:
        echo_json(rows)
        return
    for row in rows["resources"]:
        about = row.get("description") or row.get("title") or row.get("name") or ""
        mime = f" ({row['mimeType']})" if row.get("mimeType") else ""
        click.echo(visible(f"{row['uri']}{mime}  {about}".rstrip(), one_line=True))
    for row in rows["templates"]:
        about = row.get("description") or row.get("title") or row.get("name") or ""
        click.echo(visible(f"{row['uriTemplate']}  [template]  {about}".rstrip(), one_line=True))
    if not rows["resources"] and not rows["templates"]:
        click.echo(f"(MCP server {server!r} offers no resources)")


@mcp.command("read")
@click.argument("server")
@click.argument("uri")
@click.option("--json", "as_json", is_flag=True, help="Print the contents as JSON (blobs as base64).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), default=None,
              help="Write the (first) contents to this file, binary data decoded.")
def read(server: str, uri: str, as_json: bool, output: str | None) -> None:
    """Read resource URI of MCP server SERVER: text to stdout, binary described (or -o FILE).

    \b
    Example:
      jarvis mcp read files file:///etc/hostname
    """
    import base64

    from jarvis.core.types import base64_size

    manager = _manager_for(server)
    result = _ask(server, lambda: manager.read_resource(server, uri))
    contents = list(result.contents or [])
    if as_json:
        echo_json([c.model_dump(by_alias=True, exclude_none=True, mode="json") for c in contents])
        return
    if output is not None:
        if not contents:
            raise click.ClickException(f"resource {uri} is empty")
        first = contents[0]
        text = getattr(first, "text", None)
        try:
            # validate=True: a server's blob that is not base64 is one clear line, not a
            # binascii traceback (or, without it, silently dropped characters in the file).
            data = (text.encode("utf-8") if text is not None
                    else base64.b64decode(first.blob, validate=True))
        except ValueError:
            raise click.ClickException(f"resource {uri} from server {server!r} has binary "
                                       f"content that is not valid base64; not written") from None
        with open(output, "wb") as fh:
            fh.write(data)
        click.echo(f"wrote {len(data)} bytes to {output}", err=True)
        return
    for item in contents:
        text = getattr(item, "text", None)
        if text is not None:
            click.echo(shown_data(text))
        else:
            size = base64_size(getattr(item, "blob", "") or "")
            mime = visible(item.mime_type or "data", 100, one_line=True)
            click.echo(f"[binary {mime}, {size} bytes: use -o FILE or --json]")


MAX_SHOWN_ARGUMENTS = 20
MAX_SHOWN_NAME = 100
MAX_SHOWN_DESCRIPTION = 300


@mcp.command("prompts")
@click.argument("server")
@click.option("--json", "as_json", is_flag=True, help="Print the prompts and their arguments as JSON.")
def prompts(server: str, as_json: bool) -> None:
    """List the prompts MCP server SERVER offers, with their arguments.

    \b
    Example:
      jarvis mcp prompts files
    """
    manager = _manager_for(server)
    found = _ask(server, lambda: manager.prompts(server))
    rows = [p.model_dump(by_alias=True, exclude_none=True, mode="json") for p in found]
    if as_json:
        echo_json(rows)
        return
    for row in rows:
        # A server decides how long these are (thousands of arguments, a 100 KB description):
        # one readable line each; --json has everything.
        names = [a["name"][:MAX_SHOWN_NAME] + ("" if a.get("required") else "?")
                 for a in row.get("arguments") or []]
        args = ", ".join(names[:MAX_SHOWN_ARGUMENTS])
        if len(names) > MAX_SHOWN_ARGUMENTS:
            args += f", ... {len(names) - MAX_SHOWN_ARGUMENTS} more (--json shows all)"
        about = " ".join(str(row.get("description") or "").split())
        if len(about) > MAX_SHOWN_DESCRIPTION:
            about = about[:MAX_SHOWN_DESCRIPTION] + "..."
        click.echo(visible(f"{row['name'][:MAX_SHOWN_NAME]}({args})  {about}".rstrip(),
                           one_line=True))
    if not rows:
        click.echo(f"(MCP server {server!r} offers no prompts)")


@mcp.command("prompt")
@click.argument("server")
@click.argument("name")
@click.argument("arguments", nargs=-1, metavar="[KEY=VALUE]...")
@click.option("--json", "as_json", is_flag=True, help="Print the prompt's messages as JSON.")
def prompt(server: str, name: str, arguments: tuple[str, ...], as_json: bool) -> None:
    """Get prompt NAME of MCP server SERVER, filled with KEY=VALUE arguments.

    \b
    Example:
      jarvis mcp prompt files summarize path=README.md
    """
    from jarvis.errors import UserError

    values: dict[str, str] = {}
    for item in arguments:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"prompt arguments are KEY=VALUE, got {item!r}")
        values[key] = value
    manager = _manager_for(server)
    result = _ask(server, lambda: manager.get_prompt(server, name, values))
    messages = [m.model_dump(by_alias=True, exclude_none=True, mode="json") for m in result.messages]
    if as_json:
        echo_json(messages)
        return
    for message in messages:
        content = message.get("content") or {}
        text = content.get("text") if isinstance(content, dict) else None
        shown = text if text is not None else json_text(content)
        click.echo(shown_data(f"[{message.get('role')}] {shown}"))


def json_text(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)[:2000]


@mcp.command("serve")
@click.option("--tools", "tool_names", default=None, metavar="A,B",
              help="Comma-separated tools to expose (default: the built-in and workspace tools "
                   "that need no confirmation). Naming a tool that requires confirmation here "
                   "exposes it and approves its calls.")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Serve streamable HTTP on HOST:PORT (endpoint /mcp) instead of stdio; port "
                   "0 takes a free one (the URL is printed on stderr). Without "
                   "--api-key only you are answered (every request carries your token: "
                   "'Authorization: Bearer $(jarvis serve --print-token)') and only loopback "
                   "Host headers (DNS-rebinding protection on every loopback address); "
                   "[serve] header_timeout, body_timeout, send_timeout and max_connections "
                   "apply.")
@click.option("--api-key", envvar="JARVIS_API_KEY", default=None,
              help="With --http: require this key (X-API-Key or 'Authorization: Bearer KEY') "
                   "on every request; needed to listen anywhere but loopback.")
@click.option("--memory/--no-memory", default=None,
              help="Serve jarvis's memory documents as resources (memory://documents/ID). "
                   "Default: only when a tool that reads the memory is served.")
def serve(tool_names: str | None, http: str | None, api_key: str | None,
          memory: bool | None) -> None:
    """Run an MCP server exposing jarvis tools (stdio by default).

    Every call goes through the ToolExecutor: arguments are validated, timeouts and output
    limits apply. Logs go to stderr; over stdio, stdout carries only the protocol.

    \b
    Example (in an MCP client's config):
      {"command": "jarvis", "args": ["mcp", "serve", "--tools", "calculator,think"]}
    """
    from jarvis.errors import UserError
    from jarvis.server.mcp_serve import (
        check_http_access,
        parse_host_port,
        run_http,
        run_stdio,
        select_tools,
    )

    config = load_cli_config()
    names = [n.strip() for n in tool_names.split(",") if n.strip()] if tool_names else None
    if tool_names is not None and not names:
        raise UserError("--tools was given but names no tool; pass e.g. --tools calculator,think")
    address = parse_host_port(http) if http else None
    if address is not None:
        check_http_access(address[0], api_key or None)
    # Over stdio, stdout is the protocol: a tool file or plugin that prints while it is loaded
    # must not put that text on the wire (the SDK diverts stdout only once serving starts).
    from jarvis.sdk import Jarvis

    # The SDK hands each tool what it declares it needs (the llm tool the engine, the
    # scheduler tools the scheduler, the memory tools the store), as `jarvis serve` does.
    with Jarvis(config=config, default_client="http") as system:
        with contextlib.redirect_stdout(sys.stderr):
            tools, approved = select_tools(config, names, system)
        if address is None:
            run_stdio(tools, config, approved, memory=memory)
        else:
            run_http(tools, config, approved, *address, api_key=api_key or None, memory=memory)
