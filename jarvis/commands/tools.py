"""`jarvis tools`: list, inspect and run tools."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from jarvis.commands._common import (
    Group,
    echo_json,
    echo_table,
    load_cli_config,
    show_progress,
    shown_data,
    terminal_approver,
)
from jarvis.core.terminal import visible


def _catalog(names: list[str] | None = None, config: Any = None) -> list:
    from jarvis.core.registry import ToolRegistry
    from jarvis.extensions import load_extensions
    from jarvis.tools.catalog import build_tools

    config = config if config is not None else load_cli_config()
    # Workspace, plugin and MCP tools are only registered by load_extensions, so a name that
    # is registered already is a built-in: running it need not pay for loading the rest.
    if names is None or not all(ToolRegistry.contains(n) for n in names):
        load_extensions(config)
    enabled = config.tools.enabled
    if names is None and enabled is not None:
        names = enabled
    for name in names or ():
        if not ToolRegistry.contains(name):
            from jarvis.errors import UnknownNameError
            from jarvis.workspace import describe_workspace

            ToolRegistry.check_available(name)  # e.g. its MCP server failed: say why
            raise UnknownNameError("tool", name, ToolRegistry.keys(),
                                   hint="`jarvis tools list` shows them; "
                                   + describe_workspace(config))
    return build_tools(names, services={"config": config}, settings=config.tools.settings)


@click.group(cls=Group)
def tools() -> None:
    """List, inspect and run tools."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def list_tools(as_json: bool) -> None:
    """List every available tool with its category and estimates."""
    rows = []
    for t in _catalog():
        spec = t.spec
        rows.append({
            "name": spec.name,
            "category": spec.category,
            "description": spec.description,
            "cost_estimate": spec.cost_estimate,
            "latency_estimate": spec.latency_estimate,
            "requires_confirmation": spec.requires_confirmation,
        })
        if spec.metadata.get("confirmation"):
            # A tool that asks for some calls only (http_request: POST, PUT, PATCH, DELETE).
            rows[-1]["confirmation"] = spec.metadata["confirmation"]
    if as_json:
        echo_json(rows)
        return
    # Costs and latencies only where a tool states them: "$0.0000" on every row said nothing.
    show_cost = any(r["cost_estimate"] for r in rows)
    headers = ["NAME", "CATEGORY"] + (["COST"] if show_cost else []) + ["LATENCY", "CONFIRM",
                                                                         "DESCRIPTION"]
    table = []
    for r in rows:
        confirm = ("yes" if r["requires_confirmation"] else
                   "per call" if r.get("confirmation") else "")
        first_line = r["description"].splitlines()[0] if r["description"] else ""
        cost = [f"${r['cost_estimate']:.4f}" if r["cost_estimate"] else ""] if show_cost else []
        latency = f"~{r['latency_estimate']:g}s" if r["latency_estimate"] else ""
        table.append([r["name"], r["category"] or "", *cost, latency, confirm,
                      first_line[:300]])
    echo_table(headers, table)


@tools.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the spec as JSON.")
def show_tool(name: str, as_json: bool) -> None:
    """Show a tool's full spec and its JSON schema."""
    (t,) = _catalog([name])
    spec = t.spec.to_dict()
    sandbox = t.sandbox_status() if hasattr(t, "sandbox_status") else None
    if as_json:
        if sandbox is not None:
            spec["sandbox_in_force"] = sandbox
        echo_json(spec)
        return
    click.echo(f"{spec['name']}  ({spec['category'] or 'uncategorized'})")
    click.echo(visible(spec["description"]))
    click.echo(f"cost estimate: ${spec['cost_estimate']:.4f} per call")
    click.echo(f"latency estimate: {spec['latency_estimate']:g} s")
    click.echo(f"requires confirmation: {'yes' if spec['requires_confirmation'] else 'no'}")
    labels = spec["output_labels"]
    click.echo("results: " + ("not declared (counted as untrusted)" if labels is None
                              else ", ".join(labels) or "neutral"))
    click.echo("sends data out: " + ("not declared (counted as able to send any argument "
                                     "anywhere)" if spec["egress"] is None else spec["egress"]))
    if spec["timeout_seconds"] is not None:
        click.echo(f"timeout: {spec['timeout_seconds']:g} s")
    if sandbox is not None:
        from jarvis.sandbox.probe import describe

        click.echo(f"sandbox: {describe(sandbox)}")
    click.echo("parameters (JSON schema):")
    click.echo(visible(json.dumps(spec["parameters"], indent=2, ensure_ascii=False)))


