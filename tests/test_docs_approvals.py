"""docs/approvals.md must be true: its config block loads with the values it names, every
`jarvis approvals|grants ...` command it shows parses (the options exist), and the message it
quotes has the shape the real one has (tests/test_approvals_scheduled.py checks a real one)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from jarvis.cli import cli
from jarvis.core.config import load_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "approvals.md"
TEXT = DOC.read_text(encoding="utf-8")
COMMANDS = sorted({m.strip() for m in re.findall(r"(jarvis (?:approvals|grants) [^\n`#]+)", TEXT)})


def test_the_config_block_loads(tmp_path):
    (block,) = re.findall(r"```toml\n(.*?)```", TEXT, re.S)
    path = tmp_path / "config.toml"
    path.write_text(block + '\n[channels.me]\nurl = "json://127.0.0.1:9/me"\n', encoding="utf-8")
    config = load_config(path)
    assert config.approvals.notify == "me" and config.approvals.expire_seconds == 86400
    assert config.approvals.link_base == "https://jarvis.example"


def test_the_doc_shows_commands():
    assert len(COMMANDS) >= 10, COMMANDS


@pytest.mark.parametrize("line", COMMANDS)
def test_each_command_it_shows_parses(line):
    words = shlex.split(re.sub(r"\[([^\]]*)\]", r"\1", line.replace(" | ", " ")))[1:]
    # Placeholders become values; the command's --help proves the subcommand and each option
    # exist without running it.
    args = [w for w in words if not w.isupper() and w != "ID"]
    options = [w for w in args if w.startswith("--")]
    command = [w for w in args if not w.startswith("-")][:2]
    out = CliRunner().invoke(cli, [*command, "--help"])
    assert out.exit_code == 0, (line, out.output)
    for option in options:
        assert option in out.output, (line, option)
