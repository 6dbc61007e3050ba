"""docs/environments.md runs as written: its Python blocks (the EnvClient one against a real
`jarvis serve` on a free port, the only change being the port in its URL)."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

DOC = (Path(__file__).resolve().parent.parent / "docs" / "environments.md").read_text("utf-8")


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC, flags=re.S)


def run(source: str) -> str:
    import types

    module = types.ModuleType("doc_example")  # dataclasses look their module up
    sys.modules["doc_example"] = module
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, "docs/environments.md", "exec"), module.__dict__)
    finally:
        del sys.modules["doc_example"]
    return out.getvalue()


def expected(source: str) -> list[str]:
    """The values the block's comments promise, in order ('# 42' after a print)."""
    return [m.group(1).strip() for m in re.finditer(r"print\(.*\)\s+# (.*)", source)]


def test_the_action_example():
    (block,) = [b for b in python_blocks() if "GuessTheNumber" in b]
    assert run(block).splitlines() == ["lower", "True", "tool_not_found", "['guess'] 2"]


def test_the_tool_environment_and_mcp_examples_print_what_they_say():
    for block in [b for b in python_blocks() if "ToolEnvironment(" in b]:
        printed = [line.strip() for line in run(block).splitlines() if line.strip()]
        promised = expected(block)
        assert printed == promised, (printed, promised)


def test_the_env_client_example_against_jarvis_serve(cli_env, tmp_path):
    from logged_process import LoggedProcess

    (block,) = [b for b in python_blocks() if "EnvClient(" in b]
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "serve", "--port", "0",
                             "--tools", "calculator,repl", "--yes"], env=cli_env, cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    server = LoggedProcess(proc, "jarvis serve")
    try:
        url = server.wait_for_line("listening on").rsplit(" ", 1)[-1]
        printed = run(block.replace("http://127.0.0.1:8765", url)).splitlines()
    finally:
        proc.terminate()
        proc.wait(10)
        server.close_streams()
    assert printed == ["['calculator', 'repl']", "42 1"]
