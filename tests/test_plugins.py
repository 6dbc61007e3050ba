"""Plugins through the `jarvis` entry-point group, with a real (tiny) installed distribution:
a folder holding a `*.dist-info` with entry_points.txt and the plugin module, put on the path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jarvis.core.registry import ToolRegistry
from jarvis.plugins import load_plugins

PLUGIN_MODULE = '''
from jarvis import BaseTool, ToolResult, ToolSpec, tool


@tool
def plugin_echo(text: str) -> str:
    """Echo a text back (from a plugin).

    Args:
        text: What to echo.
    """
    return "echo: " + text


class PluginCounter(BaseTool):
    tool_id = "plugin_counter"

    @property
    def spec(self):
        return ToolSpec(name="plugin_counter", description="Count characters.",
                        parameters={"type": "object",
                                    "properties": {"text": {"type": "string"}},
                                    "required": ["text"]})

    def execute(self, **params):
        return ToolResult(tool_name="plugin_counter", content=str(len(params["text"])))


def register_more():
    @tool(register=False)
    def plugin_made(n: int) -> int:
        """Double a number."""
        return n * 2
    return [plugin_made]
'''

ENTRY_POINTS = '''
[jarvis]
echo = jarvis_demo_plugin:plugin_echo
counter = jarvis_demo_plugin:PluginCounter
more = jarvis_demo_plugin:register_more
broken = jarvis_demo_broken
module = jarvis_demo_module
'''

MODULE_PLUGIN = '''
from jarvis import tool


@tool
def plugin_module_tool(text: str) -> str:
    """Registered when the module is imported."""
    return text[::-1]
'''


def install_demo(root: Path) -> Path:
    """A distribution as pip would leave it in site-packages, without pip."""
    root.mkdir(parents=True, exist_ok=True)
    dist = root / "jarvis_demo_plugin-1.2.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jarvis-demo-plugin\n"
                                   "Version: 1.2\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    (root / "jarvis_demo_plugin.py").write_text(PLUGIN_MODULE)
    (root / "jarvis_demo_broken.py").write_text("import os\n\nraise ImportError('needs a GPU')\n")
    (root / "jarvis_demo_module.py").write_text(MODULE_PLUGIN)
    return root


@pytest.fixture
def demo_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = install_demo(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in ("jarvis_demo_plugin", "jarvis_demo_broken", "jarvis_demo_module"):
        sys.modules.pop(name, None)


def test_env_empty_loads_nothing(demo_plugin: Path) -> None:
    report = load_plugins()  # conftest sets JARVIS_LOAD_PLUGINS=""
    assert report.selection == [] and report.plugins == []
    assert not ToolRegistry.contains("plugin_echo")


def test_unset_loads_all_and_a_failure_does_not_stop_others(
        demo_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JARVIS_LOAD_PLUGINS")
    report = load_plugins()
    by_name = {p.name: p for p in report.plugins}
    assert by_name["echo"].status == "loaded" and by_name["echo"].tools == ["plugin_echo"]
    assert by_name["counter"].tools == ["plugin_counter"]
    assert by_name["more"].tools == ["plugin_made"]
    assert by_name["module"].tools == ["plugin_module_tool"]
    assert by_name["echo"].distribution == "jarvis-demo-plugin"
    assert by_name["echo"].version == "1.2"
    broken = by_name["broken"]
    assert broken.status == "failed"
    assert "jarvis_demo_broken.py:3" in broken.error and "needs a GPU" in broken.error

    assert ToolRegistry.origin("plugin_echo") == "plugin echo (jarvis-demo-plugin 1.2)"
    assert ToolRegistry.get("plugin_echo").execute(text="hi").content == "echo: hi"
    assert ToolRegistry.create("plugin_counter").execute(text="abcd").content == "4"
    assert ToolRegistry.get("plugin_made").execute(n=21).content == "42"


def test_selection_loads_only_named_and_reports_missing(
        demo_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JARVIS_LOAD_PLUGINS", "counter, nope")
    report = load_plugins()
    status = {p.name: p.status for p in report.plugins}
    assert status == {"broken": "skipped", "counter": "loaded", "echo": "skipped",
                      "module": "skipped", "more": "skipped", "nope": "missing"}
    assert ToolRegistry.contains("plugin_counter")
    assert not ToolRegistry.contains("plugin_echo")
    (missing,) = [p for p in report.errors if p.status == "missing"]
    assert "not installed" in missing.error and "counter" in missing.error


def test_loading_twice_is_idempotent(demo_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JARVIS_LOAD_PLUGINS", "echo")
    load_plugins()
    first = ToolRegistry.get("plugin_echo")
    load_plugins()
    assert ToolRegistry.get("plugin_echo") is first
    # a registry reset (as tests do) is repaired on the next load, from the same objects
    ToolRegistry.unregister("plugin_echo")
    assert not ToolRegistry.contains("plugin_echo")
    load_plugins()
    assert ToolRegistry.get("plugin_echo") is first


def test_cli_plugins_lists_what_was_loaded_and_from_where(tmp_path: Path,
                                                          cli_env: dict[str, str]) -> None:
    root = install_demo(tmp_path / "site")
    env = {**cli_env, "PYTHONPATH": str(root)}
    env.pop("JARVIS_LOAD_PLUGINS", None)
    result = subprocess.run([sys.executable, "-m", "jarvis.cli", "plugins", "--json"], env=env,
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 1  # the broken plugin
    data = json.loads(result.stdout)
    assert data["selection"] is None
    echo = next(p for p in data["plugins"] if p["name"] == "echo")
    assert echo == {"name": "echo", "value": "jarvis_demo_plugin:plugin_echo",
                    "distribution": "jarvis-demo-plugin", "version": "1.2",
                    "status": "loaded", "tools": ["plugin_echo"], "error": ""}
    assert "needs a GPU" in result.stderr

    env["JARVIS_LOAD_PLUGINS"] = "echo,counter"
    text = subprocess.run([sys.executable, "-m", "jarvis.cli", "plugins"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "echo  loaded  jarvis_demo_plugin:plugin_echo  from jarvis-demo-plugin 1.2" in text.stdout
    assert "tools: plugin_echo" in text.stdout
    assert "broken  skipped" in text.stdout

    env["JARVIS_LOAD_PLUGINS"] = ""
    off = subprocess.run([sys.executable, "-m", "jarvis.cli", "plugins"], env=env,
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert off.returncode == 0
    assert "plugins disabled" in off.stdout and "echo  skipped" in off.stdout
    assert "loaded" not in off.stdout
