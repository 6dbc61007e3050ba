"""`jarvis doctor`: what jarvis needs here (config, engine, MCP servers, databases, extras,
approvals: jarvis.commands.checks), the code sandbox in force for this config, and whether
jarvis's state (JARVIS_HOME) is private to its user."""

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
    its model, MCP servers, the databases, optional extras, standing approvals, which
    sandbox isolates model-written code (bubblewrap, user namespaces, Landlock, seccomp), and
    whether anything in JARVIS_HOME (databases, logs, the serve token) is open to other users.

    Exits 1 when `jarvis ask` cannot work (an invalid config, no engine, a model the engine
    does not offer) or a code tool (repl, code_interpreter) would refuse to run; warnings
    (a failed MCP server, a read-only database, a missing extra the config needs) do not
    change the exit code. A code tool whose own table sets `isolation` gets a line of its own.
    """
    from jarvis.commands import checks as c
    from jarvis.sandbox.cgroup import describe_memory
    from jarvis.sandbox.probe import describe, status

    config, config_check = c.load_config_check()
    found = [config_check]
    if not no_connect:
        found += c.engine_checks(config)
        found += c.mcp_checks(config)
    found += c.database_checks(config) + c.extras_checks(config) + c.approval_checks(config)

    bounds = {key: getattr(config.sandbox, key) for key in (
        "uid", "max_threads", "max_open_files", "memory_mb", "tmp_mb")}
    info = status(config.sandbox.isolation, config.sandbox.network, **bounds)
    # `isolation` in [tools.repl] / [tools.code_interpreter] wins over [sandbox] for that tool:
    # a report of [sandbox] alone would say "bwrap" while repl runs unsandboxed.
    tools = {}
    for name in CODE_TOOLS:
        own = config.tools.settings.get(name, {}).get("isolation")
        if own is not None and own != config.sandbox.isolation:
            tools[name] = status(own, config.sandbox.network, **bounds)
    from jarvis.mcp.sandboxing import unsandboxed

    bare = unsandboxed(config)
    ask_works = not any(check.status == "fail" for check in found)
    sandbox_ok = not (info["mechanism"] is None
                      or any(own["mechanism"] is None for own in tools.values()))
    state = _state()
    from jarvis.commands.grants import doctor_line, doctor_report

    grants = doctor_report(config)
    if as_json:
        echo_json({"ok": ask_works and sandbox_ok, "ask_works": ask_works,
                   "checks": [check.to_dict() for check in found], "sandbox": info,
                   "tools": tools, "mcp_unsandboxed": bare, "state": state, "grants": grants})
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
        if info["memory"]:
            click.echo(f"  kernel memory: {describe_memory(info['memory'])}")
        for name, own in tools.items():
            click.echo(f"{name} (its own isolation = {own['isolation']!r}): {describe(own)}")
        if bare:
            click.echo(f"MCP servers not sandboxed (sandbox = false): {', '.join(bare)}")
        click.echo(f"state: {_describe_state(state)}")
        click.echo(doctor_line(grants))
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


MAX_LISTED = 5


def _state() -> dict:
    """JARVIS_HOME and what in it other users may read, write or enter."""
    from jarvis.core.paths import exposed, jarvis_home

    home = jarvis_home()
    found = [{"path": str(path), "mode": f"{mode:04o}", "owned": owned}
             for path, mode, owned in exposed(home)]
    return {"home": str(home), "exists": home.exists(), "exposed": found}


def _describe_state(state: dict) -> str:
    if not state["exists"]:
        return f"{state['home']} does not exist yet (it is created private, 0700)"
    found = state["exposed"]
    if not found:
        return f"{state['home']} is private to you (folders 0700, files 0600)"
    shown = ", ".join(f"{f['path']} ({f['mode']}{'' if f['owned'] else ', not yours'})"
                      for f in found[:MAX_LISTED])
    more = f" and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
    return (f"WARNING: {len(found)} path(s) in {state['home']} are open to other users: "
            f"{shown}{more}; jarvis makes its own files private when it next opens them, or "
            f"run `chmod -R go= {state['home']}`")
