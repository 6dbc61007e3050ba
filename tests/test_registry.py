"""Registries: registration, duplicates, lookup errors, creation with dependencies, built-ins."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from jarvis.core.registry import AgentRegistry, EngineRegistry, ToolRegistry
from jarvis.core.types import ToolResult
from jarvis.errors import ConfigError, DuplicateNameError, UnknownNameError
from jarvis.tools.base import BaseTool
from jarvis.tools.catalog import BUILTIN_MODULES, build_tool, build_tools
from jarvis.tools.spec import ToolSpec

OWN_BUILTINS = {"calculator", "think", "file_read"}


def _tool_class(name: str, needs: Any = ("engine",)) -> type[BaseTool]:
    class Made(BaseTool):
        tool_id = name

        def __init__(self, engine: Any = None, prefix: str = "") -> None:
            self.engine = engine
            self.prefix = prefix

        @property
        def spec(self) -> ToolSpec:
            return ToolSpec(name=name, description="made")

        def execute(self, **params: Any) -> ToolResult:
            return ToolResult(tool_name=name, content=f"{self.prefix}{self.engine}")

    Made.needs = needs
    return Made


def test_register_get_create_and_list():
    cls = ToolRegistry.register("reg_tool")(_tool_class("reg_tool"))
    assert ToolRegistry.get("reg_tool") is cls
    assert ToolRegistry.contains("reg_tool")
    assert "reg_tool" in ToolRegistry.keys()
    assert dict(ToolRegistry.items())["reg_tool"] is cls
    made = ToolRegistry.create("reg_tool", engine="e1")
    assert isinstance(made, cls) and made.engine == "e1"
    assert ToolRegistry.origin("reg_tool").startswith("module ")


class FirstDup(BaseTool):
    spec = ToolSpec(name="dup", description="first")

    def execute(self, **params: Any) -> ToolResult:
        return ToolResult("dup", "1")


class SecondDup(FirstDup):
    pass


def test_duplicate_name_is_an_error_naming_both():
    ToolRegistry.register("dup")(FirstDup)
    with pytest.raises(DuplicateNameError, match="'dup' is already registered"):
        ToolRegistry.register("dup")(SecondDup)
    # but registering the very same object again is harmless
    same = ToolRegistry.get("dup")
    ToolRegistry.register_value("dup", same)
    # and replace=True is the explicit way to override
    other = _tool_class("dup")
    ToolRegistry.register("dup", replace=True)(other)
    assert ToolRegistry.get("dup") is other


def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(UnknownNameError) as info:
        ToolRegistry.get("no_such_tool")
    message = str(info.value)
    assert "unknown tool 'no_such_tool'" in message
    for name in OWN_BUILTINS:
        assert name in message


def test_registries_are_separate():
    AgentRegistry.register("same_name")(object)
    EngineRegistry.register("same_name")(dict)
    assert AgentRegistry.get("same_name") is object and EngineRegistry.get("same_name") is dict
    assert not ToolRegistry.contains("same_name")
    with pytest.raises(UnknownNameError, match="unknown engine"):
        EngineRegistry.get("nothing")


def test_empty_key_is_rejected():
    with pytest.raises(DuplicateNameError, match="non-empty"):
        ToolRegistry.register("")(object)


def test_create_with_passes_only_declared_services():
    ToolRegistry.register("deps_tool")(_tool_class("deps_tool"))
    made = ToolRegistry.create_with("deps_tool", {"engine": "E", "memory": "B", "model": "m"})
    assert made.engine == "E"
    ToolRegistry.register("no_needs_tool")(_tool_class("no_needs_tool", needs=()))
    # `engine` is a constructor parameter, but the class did not ask for the engine.
    assert ToolRegistry.create_with("no_needs_tool", {"engine": "E"}).engine is None


def test_build_tool_applies_settings_and_rejects_unknown_ones():
    ToolRegistry.register("set_tool")(_tool_class("set_tool"))
    made = build_tool("set_tool", {"engine": "E", "scheduler": "S"}, {"prefix": ">"})
    assert made.execute().content == ">E"
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) colour in \[tools.set_tool\]; "
                                          r"valid: prefix$"):
        build_tool("set_tool", {}, {"colour": "red"})
    with pytest.raises(ConfigError, match=r"prefx \(did you mean 'prefix'\?\)"):
        build_tool("set_tool", {}, {"prefx": "red"})
    # A declared service is not a setting: the table cannot set it.
    with pytest.raises(ConfigError, match="unknown setting.*engine"):
        build_tool("set_tool", {}, {"engine": "mine"})


def test_a_parameter_named_like_a_service_gets_nothing_unless_declared():
    class Search(BaseTool):
        tool_id = "search_like"

        def __init__(self, backend: str = "duckduckgo", config: Any = None,
                     engine: Any = None) -> None:
            self.got = (backend, config, engine)

        spec = ToolSpec(name="search_like", description="x")

        def execute(self, **params: Any) -> ToolResult:
            return ToolResult("search_like", "")

    ToolRegistry.register("search_like")(Search)
    made = build_tool("search_like", {"memory": "STORE", "config": "CFG", "engine": "E",
                                      "backend": "B"}, {"backend": "searxng"})
    assert made.got == ("searxng", None, None)


def test_needs_naming_an_unknown_service_or_parameter_fails_at_definition():
    from jarvis.errors import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match=r"unknown service 'memroy' \(did you mean "
                                                  r"'memory'\?\); jarvis provides engine"):
        class Typo(BaseTool):
            needs = ("memroy",)
            spec = ToolSpec(name="typo", description="x")

            def __init__(self, memroy: Any = None) -> None:
                pass

            def execute(self, **params: Any) -> ToolResult:
                return ToolResult("typo", "")
    with pytest.raises(ToolDefinitionError, match="needs names constructor parameter.*store"):
        class Missing(BaseTool):
            needs = {"store": "memory"}
            spec = ToolSpec(name="missing", description="x")

            def execute(self, **params: Any) -> ToolResult:
                return ToolResult("missing", "")


def test_build_tools_fails_on_the_first_unknown_name_before_building():
    with pytest.raises(UnknownNameError, match="nope"):
        build_tools(["calculator", "nope"])
    built = build_tools(["calculator", "think"])
    assert [t.spec.name for t in built] == ["calculator", "think"]


def test_file_read_settings_from_config_table(tmp_path):
    reader = build_tool("file_read", {}, {"allowed_dirs": [str(tmp_path)]})
    assert reader.allowed_dirs == [tmp_path.resolve()]


def test_the_builtin_name_table_is_what_each_module_registers():
    # A fresh interpreter, reading the registry directly (no lazy loading on lookup): each
    # catalog module registers exactly the names jarvis.BUILTIN_TOOLS gives it, and
    # importing the tool package registers none.
    code = (
        "import importlib, json, jarvis, jarvis.tools\n"
        "from jarvis.core.registry import ToolRegistry as R\n"
        "from jarvis.tools.catalog import BUILTIN_MODULES\n"
        "found = {'jarvis.tools': sorted(R._entries)}\n"
        "for module in (*BUILTIN_MODULES, *jarvis.BUILTIN_CATALOG[1:]):\n"
        "    before = set(R._entries)\n"
        "    importlib.import_module(module)\n"
        "    found[module] = sorted(set(R._entries) - before)\n"
        "print(json.dumps(found))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    import jarvis

    assert found.pop("jarvis.tools") == []
    expected: dict[str, list[str]] = {}
    for name, module in jarvis.BUILTIN_TOOLS.items():
        expected.setdefault(module, []).append(name)
    assert found == {module: sorted(names) for module, names in expected.items()}
    assert set(found) == {*BUILTIN_MODULES, *jarvis.BUILTIN_CATALOG[1:]}
    assert OWN_BUILTINS <= set(jarvis.BUILTIN_TOOLS)


def test_a_lookup_by_name_loads_that_builtin_alone():
    code = (
        "import json, sys\n"
        "from jarvis.core.registry import ToolRegistry as R\n"
        "tool = R.get('calculator').__name__\n"
        "has = R.contains('think')\n"
        "alone = sorted(m for m in sys.modules if m.startswith(('jarvis.tools.calculator',\n"
        "    'jarvis.tools.think', 'jarvis.tools.web_fetch', 'jarvis.scheduler', 'jarvis.mcp')))\n"
        "names = R.keys()\n"
        "print(json.dumps([tool, has, alone, R._loaded, 'web_fetch' in names]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [
        "CalculatorTool", True, ["jarvis.tools.calculator", "jarvis.tools.think"], True, True]


def test_every_builtin_builds_alone_in_a_fresh_interpreter():
    # Loading a built-in by name imports its module alone: each must build, with the same
    # spec, without what the rest of the catalog would have imported before it (a test
    # process has them all loaded, so only a fresh interpreter shows a missing import).
    from concurrent.futures import ThreadPoolExecutor

    import jarvis

    code = ("import json, sys\n"
            "from jarvis.tools.catalog import build_tool\n"
            "spec = build_tool(sys.argv[1]).spec\n"
            "print(json.dumps([spec.name, spec.egress, sorted(spec.output_labels)]))\n")

    def alone(name: str) -> tuple[str, Any]:
        out = subprocess.run([sys.executable, "-c", code, name], capture_output=True, text=True)
        assert out.returncode == 0, (name, out.stderr[-2000:])
        return name, json.loads(out.stdout)

    with ThreadPoolExecutor(4) as pool:
        built = dict(pool.map(alone, sorted(jarvis.BUILTIN_TOOLS)))
    for name, got in built.items():
        spec = build_tool(name).spec
        assert got == [spec.name, spec.egress, sorted(spec.output_labels)], name


def test_a_newcomer_taking_a_builtin_name_is_refused_before_the_catalog_loads():
    # As when importing the tool package registered every built-in: the built-in of that name
    # is registered first, and the newcomer gets the clash.
    code = (
        "from jarvis import tool\n"
        "from jarvis.errors import DuplicateNameError\n"
        "try:\n"
        "    @tool\n"
        "    def think(thought: str) -> str:\n"
        "        \"\"\"Not the built-in.\"\"\"\n"
        "        return thought\n"
        "except DuplicateNameError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "tool 'think' is already registered" in out.stdout, out


def test_the_catalog_hook_loads_every_part_of_the_builtin_catalog():
    # The registry (core) imports no tool; jarvis/__init__ installs the hook that loads the
    # tool package's built-ins, the scheduler's tools and the MCP bridge on first lookup.
    code = (
        "import json\n"
        "from jarvis.core.registry import ToolRegistry as R\n"
        "print(json.dumps(R.keys()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    names = set(json.loads(out.stdout))
    assert OWN_BUILTINS | {"schedule_task", "mcp_adapter", "memory_index", "llm"} <= names


def test_lookup_loads_builtins_lazily():
    code = ("from jarvis.core.registry import ToolRegistry as R\n"
            "print(R.get('calculator').__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "CalculatorTool"
