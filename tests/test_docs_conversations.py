"""docs/conversations.md and docs/inbound.md as written: the Python example runs against the
loopback engine, every TOML table is a valid config, every `jarvis ...` command line names
options that exist."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.core.config import load_config
from jarvis.testing import FakeOpenAIServer, reply, tool_call

DOCS = Path(__file__).resolve().parent.parent / "docs"
CONVERSATIONS = (DOCS / "conversations.md").read_text("utf-8")
INBOUND = (DOCS / "inbound.md").read_text("utf-8")


def blocks(doc: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", doc, flags=re.S)


def test_the_sdk_example_runs(monkeypatch, capsys):
    (block,) = [b for b in blocks(CONVERSATIONS, "python") if "j.conversation(" in b]
    script = [reply(tool_calls=[tool_call("calculator", {"expression": "6*7"})]),
              "42, Ada.", "Your name is Ada.", "56."]
    with FakeOpenAIServer(script) as server:
        monkeypatch.setenv("JARVIS_ENGINE", "vllm")
        monkeypatch.setenv("VLLM_HOST", server.url)
        exec(compile(block, "docs/conversations.md", "exec"), {"__name__": "doc"})
        # The third request went with the whole conversation so far.
        sent = [m["content"] for m in server.requests[2]["messages"]]
        assert sent[0] == "My name is Ada. What is 6 times 7?" and sent[-1] == "What is my name?"
        assert [m["content"] for m in server.requests[3]["messages"]][-3:] == [
            "What is my name?", "Your name is Ada.", "And 7 times 8?"]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "Your name is Ada."
    assert re.fullmatch(r"[0-9a-f]{12} 3", printed[1])


@pytest.mark.parametrize("doc", ["conversations", "inbound"])
def test_every_toml_block_is_a_valid_config(doc, tmp_path, monkeypatch):
    text = CONVERSATIONS if doc == "conversations" else INBOUND
    for name in ("TELEGRAM_BOT_TOKEN", "JARVIS_MAIL_PASSWORD", "JARVIS_MAIL_SECRET"):
        monkeypatch.setenv(name, "x")
    found = blocks(text, "toml")
    assert found
    for block in found:
        path = tmp_path / "config.toml"
        path.write_text(block)
        load_config(path)


@pytest.mark.parametrize("doc", ["conversations", "inbound"])
def test_every_command_line_uses_options_that_exist(doc, cli_env):
    text = CONVERSATIONS if doc == "conversations" else INBOUND
    lines = [line.split(" #")[0].strip() for block in blocks(text, "bash")
             for line in block.splitlines() if line.startswith("jarvis ")]
    assert lines
    for line in lines:
        words = shlex.split(line)[1:]
        # Options only: an argument (a question, an id) is the reader's.
        command = [w for w in words if not re.fullmatch(r"[0-9a-f]{6,}|[A-Z].*|\d+", w)]
        path = [w for w in command if not w.startswith("-")][:2]
        out = subprocess.run([sys.executable, "-m", "jarvis.cli", *path, "--help"], env=cli_env,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, (line, out.stderr)
        for option in (w.split("=")[0] for w in command if w.startswith("-")):
            assert option in out.stdout, (line, option)
