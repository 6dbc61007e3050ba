"""`jarvis channels`: list the notification channels and send a test message."""

from __future__ import annotations

import sys

import click

from jarvis.commands._common import Group, echo_json, load_cli_config
from jarvis.core.terminal import visible


@click.group(cls=Group)
def channels() -> None:
    """List notification channels ([channels.NAME] in config.toml) and test them."""


@channels.command("list")
@click.option("--check", is_flag=True, help="Also check each one (valid URL, reachable where "
              "the service can tell); sends nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the channels as JSON.")
def list_channels(check: bool, as_json: bool) -> None:
    """List the configured channels with their kind and masked URL."""
    from jarvis.channels.channels import channel_status, mask_url

    config = load_cli_config()
    rows = []
    for name, channel in sorted(config.channels.items()):
        row = {"channel": name, "kind": channel.url.split("://", 1)[0].lower(),
               "confirm": channel.confirm, "url": mask_url(channel.url),
               "description": channel.description}
        if check:
            row.update(channel_status(config, name))
        rows.append(row)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no channels configured; add one to config.toml, e.g.\n"
                   '  [channels.phone]\n  url = "ntfy://ntfy.sh/${NTFY_TOPIC}"', err=True)
        return
    width = max(len(r["channel"]) for r in rows)
    for r in rows:
        flags = "" if r["confirm"] else "  [no confirm]"
        state = ""
        if check:
            state = ("  invalid: " + r.get("detail", "") if not r.get("valid") else
                     "  reachable" if r.get("reachable") else
                     "  UNREACHABLE: " + r.get("detail", "") if r.get("reachable") is False
                     else "  valid")
        click.echo(f"{r['channel']:<{width}}  {r['kind']:<8} {r['url']}{flags}{state}")


@channels.command("test")
@click.argument("name")
@click.option("--message", default="Test message from jarvis: this channel works.",
              show_default=True, help="The text to send.")
@click.option("--title", default="jarvis test", show_default=True, help="The title to send.")
def test_channel(name: str, message: str, title: str) -> None:
    """Send a test message to channel NAME; exit 1 if it was not delivered."""
    from jarvis.channels.channels import ChannelError, send

    config = load_cli_config()
    try:
        outcome = send(config, name, message, title)
    except ChannelError as exc:
        click.echo(f"Error: {visible(exc)}", err=True)
        sys.exit(2 if "unknown channel" in str(exc) else 1)
    if not outcome.ok:
        # The error can quote the service's reply: shown, never run on the terminal.
        click.echo(visible(f"Error: sending to {name} ({outcome.service}) failed: "
                           f"{outcome.error}"), err=True)
        sys.exit(1)
    click.echo(f"sent to {name} ({outcome.service}) in {outcome.seconds:.2f} s")
