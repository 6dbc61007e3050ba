"""`jarvis doctor`: what this host supports, the code sandbox in force for this config, and
whether jarvis's state (JARVIS_HOME) is private to its user."""

from __future__ import annotations

import sys

import click

from jarvis.commands._common import echo_json, load_cli_config

CODE_TOOLS = ("repl", "code_interpreter")


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def doctor(as_json: bool) -> None:
    """Check the host: which sandbox isolates model-written code (bubblewrap, user
    namespaces, Landlock, seccomp) under this config's [sandbox] settings, and whether
    anything in JARVIS_HOME (databases, logs, the serve token) is open to other users.

    A code tool whose own table sets `isolation` gets a line of its own. Exits 1 when a code
    tool (repl, code_interpreter) would refuse to run.
    """
    from jarvis.sandbox.cgroup import describe_memory
    from jarvis.sandbox.probe import describe, status

    config = load_cli_config()
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
    state = _state()
    from jarvis.commands.grants import doctor_line, doctor_report

    grants = doctor_report(config)
    if as_json:
        echo_json({"sandbox": info, "tools": tools, "mcp_unsandboxed": bare, "state": state,
                   "grants": grants})
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
    if info["mechanism"] is None or any(own["mechanism"] is None for own in tools.values()):
        sys.exit(1)


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
