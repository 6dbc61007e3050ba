"""`jarvis tools`: list, inspect and run tools."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from jarvis.commands._common import (
    echo_json,
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
    return build_tools(names, dependencies={"config": config}, settings=config.tools.settings)


@click.group()
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
    width = max((len(r["name"]) for r in rows), default=4)
    for r in rows:
        flags = (" [confirm]" if r["requires_confirmation"] else
                 " [confirm per call]" if r.get("confirmation") else "")
        first_line = r["description"].splitlines()[0] if r["description"] else ""
        click.echo(f"{r['name']:<{width}}  {r['category'] or '-':<11} "
                   f"${r['cost_estimate']:.4f} ~{r['latency_estimate']:g}s{flags}  "
                   f"{visible(first_line, 300, one_line=True)}")


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


@tools.command("run")
@click.argument("name")
@click.argument("arguments", default="{}")
@click.option("-y", "--yes", is_flag=True, help="Approve tools that require confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole ToolResult as JSON.")
def run_tool(name: str, arguments: str, yes: bool, as_json: bool) -> None:
    """Run tool NAME with ARGUMENTS (a JSON object) through the ToolExecutor.

    Exits 0 on success and 1 on a failed result, with the error on stderr.

    \b
    Example:
      jarvis tools run calculator '{"expression": "sqrt(144) + 3**2"}'
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
        result = executor.execute(ToolCall(id="cli", name=name, arguments=arguments))
    if as_json:
        echo_json(result.to_dict())
    elif result.success:
        # A result that ends its own line (a repl's output) does not get a blank line after it.
        click.echo(shown_data(result.content), nl=not result.content.endswith("\n"))
    if not result.success:
        kind = result.error_type.value if result.error_type else "error"
        click.echo(f"Error ({kind}): {visible(result.content)}", err=True)
        sys.exit(1)
