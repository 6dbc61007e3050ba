"""How MCP tools enter the registry: names, include/exclude, the on-disk cache, servers started
only when needed, config errors, and the `mcp_adapter` bridge."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp_support import approve_all, stdio_server, write_config

from jarvis.core.config import load_config
from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType
from jarvis.errors import ConfigError
from jarvis.mcp.cache import RemoteTool, cache_dir, config_key, read_tools, write_tools
from jarvis.mcp.manager import active_manager, register_mcp_tools
from jarvis.mcp.naming import check_server_name, local_names
from jarvis.tools.base import check_tool_name
from jarvis.tools.catalog import build_tool
from jarvis.tools.executor import ToolExecutor


def test_local_names_are_valid_distinct_and_stable() -> None:
    remote = ["search", "weird.name/x", "a.b", "a_b", "x" * 80]
    names = local_names("srv", remote)
    assert names["search"] == "srv__search"
    assert names["weird.name/x"] == "srv__weird_name_x"
    assert names["a.b"] != names["a_b"]  # both clean to srv__a_b: each gets a hash suffix
    assert len(set(names.values())) == len(remote)
    for name in names.values():
        check_tool_name(name)  # a valid OpenAI function name, <= 64 characters
    assert local_names("srv", remote) == names


@pytest.mark.parametrize("name", ["a.b", "a__b", "_a", "a_", "x" * 40, "sp ace"])
def test_bad_server_names(name: str) -> None:
    assert check_server_name(name) is not None


def test_config_errors_name_the_problem(tmp_path: Path) -> None:
    write_config(tmp_path, {"a__b": {"command": "x"}})
    with pytest.raises(ConfigError, match="a__b"):
        load_config(tmp_path / "config.toml")
    write_config(tmp_path, {"both": {"command": "x", "url": "http://127.0.0.1:1/mcp"}})
    with pytest.raises(ConfigError, match="exactly one of `command`"):
        load_config(tmp_path / "config.toml")
    write_config(tmp_path, {"neg": {"command": "x", "tool_timeouts": {"t": -1}}})
    with pytest.raises(ConfigError, match="tool_timeouts.t"):
        load_config(tmp_path / "config.toml")


def _seed_cache(config, name: str, tools: list[str]) -> None:
    server = config.mcp.servers[name]
    write_tools(cache_dir(), name, config_key(server, config.base_dir),
                [RemoteTool(name=t, description=f"the {t} tool",
                            input_schema={"type": "object", "properties": {}}) for t in tools])


def test_cached_tools_register_without_starting_a_server(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    write_config(tmp_path, {"tb": stdio_server("tb", "--touch", str(marker), sandbox=False,
                                               include=["ec*", "add", "pid"], exclude=["add"])})
    config = load_config(tmp_path / "config.toml")
    _seed_cache(config, "tb", ["echo", "echo2", "add", "pid", "search"])
    register_mcp_tools(config)
    names = [n for n in ToolRegistry.keys() if n.startswith("tb__")]
    assert names == ["tb__echo", "tb__echo2", "tb__pid"]  # include, then exclude
    ToolRegistry.get("calculator")
    build_tool("tb__echo", {"config": config})
    assert not marker.exists()  # listing and building tools started nothing
    # Calling one starts the server; its live list replaces the cache (echo2 is gone).
    tool = ToolRegistry.get("tb__echo")
    result = ToolExecutor([tool], approver=approve_all).execute(
        {"name": "tb__echo", "arguments": {"text": "hi"}})
    assert result.success and result.content == "hi"
    assert marker.exists()
    cached = read_tools(cache_dir(), "tb", config_key(config.mcp.servers["tb"], config.base_dir))
    assert "echo2" not in [t.name for t in cached] and "spawn_child" in [t.name for t in cached]
    assert "tb__echo2" not in ToolRegistry.keys()
    active_manager().close()


def test_cold_server_starts_only_when_one_of_its_tools_is_asked_for(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    # unsandboxed: the servers mark their starts in a file of the host's
    write_config(tmp_path, {"cold": stdio_server("cold", "--touch", str(marker), sandbox=False,
                                                 trusted=True),
                            "never": {"command": "jarvis-no-such-mcp-binary"}})
    config = load_config(tmp_path / "config.toml")
    register_mcp_tools(config)
    ToolRegistry.get("calculator")
    assert not marker.exists()
    tool = ToolRegistry.get("cold__search")  # unknown yet: this server is asked, not `never`
    assert marker.exists()
    assert active_manager().servers["never"].connection.connects == 0
    result = ToolExecutor([tool], approver=approve_all).execute(
        {"name": "cold__search", "arguments": {"query": "q"}})
    assert result.content == "cold result for q"

    # The bridge reaches the same server by server and tool name: the tools that need no
    # confirmation, which are only tools a trusted server marks read-only (docs/trust.md).
    bridge = build_tool("mcp_adapter", {"config": config})
    executor = ToolExecutor([bridge])
    listing = executor.execute({"name": "mcp_adapter", "arguments": {"server": "cold"}})
    assert "echo: Return the text unchanged. [requires confirmation" in listing.content
    called = executor.execute({"name": "mcp_adapter", "arguments": {
        "server": "cold", "tool": "picture", "arguments": {}}})
    assert called.success and called.images(), called.content
    for name, arguments in (("echo", {"text": "via bridge"}),  # no annotations: destructive
                            ("delete_everything", {"confirm_phrase": "x"})):
        refused = executor.execute({"name": "mcp_adapter", "arguments": {
            "server": "cold", "tool": name, "arguments": arguments}})
        assert refused.error_type is ErrorType.DENIED and f"cold__{name}" in refused.content
    unknown = executor.execute({"name": "mcp_adapter", "arguments": {"server": "nope"}})
    assert unknown.error_type is ErrorType.INVALID_ARGS and "cold" in unknown.content
    never = executor.execute({"name": "mcp_adapter", "arguments": {"server": "never", "tool": "x"}})
    assert never.error_type is ErrorType.TRANSPORT and "command not found" in never.content
    active_manager().close()


def test_unreachable_server_with_cached_tools_gives_a_transport_failure(tmp_path: Path) -> None:
    write_config(tmp_path, {"gone": {"url": "http://127.0.0.1:9/mcp", "connect_timeout": 2}})
    config = load_config(tmp_path / "config.toml")
    _seed_cache(config, "gone", ["lookup"])
    register_mcp_tools(config)
    tool = ToolRegistry.get("gone__lookup")
    result = ToolExecutor([tool], approver=approve_all).execute({"name": "gone__lookup", "arguments": {}})
    assert not result.success and result.error_type is ErrorType.TRANSPORT
    assert "'gone'" in result.content
    assert active_manager().status()[0]["status"] == "failed"


def test_no_servers_means_no_mcp_tools_and_no_loader(tmp_path: Path) -> None:
    write_config(tmp_path, {})
    assert register_mcp_tools(load_config(tmp_path / "config.toml")) is None
    assert "mcp" not in ToolRegistry._on_demand
    result = build_tool("mcp_adapter").execute(server="x")
    assert not result.success and "no MCP servers are configured" in result.content


def test_docs_config_example_is_valid(tmp_path: Path) -> None:
    """The config example in docs/mcp.md loads as written (so the docs cannot drift)."""
    import re

    doc = (Path(__file__).resolve().parent.parent / "docs" / "mcp.md").read_text(encoding="utf-8")
    (example,) = re.findall(r"```toml\n(.*?)```", doc, re.S)
    (tmp_path / "config.toml").write_text(example, encoding="utf-8")
    servers = load_config(tmp_path / "config.toml").mcp.servers
    assert sorted(servers) == ["files", "github", "notes", "search"]
    assert servers["github"].network == ["api.github.com"] and servers["github"].sandbox
    assert servers["search"].tool_timeouts == {"deep_search": 300}
    assert servers["notes"].include == ["find_note", "add_note"]
    assert servers["files"].exclude == ["write_*", "move_file"]
