"""Attacks through the text an MCP server writes (tests/mcp_servers/hostile_text.py, official
SDK): terminal escape sequences in descriptions, progress, errors, results and elicitation
questions, and a tool whose input schema is 2 MB. Everything runs through the real CLI as a
subprocess; the terminal cases on a real pseudo-terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp_support import SERVERS, STDIO_CONNECT, approve_all, cli, cli_in_process, write_config
from waiting import wait_for

from jarvis.core.config import load_config
from jarvis.core.registry import ToolRegistry
from jarvis.core.terminal import visible
from jarvis.mcp.manager import McpManager
from jarvis.tools.executor import ToolExecutor

HOSTILE = SERVERS / "hostile_text.py"
# What the server's EVIL looks like once made visible (see hostile_text.py).
SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202eevil"
RAW = ["\x1b", "\x07", "\x9b", "\u202e"]


def hostile(**options) -> dict:
    return {"command": sys.executable, "args": [str(HOSTILE)], **STDIO_CONNECT, **options}


def no_raw(text: str) -> bool:
    return not any(c in text for c in RAW)


def on_terminal(args: list[str], env: dict, cwd: Path, answers: list[tuple[bytes, bytes]],
                stdout_tty: bool = False) -> tuple[bytes, str, int]:
    """Run `jarvis ARGS` with stdin and stderr (and stdout, if asked) on a pseudo-terminal,
    answering each prompt when its text appears; (terminal bytes, piped stdout, exit code)."""
    master, slave = pty.openpty()
    # NO_COLOR: jarvis's own colours are escape sequences too; this checks that no server's
    # or model's text reaches the terminal raw (colour on a terminal: tests/test_terminal.py).
    env = {**env, "PYTHONUNBUFFERED": "1", "NO_COLOR": "1"}
    env.pop("CI", None)
    env.pop("JARVIS_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", *args], stdin=slave,
                            stderr=slave, stdout=slave if stdout_tty else subprocess.PIPE,
                            cwd=cwd, env=env)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                seen += chunk
                if answers and answers[0][0] in seen:
                    os.write(master, answers.pop(0)[1])
            elif proc.poll() is not None and not ready:
                break
        data, _ = proc.communicate(timeout=30)
        out, code = (data or b"").decode(), proc.returncode
    finally:
        proc.kill()
        os.close(master)
    return seen, out, code


def test_visible_escapes_what_acts_on_a_terminal() -> None:
    assert visible("a\x1b[31mb\x07c\x9bd\u202ee\u2066f") == "a\\x1b[31mb\\x07c\\x9bd\\u202ee\\u2066f"
    assert visible("line\r\nnext\tx") == "line\\x0d\nnext\tx"  # \r could rewrite the line
    assert visible("a\nb\tc", one_line=True) == "a\\x0ab\\x09c"
    assert visible("é 漢字 🙂") == "é 漢字 🙂"
    assert visible("x" * 50, 10) == "x" * 10 + "…"
    assert visible("\x1b" * 50, 10) == "\\x1b\\x1b\\x" + "…"  # escapes count against the limit


def test_a_servers_escape_sequences_never_reach_the_terminal(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"h": hostile()})
    listed = cli_in_process(["mcp", "list"], cli_env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert no_raw(listed.stdout) and no_raw(listed.stderr)
    assert f"h__ansi [confirm]  {SHOWN} Harmless-looking tool." in listed.stdout
    tools = cli_in_process(["tools", "list"], cli_env, tmp_path)
    assert tools.returncode == 0 and no_raw(tools.stdout), tools.stderr
    assert SHOWN in tools.stdout
    shown = cli_in_process(["tools", "show", "h__ansi"], cli_env, tmp_path)
    assert shown.returncode == 0 and no_raw(shown.stdout) and SHOWN in shown.stdout

    # Progress and errors go to stderr, escaped; a result piped to a file stays exact.
    ran = cli_in_process(["tools", "run", "--yes", "h__ansi", "{}"], cli_env, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert no_raw(ran.stderr) and f"[progress] h__ansi 1/2 half{SHOWN}" in ran.stderr
    # (click itself drops CSI colour codes when stdout is not a terminal; the rest is as sent)
    assert ran.stdout == "done\x1b]0;pwned\x07\x9b31m\u202eevil\n"
    failed = cli_in_process(["tools", "run", "--yes", "h__fail", "{}"], cli_env, tmp_path)
    assert failed.returncode == 1 and no_raw(failed.stderr)
    assert f"failed {SHOWN}" in failed.stderr


def test_a_result_on_a_terminal_is_shown_escaped(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"h": hostile()})
    seen, _, code = on_terminal(["tools", "run", "--yes", "h__ansi", "{}"], cli_env, tmp_path, [],
                                stdout_tty=True)
    assert code == 0, seen
    text = seen.decode("utf-8", "replace")
    assert f"done{SHOWN}" in text and no_raw(text), text


def test_an_elicitation_question_cannot_drive_the_terminal(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"h": hostile()})
    seen, out, code = on_terminal(["tools", "run", "--yes", "h__ask", "{}"], cli_env, tmp_path,
                                  [(b"Answer?", b"y\n"), (b"colour", b"teal\n")])
    text = seen.decode("utf-8", "replace")
    assert code == 0, text
    assert out.strip() == "user said: teal"
    assert f"MCP server 'h' asks: Question {SHOWN} yyy" in text
    assert f"colour {SHOWN}" in text  # the field's label, escaped too
    assert no_raw(text), text
    assert "y" * 2500 not in text  # a 100 000-character question is cut for the terminal


def test_the_approval_prompt_shows_a_models_arguments_escaped(tmp_path: Path, cli_env) -> None:
    # A right-to-left override in the arguments would make the prompt read differently from
    # the call it approves; a carriage return could overwrite the prompt's line.
    write_config(tmp_path, {"h": hostile(confirm=["ansi"])})
    arguments = json.dumps({"path": "safe.txt\u202e\r\x9b2K"}, ensure_ascii=False)
    seen, out, code = on_terminal(["tools", "run", "h__ansi", arguments], cli_env, tmp_path,
                                  [(b"[y/N/a/v]", b"v\n"), (b"[y/N/a/v]", b"n\n")])
    text = seen.decode("utf-8", "replace")
    assert code == 1 and out == "", text
    # The preview line and, after `v`, the full arguments: escapes shown, never acted on.
    assert 'arguments: {"path": "safe.txt\\u202e\\r\\x9b2K"}' in text
    assert '"path": "safe.txt\\u202e\\r\\x9b2K"' in text.split("arguments:")[-1]
    # An MCP server is a destination a grant can name: "a" (always) is offered.
    assert "Allow tool h__ansi? [y/N/a/v]" in text
    assert no_raw(text) and "\u202e" not in text, text


def test_a_huge_input_schema_is_not_offered_to_models(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"h": hostile()})
    listed = cli_in_process(["mcp", "list", "--json"], cli_env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert "h__ansi" in [t["name"] for t in row["tools"]]
    assert "h__fat_schema" not in [t["name"] for t in row["tools"]]
    fat, *wide = row["skipped"]
    assert fat.startswith("h__fat_schema: its input schema has ")
    assert "the limit is 65536" in fat
    # The 40 tools of ~60 KB each: the first ones fit in the 1 MiB a server's tools may take
    # in all, the rest are refused and said to be.
    offered = [t["name"] for t in row["tools"] if t["name"].startswith("h__wide_")]
    assert 10 <= len(offered) <= 17 and len(offered) + len(wide) == 40, (offered, wide)
    assert all("the limit per server is 1048576" in w for w in wide)
    assert row["hidden_tools"] == []  # not "hidden by include/exclude": refused, and said so
    ran = cli_in_process(["tools", "run", "--yes", "h__fat_schema", "{}"], cli_env, tmp_path)
    assert ran.returncode == 2  # as for any tool that is not available
    assert "h__fat_schema" in ran.stderr and "the limit is 65536" in ran.stderr
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize("protocol", ["default", "legacy"])
def test_a_storm_of_list_changed_notices_costs_a_few_listings(tmp_path: Path, protocol) -> None:
    # One listing per notice was 500 concurrent tools/list requests (and as many cache writes
    # and re-registrations) for one call that sends 500 notices.
    options = {} if protocol == "default" else {"protocol": "legacy"}
    path = write_config(tmp_path, {"h": hostile(**options)})
    manager = McpManager(load_config(path))
    try:
        assert manager.refresh() == {"h": None}
        manager.register_known()

        def listings() -> int:
            result = call("h__listings", {})
            assert result.success, result.content
            return int(result.content)

        before = listings()
        stormed = call("h__storm", {"count": 500})
        assert stormed.success, stormed.content
        wait_for(lambda: listings() > before, timeout=60, what="a listing after the notices")
        # Nothing more than one listing now and one after the pause may follow, however long
        # we watch (before: hundreds within this window).
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            assert listings() <= before + 2
            time.sleep(0.2)
        assert "h__storm" in manager.tool_names("h")  # still registered and serving
    finally:
        manager.close()


def call(name: str, arguments: dict):
    tool = ToolRegistry.get(name)
    return ToolExecutor([tool], approver=approve_all).execute({"name": name, "arguments": arguments})


def test_a_flood_of_progress_reports_is_thinned(tmp_path: Path, cli_env) -> None:
    # Every report was a stderr line and an event: 5 000 reports, 5 000 lines.
    write_config(tmp_path, {"h": hostile()})
    ran = cli(["tools", "run", "--yes", "h__flood", '{"count": 5000}'], cli_env, tmp_path, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.strip() == "sent 5000 reports"
    lines = [line for line in ran.stderr.splitlines() if line.startswith("[progress] h__flood")]
    assert lines[0] == "[progress] h__flood 1/5000 report 1"  # the first ones pass at once
    assert 20 <= len(lines) < 1000, len(lines)  # a burst of 20, then 10 a second