def _arguments(words: tuple[str, ...], tool: Any) -> str | dict[str, Any]:
    """The call's arguments: one JSON object as typed, or key=value words. A value is taken
    as JSON (5, true, [1, 2]) unless the tool's schema says the argument is a string."""
    from jarvis.errors import UserError

    if not words:
        return "{}"
    if len(words) == 1 and words[0].lstrip()[:1] in ("{", "["):
        return words[0]
    properties = (tool.spec.parameters or {}).get("properties") or {}
    out: dict[str, Any] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise UserError(f"arguments are one JSON object ('{{\"key\": value}}') or key=value "
                            f"words, not {word!r}")
        if key in out:
            raise UserError(f"argument {key!r} is given twice")
        kind = (properties.get(key) or {}).get("type")
        if kind == "string":
            out[key] = value
        else:
            try:
                out[key] = json.loads(value)
            except ValueError:
                out[key] = value  # a word the tool's validation judges
    return out


@tools.command("run")
@click.argument("name")
@click.argument("arguments", nargs=-1)
@click.option("-y", "--yes", is_flag=True, help="Approve tools that require confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole ToolResult as JSON.")
def run_tool(name: str, arguments: tuple[str, ...], yes: bool, as_json: bool) -> None:
    """Run tool NAME through the ToolExecutor with ARGUMENTS: one JSON object, or key=value
    words (a value is read as JSON, 5 or true, unless the argument is a string).

    Exits 0 on success and 1 on a failed result, with the error on stderr.

    \b
    Examples:
      jarvis tools run calculator '{"expression": "sqrt(144) + 3**2"}'
      jarvis tools run calculator expression='sqrt(144) + 3**2'
      jarvis tools run convert_units value=5 from_unit=km to_unit=mi
    """
    from jarvis.core.types import ToolCall
    from jarvis.sdk import Jarvis
    from jarvis.tools.executor import ToolExecutor

    # Built through the SDK so the tool gets what its constructor takes (the llm tool an
    # engine, the scheduler tools the scheduler, memory tools the store), and nothing more.
    with Jarvis(config=load_cli_config(), default_client="http") as j:
        (t,) = j.build_tools([name])
        show_progress(j.bus)
        executor = ToolExecutor(
            [t], bus=j.bus, approver=terminal_approver(yes),
            default_timeout=j.config.tools.default_timeout,
            max_output_chars=j.config.tools.max_output_chars,
            max_abandoned_per_tool=j.config.tools.max_abandoned_per_tool,
            max_abandoned=j.config.tools.max_abandoned_threads,
            by_person=True,  # typed by a person: schedule_task may grant what they ask for
        )
        result = executor.execute(ToolCall(id="cli", name=name,
                                           arguments=_arguments(arguments, t)))
    if as_json:
        echo_json(result.to_dict())
    elif result.success:
        # A result that ends its own line (a repl's output) does not get a blank line after it.
        click.echo(shown_data(result.content), nl=not result.content.endswith("\n"))
    if not result.success:
        from jarvis.core.terminal import paint

        kind = result.error_type.value if result.error_type else "error"
        # One "Error": a tool's message that starts with its own ("Error: division by zero")
        # is not labelled twice.
        message = result.content
        if message[:7].lower() == "error: ":
            message = message[7:]
        click.echo(f"{paint(f'Error ({kind}):', 'red', 'bold')} {visible(message)}", err=True)
        sys.exit(1)
