"""MCP beyond tools: resources and prompts, progress, and the client capabilities (roots,
sampling, elicitation), against the features server (official SDK) on both protocol eras."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp_support import (
    HttpFeatures,
    approve_all,
    cli,
    cli_in_process,
    features_server,
    write_config,
)

from jarvis.core.config import load_config
from jarvis.core.events import EventBus, EventType
from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ImageBlock
from jarvis.mcp.adapter import McpReadResourceTool
from jarvis.mcp.capabilities import sampling_engine, set_sampling_engine
from jarvis.mcp.manager import McpManager
from jarvis.testing import FakeOpenAIServer, ScriptedEngine, reply, tool_call
from jarvis.tools.executor import ToolExecutor


@pytest.fixture(scope="module")
def shared_manager(tmp_path_factory: pytest.TempPathFactory):
    """The manager of the module's three servers, started once (each start of a sandboxed
    Python server is ~1 s); its own JARVIS_HOME, its tools unregistered at the end."""
    folder = tmp_path_factory.mktemp("beyond")
    (folder / "docs").mkdir()
    path = write_config(folder, {
        # `slow` gets 2 s without progress (1.5 s more than a step: room for a late progress
        # report on a loaded machine); everything else the default 30 s.
        "f": features_server(tool_timeouts={"slow": 2}, max_timeout=6, sampling=True),
        # The handshake era: server-to-client requests instead of input-required results.
        "old": features_server(protocol="legacy", sampling=True),
        "plain": features_server(roots=False),  # sampling off by default
    }, extra='[tools.file_read]\nallowed_dirs = ["docs"]\n')
    before = ToolRegistry.snapshot()
    with pytest.MonkeyPatch.context() as mp:
        home = folder / "jarvis-home"
        home.mkdir(mode=0o700)
        mp.setenv("JARVIS_HOME", str(home))
        made = McpManager(load_config(path))
        try:
            assert made.refresh() == {"f": None, "old": None, "plain": None}
            made.register_known()
            yield made
        finally:
            made.close()
            ToolRegistry.restore(before)


@pytest.fixture
def manager(shared_manager: McpManager):
    """The module's manager; a test leaves no sampling engine behind."""
    yield shared_manager
    set_sampling_engine(None)


def run(name: str, arguments: dict, bus: EventBus | None = None):
    tool = ToolRegistry.get(name)
    return ToolExecutor([tool], bus=bus, approver=approve_all).execute(
        {"name": name, "arguments": arguments})


# --- progress ------------------------------------------------------------------------------
def test_progress_goes_to_the_event_bus_and_keeps_a_call_alive(manager: McpManager) -> None:
    bus = EventBus()
    seen: list[dict] = []
    bus.subscribe(EventType.TOOL_PROGRESS, lambda e: seen.append(e.data))
    # 6 steps of 0.5 s: 3 s in all, more than the 2 s timeout, each step reported.
    result = run("f__slow", {"steps": 6, "delay": 0.5}, bus)
    assert result.success, result.content
    assert result.content == "done after 6 steps"
    assert [d["progress"] for d in seen] == [1, 2, 3, 4, 5, 6]
    assert seen[0]["total"] == 6 and seen[0]["message"] == "step 1"
    assert seen[0]["tool"] == "f__slow" and seen[0]["call_id"]


def test_progress_cannot_stretch_a_call_past_max_timeout(manager: McpManager) -> None:
    start = time.monotonic()
    result = run("f__slow", {"steps": 100, "delay": 0.3})  # would take 30 s
    took = time.monotonic() - start
    assert not result.success and result.error_type is ErrorType.TIMEOUT
    assert "max_timeout is 6 s" in result.content
    assert 5.5 < took < 20.0  # kept going past the 2 s timeout, stopped at max_timeout
    assert run("f__slow", {"steps": 1, "delay": 0}).success  # reconnected


