"""The served catalog in-process: which tools are exposed, confirmation by naming, and every
call going through the ToolExecutor (driven by the SDK Client connected to the Server object)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from approvals_support import post_out, read_inbox

from jarvis.core.config import load_config
from jarvis.core.registry import ToolRegistry
from jarvis.errors import UserError
from jarvis.server.mcp_serve import build_server, make_executor, parse_host_port, select_tools
from jarvis.tools.base import tool


@tool(requires_confirmation=True, register=False)
def wipe_scratch(folder: str) -> str:
    """Pretend to wipe a scratch folder.

    Args:
        folder: Which folder.
    """
    return f"wiped {folder}"


@pytest.fixture(autouse=True)
def registered_wipe() -> None:
    ToolRegistry.register_value("wipe_scratch", wipe_scratch)  # rolled back after each test


def _session(tools, config, approved, calls):
    from mcp import Client

    server = build_server(tools, make_executor(tools, config, approved))

    async def go():
        async with Client(server) as client:
            listed = await client.list_tools()
            answers = [await client.call_tool(name, args) for name, args in calls]
            return listed, answers

    return asyncio.run(go())


def test_default_selection_leaves_out_confirmation_tools(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("")
    config = load_config(tmp_path / "config.toml")
    tools, approved = select_tools(config, None)
    names = {t.spec.name for t in tools}
    assert {"calculator", "think"} <= names
    assert "wipe_scratch" not in names and "mcp_adapter" not in names and not approved
    listed, (answer,) = _session(tools, config, approved, [("wipe_scratch", {"folder": "x"})])
    assert answer.is_error and "unknown tool 'wipe_scratch'" in answer.content[0].text


def test_naming_a_confirmation_tool_exposes_and_approves_it(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("")
    config = load_config(tmp_path / "config.toml")
    tools, approved = select_tools(config, ["wipe_scratch", "calculator"])
    assert approved == {"wipe_scratch"}
    listed, answers = _session(tools, config, approved, [
        ("wipe_scratch", {"folder": "tmp"}),
        ("calculator", {"expression": "2**10"}),
        ("calculator", {"expression": 5}),
    ])
    by_name = {t.name: t for t in listed.tools}
    assert by_name["wipe_scratch"].annotations.destructive_hint is True
    assert by_name["wipe_scratch"].input_schema["required"] == ["folder"]
    assert [a.content[0].text for a in answers[:2]] == ["wiped tmp", "1024"]
    assert answers[2].is_error and "invalid arguments for calculator" in answers[2].content[0].text


@pytest.mark.parametrize("value", ["nowhere", "host:", "host:99999", ":-1", "h:65536"])
def test_bad_http_address(value: str) -> None:
    with pytest.raises(UserError, match="HOST:PORT"):
        parse_host_port(value)


def test_http_address() -> None:
    assert parse_host_port("0.0.0.0:8765") == ("0.0.0.0", 8765)
    assert parse_host_port(":8765") == ("127.0.0.1", 8765)
    assert parse_host_port("[::1]:9000") == ("::1", 9000)
    assert parse_host_port("127.0.0.1:0") == ("127.0.0.1", 0)  # a free port, printed


def test_a_held_call_is_refused_in_call_and_a_grant_lets_it_through(tmp_path: Path) -> None:
    """`jarvis mcp serve` cannot park (the client waits for the result within the call): a
    call the egress guard holds is refused, saying why and how to allow it; a grant the
    person made lets the same call through (grants apply to mcp serve)."""
    from jarvis.approvals import open_approvals
    from jarvis.approvals.grants import make_grant

    (tmp_path / "config.toml").write_text("")
    config = load_config(tmp_path / "config.toml")
    tools = [read_inbox, post_out]
    calls = [("read_inbox", {}), ("post_out", {"channel": "phone", "text": "the code is 1234"})]
    _, (_, refused) = _session(tools, config, set(), calls)
    text = refused.content[0].text
    assert refused.is_error and text.startswith("refused: this run read untrusted"), text
    assert "jarvis mcp serve answers each tool call within the call" in text, text
    assert "jarvis grants add" in text
    store = open_approvals(config)
    try:
        store.add_grant(make_grant("post_out", "channel", "phone"))
    finally:
        store.close()
    _, (_, sent) = _session(tools, config, set(), calls)
    assert not sent.is_error and sent.content[0].text == "posted to phone"


def test_over_http_each_connection_starts_from_the_grants_of_its_time(tmp_path: Path) -> None:
    """`jarvis mcp serve --http` runs for a long time: a grant the person makes (or revokes)
    while it runs counts from the next connection, with no restart."""
    from mcp import Client

    from jarvis.approvals import open_approvals
    from jarvis.approvals.grants import make_grant
    from jarvis.server.mcp_serve import run_trust

    (tmp_path / "config.toml").write_text("")
    config = load_config(tmp_path / "config.toml")
    tools = [read_inbox, post_out]
    server = build_server(tools, make_executor(tools, config, set()), per_connection=True,
                          new_trust=lambda run_id: run_trust(config, run_id))

    def connection():
        async def go():
            async with Client(server, mode="legacy") as client:
                await client.call_tool("read_inbox", {})
                return await client.call_tool("post_out", {"channel": "phone",
                                                           "text": "the code is 1234"})
        return asyncio.run(go())

    assert connection().is_error  # no grant yet
    store = open_approvals(config)
    try:
        grant = store.add_grant(make_grant("post_out", "channel", "phone"))
        sent = connection()
        assert not sent.is_error and sent.content[0].text == "posted to phone"
        store.revoke_grant(grant.id)
        assert connection().is_error  # revoked: held again
    finally:
        store.close()
