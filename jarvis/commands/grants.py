"""`jarvis grants`: let one tool send to one host, channel or MCP server without asking."""

from __future__ import annotations

import time
from typing import Any

import click

from jarvis.commands._common import echo_json, load_cli_config
from jarvis.core.terminal import visible


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "never"


@click.group()
def grants() -> None:
    """Grants you made: a tool may send to a host, channel or MCP server without asking.

    Only you make grants (here, "always" at a prompt of `jarvis ask`, or on an approval's
    page); no tool can. Every run reads them before asking (docs/approvals.md).
    """


@grants.command("add")
@click.argument("tool")
@click.option("--host", default=None, help="A host: example.com (any port), example.com:8443, "
              "or *.example.com (its subdomains).")
@click.option("--channel", default=None, help="A channel ([channels.NAME] in config.toml).")
@click.option("--server", default=None, help="An MCP server ([mcp.servers.NAME]).")
@click.option("--task", "task_id", default=None, help="Only for runs of this scheduled task.")
@click.option("--expires", default=None, metavar="DURATION",
              help="Ends after this long: 90m, 24h, 30d (default: until revoked).")
@click.option("--json", "as_json", is_flag=True, help="Print the grant as JSON.")
def add(tool: str, host: str | None, channel: str | None, server: str | None,
        task_id: str | None, expires: str | None, as_json: bool) -> None:
    """Let TOOL send to a host, a channel or an MCP server without asking.

    \b
    Examples:
      jarvis grants add http_request --host api.example.com
      jarvis grants add channel_send --channel phone --expires 30d
      jarvis grants add files__write_file --server files --task 3f2a9c1e
    """
    from jarvis.approvals.grants import make_grant
    from jarvis.approvals.stores import open_approvals

    given = [(kind, value) for kind, value in (("host", host), ("channel", channel),
                                                ("server", server)) if value is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --host, --channel or --server")
    kind, value = given[0]
    grant = make_grant(tool, kind, value, task_id=task_id, expires=expires, created_by="cli")
    config = load_cli_config()
    if kind == "channel" and value not in (config.channels or {}):
        click.echo(f"warning: no channel {value!r} in config.toml (the grant is kept)",
                   err=True)
    store = open_approvals(config)
    try:
        store.add_grant(grant)
    finally:
        store.close()
    if as_json:
        echo_json(grant.to_dict())
        return
    click.echo(visible(f"grant {grant.id}: {grant.describe()}, until "
                       f"{_when(grant.expires_at)}"))


@grants.command("list")
@click.option("--all", "show_all", is_flag=True, help="Revoked and expired grants too.")
@click.option("--json", "as_json", is_flag=True, help="Print the grants as JSON.")
def list_grants(show_all: bool, as_json: bool) -> None:
    """List your grants: id, tool, destination, task, until when, who made them."""
    found = active_grants(load_cli_config(), include_inactive=show_all)
    if as_json:
        echo_json([g.to_dict() for g in found])
        return
    if not found:
        click.echo("no grants: every call that needs you asks", err=True)
        return
    for g in found:
        state = "" if g.active() else ("  (revoked)" if g.revoked_at else "  (expired)")
        click.echo(visible(f"{g.id}  {g.describe()}  until {_when(g.expires_at)}  made by "
                           f"{g.created_by} {_when(g.created_at)}{state}", 400, one_line=True))


@grants.command("revoke")
@click.argument("grant_id")
def revoke(grant_id: str) -> None:
    """Revoke grant GRANT_ID: its calls ask again."""
    from jarvis.approvals.stores import open_approvals

    store = open_approvals(load_cli_config(), create=False)
    if store is None:
        raise click.ClickException(f"no grant {grant_id!r}: you have made none")
    try:
        grant = store.revoke_grant(grant_id)
    finally:
        store.close()
    click.echo(visible(f"revoked {grant.id}: {grant.describe()}"), err=True)


def active_grants(config: Any, include_inactive: bool = False) -> list[Any]:
    """The grants in the approvals store (none when there is no store yet)."""
    from jarvis.approvals.stores import open_approvals

    store = open_approvals(config, create=False)
    if store is None:
        return []
    try:
        return store.grants(include_inactive=include_inactive)
    finally:
        store.close()


def doctor_report(config: Any) -> dict[str, Any]:
    """What `jarvis doctor` says about grants: the active ones, or why they cannot be read."""
    from jarvis.errors import JarvisError

    try:
        found = active_grants(config)
    except JarvisError as exc:
        return {"error": str(exc), "grants": []}
    return {"grants": [g.to_dict() for g in found]}


def doctor_line(report: dict[str, Any]) -> str:
    if report.get("error"):
        return f"grants: cannot be read: {report['error']}"
    found = report["grants"]
    if not found:
        return "grants: none (every call that needs you asks)"
    shown = "; ".join(f"{g['id']} {g['tool']} -> {g['kind']} {g['value']}"
                      + (f" (task {g['task_id']})" if g.get("task_id") else "")
                      for g in found[:5])
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    return visible(f"grants: {len(found)} active: {shown}{more} (`jarvis grants list`)", 1000,
                   one_line=True)
