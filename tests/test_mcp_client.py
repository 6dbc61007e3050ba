"""External MCP servers as jarvis tools, against real SDK-written servers (stdio and HTTP).

The servers of this module are started once (they take ~1 s each to import the SDK) and
shared; tests that break a connection on purpose (crash, hang) rely on the reconnect.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from mcp_support import HttpToolbox, approve_all, pid_alive, stdio_server, write_config
from waiting import wait_for

from jarvis.core.config import load_config
from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ImageBlock
from jarvis.mcp.loop import background_loop
from jarvis.mcp.manager import McpManager
from jarvis.tools.executor import ToolExecutor


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("mcp-client")
    web = HttpToolbox(folder)
    path = write_config(folder, {
        # Calls that are not about timeouts get 30 s: a loaded machine can be seconds late.
        "tb": stdio_server("tb", timeout=30, tool_timeouts={"sleep_ms": 0.5, "hang": 1.5},
                           env={"TOOLBOX_DIR": "${HOME}/toolbox"}),
        "other": stdio_server("other", protocol="legacy"),  # the initialize handshake
        # unsandboxed (sandbox = false): a test follows its processes by their host pids
        "host": stdio_server("host", sandbox=False),
        "web": {"url": web.url},
        "broken": {"command": "jarvis-no-such-mcp-server-binary"},
        "failing": stdio_server("failing", "--fail-start"),
        "off": stdio_server("off", enabled=False),
    })
    # Module-scoped, so the per-test JARVIS_HOME does not exist yet: give the servers' logs a
    # home of their own (never the user's ~/.jarvis, never shared with a concurrent run).
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JARVIS_HOME", str(folder / "home"))
        manager = McpManager(load_config(path))
    manager.refresh()
    yield manager
    manager.close()
    web.close()


def run(name: str, arguments: dict, approver=approve_all):
    tool = ToolRegistry.get(name)
    return ToolExecutor([tool], approver=approver).execute({"name": name, "arguments": arguments})


@pytest.fixture
def registered(servers: McpManager):
    servers.register_known()
    servers.auto_register = True  # live list changes update the registry during the test
    yield servers
    servers.auto_register = False


def test_tools_are_registered_with_server_prefix_and_schema(registered: McpManager) -> None:
    names = ToolRegistry.keys()
    for expected in ("tb__echo", "tb__add", "other__search", "web__echo"):
        assert expected in names
    assert not any(n.startswith(("broken__", "failing__", "off__")) for n in names)
    spec = ToolRegistry.get("tb__add").spec
    assert spec.parameters["properties"]["a"]["type"] == "integer"
    assert spec.parameters["required"] == ["a", "b"]
    assert spec.category == "mcp"
    assert spec.metadata["mcp_server"] == "tb" and spec.metadata["mcp_tool"] == "add"
    # The tool appears in every export format, under its jarvis name.
    assert spec.to_openai_function()["function"]["name"] == "tb__add"


def test_call_through_executor_keeps_structured_content(registered: McpManager) -> None:
    result = run("tb__add", {"a": 2, "b": 40})
    assert result.success, result.content
    assert result.content == "42"
    assert result.metadata["structured_content"] == {"result": 42}
    assert result.metadata["mcp_server"] == "tb"


def test_two_servers_with_the_same_tool_name_do_not_collide(registered: McpManager) -> None:
    first = run("tb__search", {"query": "cats"})
    second = run("other__search", {"query": "cats"})
    assert first.content == "tb result for cats"
    assert second.content == "other result for cats"


def test_image_content_becomes_an_image_block(registered: McpManager) -> None:
    result = run("tb__picture", {})
    assert result.success
    images = [b for b in result.blocks if isinstance(b, ImageBlock)]
    assert len(images) == 1 and images[0].mimeType == "image/png"
    assert images[0].data.startswith("iVBORw0KGgo")
    assert result.to_tool_output()["blocks"][0]["type"] == "image"


def test_is_error_becomes_a_failed_result(registered: McpManager) -> None:
    result = run("tb__fail", {"message": "the disk is full"})
    assert not result.success
    assert result.error_type is ErrorType.EXECUTION
    assert "fail" in result.content


def test_invalid_arguments_are_caught_before_the_server(registered: McpManager) -> None:
    result = run("tb__add", {"a": "two"})
    assert not result.success and result.error_type is ErrorType.INVALID_ARGS


def test_destructive_tool_requires_confirmation(registered: McpManager) -> None:
    assert ToolRegistry.get("tb__delete_everything").spec.requires_confirmation
    # Annotations are the server's own claims: they count only for a server marked trusted
    # (docs/trust.md), so here even the tool that says readOnlyHint asks first.
    assert ToolRegistry.get("tb__picture").spec.requires_confirmation
    denied = run("tb__delete_everything", {"confirm_phrase": "yes"}, approver=None)
    assert denied.error_type is ErrorType.DENIED
    allowed = run("tb__delete_everything", {"confirm_phrase": "yes"}, approver=lambda s, a: True)
    assert allowed.success and allowed.content == "deleted"


def test_calls_of_one_turn_share_the_session_concurrently(registered: McpManager) -> None:
    # Each call waits on the server until all four are in progress at once: calls sent one
    # after another would each wait alone. (Observed, not timed: a loaded machine made a
    # wall-clock bound here flaky.)
    executor = ToolExecutor([ToolRegistry.get("tb__meet")], approver=approve_all)
    out = executor.execute_many([{"name": "tb__meet",
                                  "arguments": {"key": "one-turn", "parties": 4}}] * 4)
    assert [r.content for r in out] == ["met"] * 4, [r.content for r in out]


def test_streamable_http_server(registered: McpManager) -> None:
    result = run("web__echo", {"text": "over http"})
    assert result.success and result.content == "over http"
    assert registered.servers["web"].connection.status == "ready"


def test_failed_servers_are_reported_and_do_not_stop_the_others(registered: McpManager) -> None:
    rows = {row["name"]: row for row in registered.status()}
    assert rows["broken"]["status"] == "failed"
    assert "command not found" in rows["broken"]["error"]
    assert rows["failing"]["status"] == "failed"
    assert "cannot open the database" in rows["failing"]["error"]  # its stderr, shown
    assert rows["off"]["status"] == "disabled"
    assert rows["tb"]["status"] == "connected" and rows["tb"]["tools"]


def test_stderr_noise_goes_to_the_log_not_the_protocol(registered: McpManager) -> None:
    assert run("tb__echo", {"text": "still fine"}).content == "still fine"
    log = registered.servers["tb"].connection.log_path
    assert "stderr noise" in Path(log).read_text()


def test_server_env_expands_variables_and_is_minimal(registered: McpManager) -> None:
    assert run("tb__getenv", {"name": "TOOLBOX_DIR"}).content == os.environ["HOME"] + "/toolbox"
    assert run("tb__getenv", {"name": "JARVIS_HOME"}).content == ""  # not inherited


def test_per_tool_timeout_override(registered: McpManager) -> None:
    assert ToolRegistry.get("tb__sleep_ms").call_timeout == 0.5
    assert ToolRegistry.get("tb__echo").call_timeout == 30


def test_tool_list_refreshed_when_the_server_says_it_changed(registered: McpManager) -> None:
    assert run("tb__grow", {"name": "fresh"}).content == "grown"
    wait_for(lambda: "tb__fresh" in ToolRegistry._entries)
    assert run("tb__fresh", {}).content == "I am fresh"


def test_tool_list_refreshed_on_a_handshake_era_notification(registered: McpManager) -> None:
    assert registered.servers["other"].connection.protocol_version < "2026"
    assert run("other__grow", {"name": "late"}).content == "grown"
    wait_for(lambda: "other__late" in ToolRegistry._entries)
    assert run("other__late", {}).content == "I am late"


def test_crash_mid_call_fails_naming_the_server_then_reconnects(registered: McpManager) -> None:
    connection = registered.servers["tb"].connection
    before = connection.connects
    crashed = run("tb__crash", {})
    assert not crashed.success
    assert crashed.error_type is ErrorType.TRANSPORT
    assert "'tb'" in crashed.content and "crashing now" in crashed.content
    again = run("tb__echo", {"text": "back"})
    assert again.success and again.content == "back"
    assert connection.connects == before + 1


def test_hang_times_out_naming_the_server_then_reconnects(registered: McpManager) -> None:
    hung = run("tb__hang", {})
    assert hung.error_type is ErrorType.TIMEOUT
    assert "'tb'" in hung.content and "1.5 s" in hung.content
    assert run("tb__echo", {"text": "awake"}).content == "awake"


def test_close_ends_the_whole_process_tree(registered: McpManager) -> None:
    # (A sandboxed server's tree ends with its PID namespace: test_mcp_sandbox.py.)
    child = int(run("host__spawn_child", {}).content)
    server = int(run("host__pid", {}).content)
    assert pid_alive(child) and pid_alive(server)
    background_loop().run(registered.servers["host"].connection.close())
    # Observable right away: close returns once the tree is gone.
    assert not pid_alive(server) and not pid_alive(child)
    assert run("host__echo", {"text": "reconnected"}).content == "reconnected"
