"""The public API: every name in jarvis.__all__ exists, and importing stays cheap."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import jarvis

HEAVY = ("openai", "mcp", "httpx", "pydantic", "jsonschema", "sqlite_utils", "croniter", "celery",
         "kombu", "redis", "psycopg")
SDK_EXISTS = (Path(jarvis.__file__).parent / "sdk.py").exists()


@pytest.mark.parametrize("name", jarvis.__all__)
def test_every_public_name_exists(name):
    if name == "Jarvis" and not SDK_EXISTS:
        pytest.skip("jarvis/sdk.py is not written yet (Jarvis is loaded lazily from it)")
    assert getattr(jarvis, name) is not None
    assert name in dir(jarvis)


def test_public_names_are_the_real_objects():
    from jarvis.core.types import ToolResult
    from jarvis.tools.executor import ToolExecutor

    assert jarvis.ToolResult is ToolResult and jarvis.ToolExecutor is ToolExecutor
    assert isinstance(jarvis.__version__, str)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        jarvis.nope  # noqa: B018


def test_star_import_gives_every_public_name():
    if not SDK_EXISTS:
        pytest.skip("jarvis/sdk.py is not written yet")
    namespace: dict[str, object] = {}
    exec("from jarvis import *", namespace)
    assert set(jarvis.__all__) - {"__version__"} <= set(namespace)


def _loaded_after(code: str) -> list[str]:
    probe = code + f"\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_jarvis_loads_no_heavy_dependency():
    assert _loaded_after("import jarvis") == []


def test_cli_and_builtin_tools_load_no_heavy_dependency():
    # `jarvis --help` imports jarvis.cli; building an executor imports jarvis.tools; listing
    # the tools imports every module in BUILTIN_MODULES; each command module is imported
    # when it is used.
    commands = sorted(p.stem for p in (Path(jarvis.__file__).parent / "commands").glob("*.py"))
    code = "import jarvis.cli, jarvis.tools, jarvis.tools.executor\njarvis.tools.load_builtins()\n" + "".join(
        f"import jarvis.commands.{name}\n" for name in commands)
    assert _loaded_after(code) == []


def test_running_a_builtin_tool_loads_no_heavy_dependency():
    code = ("from jarvis import ToolExecutor, ToolCall\n"
            "from jarvis.tools.calculator import CalculatorTool\n"
            "r = ToolExecutor([CalculatorTool()]).execute(ToolCall('c', 'calculator', "
            "'{\"expression\": \"2+2\"}'))\nassert r.content == '4'")
    assert _loaded_after(code) == []


def test_every_builtin_module_imports():
    from jarvis.tools.catalog import BUILTIN_MODULES

    for module in (*BUILTIN_MODULES, *jarvis.BUILTIN_CATALOG):
        importlib.import_module(module)
