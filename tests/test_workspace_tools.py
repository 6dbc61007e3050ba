"""Workspace tools/*.py: loaded by path, only tools defined in the file count, a broken file is
reported with file and line and never stops the others, and loading is idempotent."""

from __future__ import annotations

import logging
import os
import sys
import textwrap
from pathlib import Path

import pytest

from jarvis.core.config import load_config
from jarvis.core.registry import ToolRegistry
from jarvis.extensions import load_extensions
from jarvis.tools.catalog import build_tools
from jarvis.workspace.tools import load_tool_file, load_workspace_tools

GOOD = '''
from jarvis import tool


@tool(category="text")
def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: What to shout.
    """
    return text.upper() + "!"
'''

SYNTAX_ERROR = '''
from jarvis import tool

@tool
def broken(text: str) -> str:
    return text +
'''

NO_TYPE_HINT = '''
from jarvis import tool


@tool
def untyped(text) -> str:
    """No hint."""
    return text
'''

IMPORTS_OTHERS = '''
from jarvis import tool
from jarvis.tools.calculator import CalculatorTool
from helper_lib import helper_function, helper_tool


@tool
def uses_helper(text: str) -> str:
    """Calls a helper imported from another module."""
    return helper_function(text)
'''

HELPER_LIB = '''
from jarvis import tool


def helper_function(text: str) -> str:
    return "helped " + text


@tool
def helper_tool(text: str) -> str:
    """Defined in helper_lib, not in the workspace."""
    return text
'''

CLASS_TOOL = '''
from jarvis import BaseTool, ToolResult, ToolSpec
from jarvis.core.registry import ToolRegistry


@ToolRegistry.register("reverse_text")
class ReverseTool(BaseTool):
    tool_id = "reverse_text"

    @property
    def spec(self):
        return ToolSpec(name="reverse_text", description="Reverse a text.",
                        parameters={"type": "object", "properties": {"text": {"type": "string"}},
                                    "required": ["text"]})

    def execute(self, **params):
        return ToolResult(tool_name="reverse_text", content=params["text"][::-1])
'''


def make_workspace(root: Path, files: dict[str, str]) -> Path:
    (root / "tools").mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text("")
    for name, text in files.items():
        (root / "tools" / name).write_text(textwrap.dedent(text))
    return root


@pytest.fixture
def helper_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper_lib.py").write_text(HELPER_LIB)
    monkeypatch.syspath_prepend(str(lib))
    yield lib
    sys.modules.pop("helper_lib", None)


def test_tool_file_loads_and_runs(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"shout.py": GOOD})
    report = load_workspace_tools(load_config(ws / "config.toml"))
    assert report.errors == []
    assert report.tools == {"shout": (ws / "tools" / "shout.py").resolve()}
    assert ToolRegistry.origin("shout") == f"workspace {(ws / 'tools' / 'shout.py').resolve()}"
    (tool,) = build_tools(["shout"])
    assert tool.spec.category == "text"
    assert tool.execute(text="hi").content == "HI!"


def test_broken_files_are_reported_with_line_and_do_not_stop_others(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ws = make_workspace(tmp_path / "ws", {"a_syntax.py": SYNTAX_ERROR, "b_untyped.py": NO_TYPE_HINT,
                                          "c_good.py": GOOD})
    with caplog.at_level(logging.WARNING, logger="jarvis.workspace"):
        report = load_workspace_tools(load_config(ws / "config.toml"))
    errors = {e.path.name: e for e in report.errors}
    assert errors["a_syntax.py"].line == 6 and "SyntaxError" in errors["a_syntax.py"].message
    assert errors["b_untyped.py"].line is not None
    assert "'text' has no type hint" in errors["b_untyped.py"].message
    assert f"{(ws / 'tools' / 'a_syntax.py').resolve()}:6" in caplog.text
    assert ToolRegistry.contains("shout")
    assert not ToolRegistry.contains("broken") and not ToolRegistry.contains("untyped")


def test_runtime_error_at_import_names_the_line_and_registers_nothing(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"half.py": GOOD + "\nraise RuntimeError('boom')\n"})
    report = load_workspace_tools(load_config(ws / "config.toml"))
    (error,) = report.errors
    assert error.line == GOOD.count("\n") + 2
    assert error.message == "RuntimeError: boom"
    # all or nothing: the tool defined before the failure is not left behind
    assert not ToolRegistry.contains("shout")


def test_imported_callables_and_tools_never_become_tools(tmp_path: Path,
                                                          helper_on_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"uses.py": IMPORTS_OTHERS})
    report = load_workspace_tools(load_config(ws / "config.toml"))
    assert report.errors == []
    (file_report,) = report.files
    assert file_report.tools == ["uses_helper"]
    assert file_report.ignored == ["helper_tool"]
    assert not ToolRegistry.contains("helper_tool")
    assert not ToolRegistry.contains("helper_function")
    assert not ToolRegistry.contains("CalculatorTool")
    assert ToolRegistry.origin("calculator") == "builtin"  # untouched by the import
    (tool,) = build_tools(["uses_helper"])
    assert tool.execute(text="x").content == "helped x"


def test_registered_class_tool_in_file(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"rev.py": CLASS_TOOL})
    report = load_workspace_tools(load_config(ws / "config.toml"))
    assert report.tools.keys() == {"reverse_text"}
    (tool,) = build_tools(["reverse_text"])
    assert tool.execute(text="abc").content == "cba"


