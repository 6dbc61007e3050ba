"""`jarvis doctor`: what this host supports, and the code sandbox in force for this config."""

from __future__ import annotations

import sys

import click

from jarvis.commands._common import echo_json, load_cli_config


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json: bool) -> None:
    """Check the host: which sandbox isolates model-written code (bubblewrap, user
    namespaces, Landlock, seccomp) under this config's [sandbox] settings.

    Exits 1 when the code tools (repl, code_interpreter) would refuse to run.
    """
    from jarvis.sandbox.probe import describe, status

    config = load_cli_config()
    info = status(config.sandbox.isolation, config.sandbox.network)
    if as_json:
        echo_json({"sandbox": info})
    else:
        yes_no = {True: "yes", False: "no"}
        click.echo(f"sandbox: {describe(info)}")
        click.echo(f"  isolation setting: {info['isolation']}")
        click.echo(f"  bubblewrap: {info['bwrap'] or 'not installed'}"
                   + (f" (works: {yes_no[info['bwrap_works']]})" if info["bwrap"] else ""))
        click.echo(f"  unprivileged user namespaces: {yes_no[info['user_namespaces']]}")
        click.echo(f"  Landlock ABI: {info['landlock_abi'] or 'none'}")
        click.echo(f"  seccomp: {yes_no[info['seccomp']]}")
        click.echo(f"  network for code: {'host network' if info['network'] else 'none'}")
    if info["mechanism"] is None:
        sys.exit(1)
