"""`jarvis plugins`: the tool plugins installed through the `jarvis` entry-point group."""

from __future__ import annotations

import click

from jarvis.commands._common import echo_json


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the plugins as JSON.")
def plugins(as_json: bool) -> None:
    """List installed plugins, whether they were loaded, and the tools each one added.

    JARVIS_LOAD_PLUGINS selects plugins: unset loads all, a comma list loads those names,
    an empty value loads none. Exit code 1 if a selected plugin failed or is missing.
    """
    from jarvis.plugins import ENV_VAR, PluginInfo, installed_plugins, load_plugins

    report = load_plugins()
    if report.selection == []:
        # Nothing was loaded, but show what is installed and would load without the filter.
        report.plugins = [PluginInfo(ep.name, ep.value, status="skipped")
                          for ep in installed_plugins()]
    if as_json:
        echo_json({"selection": report.selection,
                   "plugins": [p.to_dict() for p in report.plugins]})
    else:
        if report.selection is None:
            click.echo(f"# loading every installed plugin ({ENV_VAR} is unset)")
        elif not report.selection:
            click.echo(f"# plugins disabled ({ENV_VAR} is empty)")
        else:
            click.echo(f"# {ENV_VAR}={','.join(report.selection)}")
        if not report.plugins:
            click.echo("no plugins installed (packages add them with a `jarvis` entry point)")
        for p in report.plugins:
            dist = f"{p.distribution} {p.version}".strip()
            where = f"  {p.value}" if p.value else ""
            click.echo(f"{p.name}  {p.status}{where}{f'  from {dist}' if dist else ''}")
            if p.tools:
                click.echo(f"  tools: {', '.join(p.tools)}")
            if p.error:
                click.echo(f"  error: {p.error}")
    if report.errors:
        raise SystemExit(1)