def test_name_clash_with_builtin_is_an_error_for_that_file(tmp_path: Path) -> None:
    clash = GOOD.replace("def shout", "def calculator")
    ws = make_workspace(tmp_path / "ws", {"clash.py": clash, "ok.py": GOOD})
    report = load_workspace_tools(load_config(ws / "config.toml"))
    (error,) = report.errors
    assert error.path.name == "clash.py" and "already registered" in error.message
    assert ToolRegistry.origin("calculator") == "builtin"
    assert ToolRegistry.contains("shout")


def test_loading_is_idempotent_and_picks_up_changes(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"shout.py": GOOD})
    config = load_config(ws / "config.toml")
    load_extensions(config)
    first = ToolRegistry.get("shout")
    load_extensions(config)
    load_extensions(config)
    assert ToolRegistry.get("shout") is first  # not executed again

    path = ws / "tools" / "shout.py"
    path.write_text(textwrap.dedent(GOOD).replace('+ "!"', '+ "?!"'))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    load_extensions(config)
    assert ToolRegistry.get("shout") is not first
    assert ToolRegistry.get("shout").execute(text="a").content == "A?!"


def test_reload_after_registry_was_reset(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"shout.py": GOOD})
    snap = ToolRegistry.snapshot()
    load_tool_file(ws / "tools" / "shout.py")
    ToolRegistry.restore(snap)
    assert not ToolRegistry.contains("shout")
    load_tool_file(ws / "tools" / "shout.py")
    assert ToolRegistry.contains("shout")


def test_underscore_files_and_missing_folder_are_skipped(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws", {"_draft.py": "raise SystemExit(3)\n"})
    report = load_workspace_tools(load_config(ws / "config.toml"))
    assert report.files == []
    (ws / "tools" / "_draft.py").unlink()
    (ws / "tools").rmdir()
    assert load_workspace_tools(load_config(ws / "config.toml")).files == []


def test_without_config_file_cwd_tools_are_not_executed(jarvis_home: Path) -> None:
    # tests run in an empty cwd; a stray ./tools/ must not run just because jarvis started here
    Path("tools").mkdir()
    Path("tools/evil.py").write_text("raise SystemExit('executed')\n")
    (jarvis_home / "tools").mkdir()
    (jarvis_home / "tools" / "shout.py").write_text(textwrap.dedent(GOOD))
    report = load_workspace_tools(load_config())
    assert report.folder == jarvis_home / "tools"
    assert report.tools.keys() == {"shout"}


def test_tools_dir_setting_is_relative_to_the_config_file(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "my-tools").mkdir(parents=True)
    (ws / "my-tools" / "shout.py").write_text(textwrap.dedent(GOOD))
    (ws / "config.toml").write_text('[workspace]\ntools_dir = "my-tools"\n')
    report = load_workspace_tools(load_config(ws / "config.toml"))
    assert report.tools.keys() == {"shout"}


def test_cli_tools_list_shows_workspace_tools_and_reports_broken_file(
        tmp_path: Path, cli_env: dict[str, str]) -> None:
    import subprocess

    ws = make_workspace(tmp_path / "ws", {"good.py": GOOD, "bad.py": SYNTAX_ERROR})
    result = subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "list"], env=cli_env,
                            cwd=ws, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert any(line.startswith("shout ") for line in result.stdout.splitlines())
    assert "calculator" in result.stdout
    assert f"{(ws / 'tools' / 'bad.py').resolve()}:6: SyntaxError" in result.stderr
    assert "Traceback" not in result.stderr

    run = subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "run", "shout",
                          '{"text": "hey"}'], env=cli_env, cwd=ws, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "HEY!"


def test_settings_table_for_unknown_tool_is_a_config_error(tmp_path: Path,
                                                           cli_env: dict[str, str]) -> None:
    import subprocess

    from jarvis.errors import ConfigError

    ws = make_workspace(tmp_path / "ws", {"shout.py": GOOD})
    (ws / "config.toml").write_text('[tools.file_raed]\nallowed_dirs = ["."]\n')
    with pytest.raises(ConfigError, match=r"in .*config.toml: \[tools.file_raed\] names no tool "
                                          r"\(did you mean 'file_read'\?\); tools with "
                                          r"settings: .*file_read"):
        load_extensions(load_config(ws / "config.toml"))
    # settings for a workspace tool are fine (the check runs after tools/ is loaded)
    (ws / "config.toml").write_text("[tools.file_read]\nallowed_dirs = []\n[tools.shout]\n")
    load_extensions(load_config(ws / "config.toml"))

    (ws / "config.toml").write_text('[tools.file_raed]\nallowed_dirs = ["."]\n')
    result = subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "list"], env=cli_env,
                            cwd=ws, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "file_raed" in result.stderr and "Traceback" not in result.stderr


def test_setting_of_the_wrong_type_names_key_and_file(tmp_path: Path,
                                                      cli_env: dict[str, str]) -> None:
    import subprocess

    ws = make_workspace(tmp_path / "ws", {})
    (ws / "config.toml").write_text("[tools.file_read]\nallowed_dirs = 5\n")
    result = subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "run", "file_read",
                             '{"path": "config.toml"}'], env=cli_env, cwd=ws,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "config.toml: tools.file_read.allowed_dirs: Input should be a valid list" in result.stderr
    # right types still load (an int where a float is declared is fine)
    (ws / "config.toml").write_text('[tools.file_read]\nallowed_dirs = ["."]\n'
                                    "[tools.repl]\ntimeout = 5\nmemory_mb = 256\n")
    load_extensions(load_config(ws / "config.toml"))
