"""`jarvis agents`: the declarative agents of the workspace (agents/*.toml)."""

from __future__ import annotations

import click

from jarvis.commands._common import Group, echo_json, load_cli_config


@click.group(cls=Group)
def agents() -> None:
    """List and inspect the workspace agents (agents/*.toml)."""


@agents.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print agents and broken files as JSON.")
def list_cmd(as_json: bool) -> None:
    """List every agent in the workspace's agents folder.

    Broken agent files are reported (file and key) on stderr, the others are still listed,
    and the exit code is 1.
    """
    from jarvis.workspace.agents import load_agents

    scan = load_agents(load_cli_config())
    specs = sorted(scan.agents, key=lambda a: a.name)
    if as_json:
        echo_json({"folder": str(scan.folder), "agents": [a.to_dict() for a in specs],
                   "errors": [{"file": str(e.path), "error": e.message} for e in scan.errors]})
    elif not specs and not scan.errors:
        click.echo(f"no agents in {scan.folder} (add NAME.toml files there)", err=True)
    else:
        width = max((len(a.name) for a in specs), default=4)
        for a in specs:
            extra = f"  [schedule: {a.schedule}]" if a.schedule else ""
            tools = ",".join(a.tools) or "-"
            click.echo(f"{a.name:<{width}}  {a.base:<12} tools: {tools}{extra}  {a.description}")
    for error in scan.errors:
        click.echo(f"Error: {error.message}", err=True)
    if scan.errors:
        raise SystemExit(1)


@agents.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the agent as JSON.")
def show_cmd(name: str, as_json: bool) -> None:
    """Show agent NAME: its base, model, tools, schedule and instructions."""
    from jarvis.errors import UnknownNameError
    from jarvis.workspace.agents import find_agent, load_agents

    config = load_cli_config()
    spec = find_agent(config, name)
    if spec is None:
        scan = load_agents(config)
        raise UnknownNameError("agent", name, [a.name for a in scan.agents],
                               hint=f"Workspace agents are the *.toml files in {scan.folder}")
    if as_json:
        echo_json(spec.to_dict())
        return
    click.echo(f"{spec.name}  ({spec.base})  from {spec.source}")
    if spec.description:
        click.echo(spec.description)
    click.echo(f"model: {spec.model or '(configured default)'}")
    click.echo(f"tools: {', '.join(spec.tools) or '(none)'}")
    click.echo(f"max_turns: {spec.max_turns}")
    click.echo(f"schedule: {spec.schedule or '(none)'}")
    click.echo("instructions:")
    for line in (spec.instructions or "(none)").splitlines():
        click.echo(f"  {line}")
