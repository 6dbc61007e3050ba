"""`jarvis init`: create a workspace (config.toml, tools/, agents/) in the current folder."""

from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.option("--force", is_flag=True, help="Overwrite an existing config.toml.")
def init(force: bool) -> None:
    """Write a commented starter config.toml and empty tools/ and agents/ folders here.

    An existing config.toml is kept unless --force is given; existing tools/ and agents/
    folders are left as they are.
    """
    from jarvis.errors import UserError
    from jarvis.workspace.starter import STARTER_CONFIG

    here = Path.cwd()
    target = here / "config.toml"
    if target.exists() and not force:
        raise UserError(f"{target} already exists; use `jarvis init --force` to overwrite it")
    target.write_text(STARTER_CONFIG, encoding="utf-8")
    click.echo(f"wrote {target}")
    for name in ("tools", "agents"):
        folder = here / name
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{folder} exists and is not a folder; move it away and run "
                            "`jarvis init` again")
        created = not folder.exists()
        folder.mkdir(exist_ok=True)
        click.echo(f"{'created' if created else 'kept'} {folder}{'/' if created else '/ (exists)'}")
    click.echo("next: put tools in tools/*.py and agents in agents/*.toml; "
               "see `jarvis config show`")
