"""Every command and subcommand of the CLI tree answers `--help` (real subprocesses), and has
help text of its own. Walks `jarvis.cli.cli`, so commands added to COMMANDS later are covered."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import click

from jarvis.cli import COMMANDS, cli


def walk(group: click.Group, ctx: click.Context, path: tuple[str, ...] = ()) -> list[
        tuple[tuple[str, ...], click.Command]]:
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, f"{' '.join(path + (name,))} is listed but cannot be loaded"
        found.append((path + (name,), command))
        if isinstance(command, click.Group):
            sub_ctx = click.Context(command, parent=ctx, info_name=name)
            found.extend(walk(command, sub_ctx, path + (name,)))
    return found


def all_commands() -> list[tuple[tuple[str, ...], click.Command]]:
    with click.Context(cli, info_name="jarvis") as ctx:
        return walk(cli, ctx)


def test_the_walk_finds_every_registered_command():
    paths = {path for path, _ in all_commands()}
    assert {(name,) for name in COMMANDS} <= paths
    assert {("tools", "list"), ("tools", "show"), ("tools", "run")} <= paths


def test_every_command_has_help_text():
    missing = [" ".join(path) for path, command in all_commands() if not (command.help or "").strip()]
    assert missing == [], f"commands without a docstring/help text: {missing}"
    for path, command in all_commands():
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"option {param.opts} of `jarvis {' '.join(path)}` has no help"


def test_every_command_answers_help_in_a_subprocess(cli_env):
    paths = [()] + [path for path, _ in all_commands()]

    def run(path: tuple[str, ...]) -> tuple[tuple[str, ...], subprocess.CompletedProcess]:
        return path, subprocess.run([sys.executable, "-m", "jarvis.cli", *path, "--help"],
                                    capture_output=True, text=True, env=cli_env, timeout=120)

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(run, paths))
    failures = []
    for path, proc in results:
        name = " ".join(("jarvis",) + path)
        if proc.returncode != 0 or not proc.stdout.startswith("Usage: jarvis") or proc.stderr:
            failures.append(f"{name}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
    assert failures == []