def test_progress_is_shown_on_stderr_by_the_cli(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"f": features_server()})
    proc = cli(["tools", "run", "--yes", "f__slow", '{"steps": 2, "delay": 0.05}'], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done after 2 steps"
    assert "[progress] f__slow 1/2 step 1" in proc.stderr
    assert "[progress] f__slow 2/2 step 2" in proc.stderr


# --- resources and prompts -----------------------------------------------------------------
@pytest.fixture(scope="module")
def http_features(tmp_path_factory: pytest.TempPathFactory):
    """The features server over streamable HTTP, started once: the CLI tests below start
    `jarvis` a dozen times, and a stdio server would start with each (the stdio path of
    resources and prompts is the `manager` fixture's)."""
    server = HttpFeatures(tmp_path_factory.mktemp("features-http"))
    yield server
    server.close()


def test_resources_read_and_prompts_on_the_cli(tmp_path: Path, cli_env, http_features) -> None:
    write_config(tmp_path, {"f": {"url": http_features.url}})
    listed = cli_in_process(["mcp", "resources", "f"], cli_env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "notes://readme (text/plain)  The read-me note." in listed.stdout
    assert "notes://item/{item_id}  [template]" in listed.stdout
    as_json = json.loads(cli_in_process(["mcp", "resources", "f", "--json"], cli_env, tmp_path).stdout)
    assert {r["uri"] for r in as_json["resources"]} >= {"notes://readme", "data://blob"}

    text = cli_in_process(["mcp", "read", "f", "notes://readme"], cli_env, tmp_path)
    assert text.returncode == 0 and text.stdout.startswith("Read me first.")
    templated = cli_in_process(["mcp", "read", "f", "notes://item/42"], cli_env, tmp_path)
    assert templated.stdout.strip() == "item 42"
    blob = cli_in_process(["mcp", "read", "f", "data://blob"], cli_env, tmp_path)
    assert blob.stdout.startswith("[binary application/octet-stream, 400 bytes")
    out = tmp_path / "blob.bin"
    saved = cli_in_process(["mcp", "read", "f", "data://blob", "-o", str(out)], cli_env, tmp_path)
    assert saved.returncode == 0 and out.read_bytes() == b"\x00\x01binary" * 50

    missing = cli_in_process(["mcp", "read", "f", "notes://nope"], cli_env, tmp_path)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert missing.stderr.startswith("error: MCP server 'f' refused:")
    unknown = cli_in_process(["mcp", "resources", "nosuch"], cli_env, tmp_path)
    assert unknown.returncode != 0 and "no enabled MCP server 'nosuch'" in unknown.stderr
    assert "Traceback" not in unknown.stderr

    prompts = cli_in_process(["mcp", "prompts", "f"], cli_env, tmp_path)
    assert prompts.returncode == 0 and "greet(name)  Greet someone by name." in prompts.stdout
    filled = cli_in_process(["mcp", "prompt", "f", "greet", "name=Ada"], cli_env, tmp_path)
    assert filled.returncode == 0 and filled.stdout.strip() == "[user] Please greet Ada warmly."
    bad = cli_in_process(["mcp", "prompt", "f", "greet", "Ada"], cli_env, tmp_path)
    assert bad.returncode != 0 and "KEY=VALUE" in bad.stderr and "Traceback" not in bad.stderr


def test_read_resource_tool_is_bounded_and_keeps_images(manager: McpManager) -> None:
    tool = McpReadResourceTool(manager=manager)
    readme = tool.execute(server="f", uri="notes://readme")
    assert readme.success and readme.content.startswith("Read me first.")
    huge = tool.execute(server="f", uri="notes://huge", max_chars=1000)
    assert huge.success and len(huge.content) < 1200 and "299000 characters cut" in huge.content
    capped = tool.execute(server="f", uri="notes://huge", max_chars=10**9)
    assert len(capped.content) < 201_000  # the tool's own maximum applies
    blob = tool.execute(server="f", uri="data://blob")
    assert "binary resource data://blob" in blob.content and "AAEB" not in blob.content
    pixel = tool.execute(server="f", uri="images://pixel")
    assert pixel.content == "[image: image/png, 70 B]"
    assert isinstance(pixel.blocks[0], ImageBlock)
    bad = tool.execute(server="nosuch", uri="x://y")
    assert not bad.success and bad.error_type is ErrorType.INVALID_ARGS
    missing = tool.execute(server="f", uri="notes://nope")
    assert not missing.success and "could not read" in missing.content
    # A resource link in a tool result names the tool that reads it.
    linked = run("f__attachments", {})
    assert "mcp_read_resource server='f' uri='notes://readme'" in linked.content


def _read_hints(text: str) -> list[tuple[str, str]]:
    """(server, uri) of each `mcp_read_resource server='..' uri='..'` hint, as a model reads them."""
    return re.findall(r"mcp_read_resource server='([^']+)' uri='([^']+)'", text)


def test_embedded_resources_in_tool_results_are_read_with_mcp_read_resource(
        manager: McpManager) -> None:
    reader = McpReadResourceTool(manager=manager)
    # An embedded binary resource: described, never pasted, and named so it can be read.
    attached = run("f__attachments", {})
    assert attached.success and "AAEB" not in attached.content
    hints = _read_hints(attached.content)
    assert ("f", "data://blob") in hints and ("f", "notes://readme") in hints  # embedded, link
    blob = ToolExecutor([reader]).execute({"name": "mcp_read_resource",
                                           "arguments": {"server": "f", "uri": "data://blob"}})
    assert blob.success, blob.content
    assert blob.content == ("[binary resource data://blob (application/octet-stream), 400 B, "
                            "not shown]")
    # An embedded text resource too long for the result: cut, with where to read the rest.
    report = run("f__report", {})
    assert report.success and report.content.startswith("the report is attached\nxxxx")
    assert len(report.content) < 21_000
    assert "[... 280000 more characters of resource notes://huge" in report.content
    ((server, uri),) = _read_hints(report.content)
    more = ToolExecutor([reader]).execute({"name": "mcp_read_resource", "arguments": {
        "server": server, "uri": uri, "max_chars": 50_000}})
    assert more.success and more.content.startswith("x" * 50_000)
    assert more.content[50_000:] == ("\n[... 250000 characters cut; ask again with a larger "
                                     "max_chars (at most the tool's maximum)]")
    # Bounded whatever the model asks for: the tool's maximum is 200 000 characters.
    most = reader.execute(server=server, uri=uri, max_chars=10**9)
    assert most.content.startswith("x" * 200_000) and most.content[200_000] == "\n"


# --- client capabilities -------------------------------------------------------------------
@pytest.mark.parametrize("server", ["f", "old"])
def test_roots_are_the_workspace_and_allowed_dirs(manager: McpManager, server: str) -> None:
    result = run(f"{server}__show_roots", {})
    assert result.success, result.content
    base = manager.base_dir.resolve()
    assert result.content.split("\n") == [base.as_uri(), (base / "docs").as_uri()]
    refused = run("plain__show_roots", {})
    assert not refused.success  # roots = false: the capability is not declared


def test_sampling_is_answered_by_the_engine_only_where_allowed(manager: McpManager) -> None:
    engine = ScriptedEngine(["blue, of course", "green"])
    set_sampling_engine(engine, "m")
    allowed = run("f__ask_model", {"question": "favourite colour?"})
    assert allowed.success and allowed.content == "model said: blue, of course"
    assert engine.calls[0]["messages"] == [{"role": "user", "content": "favourite colour?"}]
    assert engine.calls[0]["max_tokens"] == 50
    old = run("old__ask_model", {"question": "and now?"})  # a handshake-era session
    assert old.content == "model said: green"
    denied = run("plain__ask_model", {"question": "favourite colour?"})
    assert not denied.success and len(engine.calls) == 2  # off by default: never asked
    set_sampling_engine(None)
    nobody = run("f__ask_model", {"question": "x"})
    assert not nobody.success and "no engine" in nobody.content


class _DictEngine:
    """An engine written the OpenJarvis way: generate() returns a plain dict, no stream()."""

    engine_id = "dicty"

    def __init__(self, replies: list[dict]) -> None:
        self.replies = list(replies)

    def generate(self, messages, **kwargs) -> dict:
        return self.replies.pop(0)


def test_sampling_takes_an_engine_that_replies_with_a_dict(manager: McpManager) -> None:
    set_sampling_engine(_DictEngine([{"content": "red", "model": "dict-model"}, {"content": 3}]),
                        "m")
    answered = run("f__ask_model", {"question": "favourite colour?"})
    assert answered.success and answered.content == "model said: red"
    # A malformed reply is the server's error to report; the session goes on.
    malformed = run("f__ask_model", {"question": "again?"})
    assert not malformed.success and "malformed reply" in malformed.content
    set_sampling_engine(ScriptedEngine(["still here"]), "m")
    assert run("f__ask_model", {"question": "alive?"}).content == "model said: still here"


def test_sampling_uses_the_engine_of_the_running_ask(tmp_path: Path) -> None:
    from jarvis.engine.openai_compat import OpenAICompatEngine
    from jarvis.sdk import Jarvis

    path = write_config(tmp_path, {"f": features_server(sampling=True)})
    script = [reply(tool_calls=[tool_call("f__ask_model", {"question": "Say hi"})]),
              reply("hi from the engine"),  # the server's sampling request
              reply("The server's model said hi.")]
    with FakeOpenAIServer(script, models=["m"]) as server:
        engine = OpenAICompatEngine("vllm", server.url, model="m", client="http")
        with Jarvis(config_path=path, engine=engine) as j:
            result = j.ask_full("ask the server", agent="orchestrator", tools=["f__ask_model"],
                                approver=approve_all)
        engine.close()
        requests = server.requests
    assert sampling_engine() == (None, "")  # closing the Jarvis took its engine back
    assert result["tool_results"][0]["content"] == "model said: hi from the engine"
    assert requests[1]["messages"] == [{"role": "user", "content": "Say hi"}]
    assert result["content"] == "The server's model said hi."


def test_elicitation_is_refused_when_nobody_can_answer(manager: McpManager) -> None:
    assert run("f__ask_user", {}).content == "user declined"
    assert run("old__ask_user", {}).content == "user declined"


def test_elicitation_is_asked_on_the_terminal(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"f": features_server()})
    master, slave = pty.openpty()
    env = {**cli_env, "PYTHONUNBUFFERED": "1"}
    env.pop("CI", None)
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "tools", "run", "--yes", "f__ask_user",
                             "{}"], stdin=slave, stderr=slave, stdout=subprocess.PIPE,
                            cwd=tmp_path, env=env)
    os.close(slave)
    seen = b""
    answers = [(b"Answer?", b"y\n"), (b"favourite colour", b"teal\n")]
    deadline = time.monotonic() + 60
    try:
        while answers and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                continue
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
            if answers[0][0] in seen:
                os.write(master, answers.pop(0)[1])
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        os.close(master)
    assert b"MCP server 'f' asks: What is your favourite colour?" in seen
    assert out.decode().strip() == "user said: teal"
