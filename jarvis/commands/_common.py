"""Helpers shared by the CLI commands."""

from __future__ import annotations

import json
import sys
from typing import Any

import click


class Group(click.Group):
    """A command group whose unknown subcommand gets a did-you-mean and the list of its
    commands (click's own message names neither)."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            from jarvis.errors import did_you_mean

            names = self.list_commands(ctx)
            close = did_you_mean(name, names)
            ctx.fail(f"No such command {name!r}." + (f" {close[0].upper()}{close[1:]}"
                                                      if close else "")
                     + f" `{ctx.command_path}` has: {', '.join(names)}.")
        return super().resolve_command(ctx, args)


def one_line(text: str, width: int) -> str:
    """`text` with its whitespace folded, cut to `width` characters with an ellipsis."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def terminal_width() -> int | None:
    """stdout's width when it is a terminal (COLUMNS wins), else None: a pipe gets whole lines."""
    import os
    import shutil

    try:
        if not sys.stdout.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return shutil.get_terminal_size((100, 24)).columns


def echo_table(headers: list[str], rows: list[list[str]], *, right: tuple[int, ...] = (),
               width: int | None = None) -> None:
    """Rows under a header, columns aligned; on a terminal the last column is cut (with an
    ellipsis) so no line wraps past the terminal's width. Cells are shown with escape
    sequences made visible (tools and models write many of them)."""
    from jarvis.core.terminal import paint, visible

    table = [[visible(cell, one_line=True) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in [headers, *table]) for i in range(len(headers) - 1)]
    width = terminal_width() if width is None else width

    def line(cells: list[str]) -> str:
        out = [cell.rjust(w) if i in right else cell.ljust(w)
               for i, (cell, w) in enumerate(zip(cells, widths, strict=False))]
        text = "  ".join(out + [cells[-1]]).rstrip()
        if width is not None and len(text) > width:
            text = text[: max(width - 1, 0)] + "…"
        return text

    click.echo(paint(line(list(headers)), "bold", stream=sys.stdout))
    for row in table:
        click.echo(line(row))


def shown_data(text: str) -> str:
    """Untrusted output (a tool's result, a server's resource) for stdout: exact when piped,
    its escape sequences made visible when stdout is a terminal (they would act on it)."""
    from jarvis.core.terminal import visible

    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    return visible(text) if tty else text


