"""The `jarvis` command line: a thin click shell over the library.

Subcommands live in `jarvis.commands.*` and are imported only when used, so `jarvis --help`
stays instant. A JarvisError becomes one line on stderr and a non-zero exit code;
JARVIS_DEBUG=1 shows the traceback instead.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from jarvis.errors import JarvisError

# name -> ("module:attribute", short help shown by `jarvis --help` without importing it)
COMMANDS: dict[str, tuple[str, str]] = {
    "ask": ("jarvis.commands.ask:ask", "Ask a question; the answer streams to stdout."),
    "models": ("jarvis.commands.models:models", "List the models the engine offers."),
    "runs": ("jarvis.commands.runs:runs", "List and show recorded runs (the run log)."),
    "tools": ("jarvis.commands.tools:tools", "List, inspect and run tools."),
    "memory": ("jarvis.commands.memory:memory", "Index files into memory; search, stats, forget."),
    "mcp": ("jarvis.commands.mcp:mcp", "List MCP servers' tools; serve jarvis tools over MCP."),
    "config": ("jarvis.commands.config:config", "Show the effective config and where it came from."),
    "init": ("jarvis.commands.init:init", "Create config.toml, tools/ and agents/ here."),
    "agents": ("jarvis.commands.agents:agents", "List and inspect workspace agents."),
    "plugins": ("jarvis.commands.plugins:plugins", "List tool plugins and what they added."),
    "schedule": ("jarvis.commands.schedule:schedule", "Add, list and manage scheduled tasks; "
                 "`start` runs the daemon."),
    "scheduler": ("jarvis.commands.schedule:scheduler", "The same group as `schedule`."),
    "channels": ("jarvis.commands.channels:channels", "List notification channels; send a test."),
    "worker": ("jarvis.commands.worker:worker", "Run a Celery worker that executes scheduled runs."),
    "serve": ("jarvis.commands.serve:serve", "Serve tools (ORS) and agents (OpenAI API) over HTTP."),
    "doctor": ("jarvis.commands.doctor:doctor", "Check the host and the code sandbox in force."),
    "chat": ("jarvis.commands.chat:chat", "Talk with jarvis: a conversation at the terminal."),
    "conversations": ("jarvis.commands.conversations:conversations",
                      "List, show and delete conversations."),
    "listen": ("jarvis.commands.listen:listen", "Answer messages from Telegram and e-mail "
               "([inbound.NAME])."),
    "approvals": ("jarvis.commands.approvals:approvals",
                  "Requests of runs waiting for you: list, show, approve, deny."),
    "grants": ("jarvis.commands.grants:grants",
               "Let a tool send to a host, channel or MCP server without asking."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist_global_options(args))

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            from jarvis.errors import did_you_mean

            close = did_you_mean(name, self.list_commands(ctx))
            ctx.fail(f"No such command {name!r}." + (f" {close[0].upper()}{close[1:]}"
                                                      if close else "")
                     + " `jarvis --help` lists them.")
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            target = self.lazy[cmd_name][0]
            module, _, attr = target.partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, self.lazy[name][1]))
            else:
                cmd = super().get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(formatter.width)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except JarvisError as exc:
            if os.environ.get("JARVIS_DEBUG"):
                raise
            from jarvis.core.terminal import paint

            verbose = (ctx.obj or {}).get("verbose")
            message = str(exc)
            if exc.details and not verbose:
                message += " (--verbose shows details)"  # a CLI flag: only the CLI names it
            click.echo(f"{paint('Error:', 'red', 'bold')} {message}", err=True)
            if exc.details and verbose:
                click.echo(exc.details, err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted.", err=True)
            ctx.exit(130)


# Group options that also work after the subcommand (`jarvis ask --config x.toml ...`).
_HOISTED_FLAGS = ("--verbose",)
_HOISTED_VALUES = ("--config",)


def hoist_global_options(args: list[str]) -> list[str]:
    """Move the group's --config/--verbose from after the subcommand to before it (up to a
    `--`, after which everything is an argument)."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        if arg in _HOISTED_FLAGS:
            front.append(arg)
        elif arg in _HOISTED_VALUES and i + 1 < len(args):
            front.extend(args[i:i + 2])
            i += 1
        elif arg.startswith(tuple(f"{v}=" for v in _HOISTED_VALUES)):
            front.append(arg)
        else:
            rest.append(arg)
        i += 1
    return front + rest


def _help_width() -> int:
    """The width click would pick for help text, without click importing shutil (which
    imports bz2 and lzma: ~10 ms of every `jarvis --help`)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 80
    return max(min(columns, 80) - 2, 50)


@click.group(cls=LazyGroup, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"],
                               "terminal_width": _help_width()})
@click.version_option(package_name="jarvis", prog_name="jarvis",
                      message="%(prog)s %(version)s")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              envvar="JARVIS_CONFIG", help="Path to config.toml (default: ./config.toml, then "
              "$JARVIS_HOME/config.toml); also accepted after the subcommand.")
@click.option("--verbose", is_flag=True, help="On an error, show its details too (what was "
              "tried, hints); also accepted after the subcommand.")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, verbose: bool) -> None:
    """jarvis: a personal assistant with a built-in tool catalog.

    Results go to stdout; progress and tool activity go to stderr.
    """
    if config_path:
        os.environ["JARVIS_CONFIG"] = config_path
    obj = ctx.ensure_object(dict)
    obj["config_path"] = config_path
    obj["verbose"] = verbose


def main() -> None:
    cli(prog_name="jarvis")


if __name__ == "__main__":
    sys.exit(main())
