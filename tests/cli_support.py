"""`jarvis ARGS` in the test process: click's CliRunner over jarvis.cli's group.

For tests where the process boundary is not what they check (a command's output, exit code,
stdout/stderr split, its messages): a `jarvis` subprocess costs 0.2-0.3 s of CPU to start, one
that loads the MCP client ~1 s. What is about the process itself (signals, kill -9, a server
or daemon, the terminal, imports at start-up, another user) stays a real subprocess.

The call sees exactly `env` as its environment and `cwd` as its working folder, both put back
afterwards (so is anything the command set, e.g. `--config` sets JARVIS_CONFIG); stdin is
`input` (not a terminal). A log record that reaches the root logger goes to the command's
stderr, as in a real process without logging set up (Python's last-resort handler), not to
pytest's log capture: a test that checks what stderr shows sees it. An exception the CLI would
have shown as a traceback fails the test here (the CLI never shows one).
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path


def run_in_process(args: list[str] | tuple[str, ...], env: dict[str, str] | None = None,
                   cwd: Path | str | None = None, input: str | bytes | None = None
                   ) -> subprocess.CompletedProcess[str]:
    """Run `jarvis ARGS` in process; the result as subprocess.run(..., text=True) gives it."""
    # (mcp.client.stdio is imported by conftest.py with the real stderr: its stdio_client
    # binds errlog=sys.stderr when first imported, which must not be CliRunner's stream.)
    from click.testing import CliRunner

    from jarvis.cli import cli

    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    root = logging.getLogger()
    saved_handlers = root.handlers[:]
    try:
        root.handlers = []  # records reach logging.lastResort: the swapped sys.stderr
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        result = CliRunner().invoke(cli, [str(a) for a in args], input=input, prog_name="jarvis")
    finally:
        root.handlers = saved_handlers
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["jarvis", *args], result.exit_code, result.stdout,
                                       result.stderr)
