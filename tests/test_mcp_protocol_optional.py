"""Both MCP sides follow the protocol (issue 25, item 10): jarvis's server answers what its
capabilities announce (resources/templates/list beside resources/list), and jarvis's client
treats an optional method's absence ("Method not found") as an empty list, not a failure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mcp_support import SERVERS, write_config


def jarvis(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_jarvis_lists_its_own_servers_resources(tmp_path: Path, cli_env, jarvis_home) -> None:
    stored = jarvis(cli_env, tmp_path, "memory", "index", str(Path(__file__)))
    assert stored.returncode == 0, stored.stderr
    write_config(tmp_path, {"self": {
        "command": sys.executable,
        "args": ["-m", "jarvis.cli", "mcp", "serve", "--tools", "memory_search", "--memory"],
        # The served jarvis keeps its state where this test's does (never the real home).
        "env": {"JARVIS_HOME": str(jarvis_home), "JARVIS_LOAD_PLUGINS": ""},
        # jarvis itself, run from this checkout and writing its JARVIS_HOME: not sandboxed
        "sandbox": False, "connect_timeout": 60}})
    out = jarvis(cli_env, tmp_path, "mcp", "resources", "self", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["uri"] for r in data["resources"]][0].startswith("memory://documents/")
    assert [t["uriTemplate"] for t in data["templates"]] == ["memory://documents/{doc_id}"]


def test_a_missing_optional_method_is_an_empty_list(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"plain": {"command": sys.executable,
                                      "args": [str(SERVERS / "notemplates.py")]}})
    out = jarvis(cli_env, tmp_path, "mcp", "resources", "plain", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["uri"] for r in data["resources"]] == ["notes://only"]
    assert data["templates"] == []
    read = jarvis(cli_env, tmp_path, "mcp", "read", "plain", "notes://only")
    assert read.returncode == 0 and read.stdout == "the note\n", read.stderr