def echo_json(data: Any) -> None:
    """Print data as JSON on stdout."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def terminal_approver(assume_yes: bool) -> Any:
    """An approver for confirmation-gated tools: --yes approves, a terminal asks, and with
    neither the call is denied."""
    if assume_yes:
        return lambda spec, arguments: True
    if not sys.stdin.isatty():
        return None
    return TerminalPerson()


def terminal_egress_approver() -> Any:
    """The person at the terminal for calls the egress guard will not allow on its own; None
    without a terminal (then such calls are denied: --yes never answers them)."""
    return TerminalPerson() if sys.stdin.isatty() else None


class TerminalPerson:
    """A person answering approval requests on the terminal (stderr): where the call goes
    first, then how much it sends and its hash, why, and a preview of the arguments;
    `[y/N/v]`, where v shows everything (escapes visible) and asks again. For a call whose
    destinations are hosts, channels or MCP servers, `a` ("always") approves it and makes a
    grant for this tool and those destinations (docs/approvals.md): later calls there, in
    this run and the next ones, do not ask. End of input is no; so is Ctrl-C, unless
    `interrupt_stops` (then KeyboardInterrupt goes on up: `jarvis chat` stops the answer)."""

    def __init__(self, *, interrupt_stops: bool = False) -> None:
        self.always: set[tuple[str, str, str]] = set()  # (tool, egress kind, destination)
        self.interrupt_stops = interrupt_stops

    # The prompt shows the whole call: allowing where it goes also confirms the tool.
    covers_confirmation = True

    def __call__(self, spec: Any, arguments: dict[str, Any]) -> bool:
        from jarvis.trust.request import CONFIRMATION, ApprovalRequest

        return self.approve_request(ApprovalRequest(
            CONFIRMATION, spec.name, arguments, reason=f"tool {spec.name} requires confirmation",
            spec=spec))

    def approve_request(self, request: Any) -> bool:
        from jarvis.approvals.grants import grantable
        from jarvis.core.terminal import visible

        wanted = {(request.tool, d["kind"], d["destination"]) for d in request.destinations}
        if wanted and wanted <= self.always:
            return True  # answered "always" earlier in this run
        click.echo(request.summary(), err=True)
        name = visible(request.tool, 100, one_line=True)
        offer = grantable(request.to_dict())
        while True:
            try:
                answer = click.prompt(f"Allow tool {name}? [y/N/{'a/' if offer else ''}v]",
                                      default="", show_default=False, err=True)
            except click.Abort as exc:  # end of input or Ctrl-C: nobody said yes
                click.echo("", err=True)
                if self.interrupt_stops and isinstance(exc.__context__, KeyboardInterrupt):
                    raise KeyboardInterrupt from None
                return False
            answer = answer.strip().lower()
            if answer in ("y", "yes"):
                return True
            if answer in ("v", "view"):
                click.echo(request.full_text(), err=True)
                continue
            if offer and answer in ("a", "always"):
                self._grant(request)
                self.always |= wanted
                return True
            return False

    def _grant(self, request: Any) -> None:
        """Store a grant for the tool and each destination of `request` (said on stderr)."""
        from jarvis.approvals.grants import grants_for_request
        from jarvis.approvals.stores import open_approvals
        from jarvis.core.terminal import visible

        made = grants_for_request(request.to_dict(), created_by="prompt")
        store = open_approvals(load_cli_config())
        try:
            for grant in made:
                store.add_grant(grant)
                click.echo(visible(f"grant {grant.id}: {grant.describe()} (`jarvis grants "
                                   f"revoke {grant.id}` ends it)"), err=True)
        finally:
            store.close()


def load_cli_config() -> Any:
    """The config (the documented lookup), every [tools.NAME] table checked against its tool."""
    from jarvis.core.config import load_config
    from jarvis.extensions import check_tool_tables

    config = load_config()
    check_tool_tables(config)
    return config


def system_factory(config: Any) -> Any:
    """`factory(workspace)` for the scheduler's SdkRunner: a Jarvis on `config`, or, for a task
    created in another workspace (its config.toml), a Jarvis on that workspace's config, so the
    run has the workspace's tools and agents whatever folder the daemon runs in."""
    from pathlib import Path

    def make(workspace: str | None = None) -> Any:
        from jarvis.errors import ConfigError
        from jarvis.sdk import Jarvis

        if not workspace or (config.source is not None and Path(workspace) == config.source):
            return Jarvis(config=config)
        if not Path(workspace).is_file():
            raise ConfigError(f"the task was created in the workspace {Path(workspace).parent}, "
                              f"whose config file {workspace} is gone; restore it, or cancel "
                              f"the task and schedule it again where it should run")
        return Jarvis(config_path=workspace)

    return make


def show_progress(bus: Any) -> None:
    """Print tools' progress reports (TOOL_PROGRESS events) on stderr, one line each."""
    from jarvis.core.events import EventType
    from jarvis.core.terminal import visible

    def report(event: Any) -> None:
        data = event.data
        total = data.get("total")
        amount = f"{data.get('progress'):g}" + (f"/{total:g}" if total else "")
        message = f" {data['message']}" if data.get("message") else ""
        click.echo(visible(f"[progress] {data.get('tool')} {amount}{message}", 600,
                           one_line=True), err=True)

    bus.subscribe(EventType.TOOL_PROGRESS, report)


def log_scheduler_to_stderr(who: str) -> None:
    """The scheduler's log (logger `jarvis.scheduler`, INFO and up) as timestamped lines on
    stderr, `TIME jarvis WHO: message`, for the long-running `scheduler start` and `worker`."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s jarvis {who}: %(message)s",
                                           datefmt="%Y-%m-%dT%H:%M:%S"))
    logger = logging.getLogger("jarvis.scheduler")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
