"""`jarvis doctor`: what jarvis needs here (config, engine, MCP servers, databases, extras,
approvals: jarvis.commands.checks), and the code sandbox in force for this config."""

from __future__ import annotations

import sys

import click

from jarvis.commands._common import echo_json

CODE_TOOLS = ("repl", "code_interpreter")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--no-connect", is_flag=True, help="Skip the checks that contact something: "
              "the engine and the MCP servers.")
def doctor(as_json: bool, no_connect: bool) -> None:
    """Check what jarvis needs here: the config (every [tools.NAME] table), the engine and
    its model, MCP servers, the databases, optional extras, standing approvals, and which
    sandbox isolates model-written code (bubblewrap, user namespaces, Landlock, seccomp).

    Exits 1 when `jarvis ask` cannot work (an invalid config, no engine, a model the engine
    does not offer) or a code tool (repl, code_interpreter) would refuse to run; warnings
    (a failed MCP server, a read-only database, a missing extra the config needs) do not
    change the exit code. A code tool whose own table sets `isolation` gets a line of its own.
    """
    from jarvis.commands import checks as c
    from jarvis.sandbox.probe import describe, status

    config, config_check = c.load_config_check()
    found = [config_check]
    if not no_connect:
        found += c.engine_checks(config)
        found += c.mcp_checks(config)
    found += c.database_checks(config) + c.extras_checks(config) + c.approval_checks(config)

    bounds = {"uid": config.sandbox.uid, "max_threads": config.sandbox.max_threads}
    info = status(config.sandbox.isolation, config.sandbox.network, **bounds)
    # `isolation` in [tools.repl] / [tools.code_interpreter] wins over [sandbox] for that tool:
    # a report of [sandbox] alone would say "bwrap" while repl runs unsandboxed.
    tools = {}
    for name in CODE_TOOLS:
        own = config.tools.settings.get(name, {}).get("isolation")
        if own is not None and own != config.sandbox.isolation:
            tools[name] = status(own, config.sandbox.network, **bounds)
    ask_works = not any(check.status == "fail" for check in found)
    sandbox_ok = not (info["mechanism"] is None
                      or any(own["mechanism"] is None for own in tools.values()))
    if as_json:
        echo_json({"ok": ask_works and sandbox_ok, "ask_works": ask_works,
                   "checks": [check.to_dict() for check in found],
                   "sandbox": info, "tools": tools})
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
        threads = info["threads"]
        click.echo("  threads and processes: " + (
            f"at most {threads['max']} per sandbox (RLIMIT_NPROC, host uid {threads['host_uid']})"
            + _shared_uid_warning(threads)
            if threads else "not bounded (isolation \"none\": only the host's own limits; "
            "seccomp refuses new processes, not threads)" if info["mechanism"] == "none"
            else "not bounded (no isolation in force)"))
        for name, own in tools.items():
            click.echo(f"{name} (its own isolation = {own['isolation']!r}): {describe(own)}")
        _print_checks(found)
        if not ask_works:
            failed = [check.name for check in found if check.status == "fail"]
            click.echo(f"jarvis ask cannot work here: see {', '.join(failed)} above", err=True)
    if not (ask_works and sandbox_ok):
        sys.exit(1)


def _print_checks(found: list) -> None:
    from jarvis.core.terminal import visible

    click.echo("")
    width = max(len(check.name) for check in found)
    for check in found:
        label = {"fail": "FAIL", "warn": "warn"}.get(check.status, check.status)
        click.echo(visible(f"{check.name:<{width}}  {label:<4}  {check.summary}"))
        for line in check.details:
            click.echo(visible(f"{'':<{width}}        {line}"))


def _shared_uid_warning(threads: dict) -> str:
    """The sandbox uid is only a boundary if nothing else runs as it: any other process of
    that uid owns the sandboxes' user namespaces and can read and write their memory."""
    others = threads.get("shared_with") or []
    if not others:
        return ""
    shown = ", ".join(f"{p['pid']} {p['name']}" for p in others[:5])
    more = f" and {len(others) - 5} more" if len(others) > 5 else ""
    return (f"; WARNING: other processes run as host uid {threads['host_uid']} ({shown}{more}) "
            "and can read and write every sandbox's memory: set [sandbox] uid to a uid no "
            "other process uses")
