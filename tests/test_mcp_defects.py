"""Issue 15's MCP defects, each against real SDK-written servers (see tests/mcp_servers)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from mcp_support import (
    NODISCOVER,
    HttpFeatures,
    approve_all,
    cli,
    features_server,
    pid_alive,
    stdio_server,
    write_config,
)

from jarvis.core.config import load_config
from jarvis.core.events import EventBus, EventType
from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ImageBlock
from jarvis.mcp.manager import McpManager
from jarvis.tools.executor import ToolExecutor


def manager_for(folder: Path, servers: dict) -> McpManager:
    return McpManager(load_config(write_config(folder, servers)))


def run(manager: McpManager, name: str, arguments: dict):
    manager.register_known()
    tool = ToolRegistry.get(name)
    return ToolExecutor([tool], approver=approve_all).execute({"name": name, "arguments": arguments})


# 1. Binary content never goes into model text.
def test_media_file_image_is_a_block_and_a_placeholder_never_base64(tmp_path: Path) -> None:
    manager = manager_for(tmp_path, {"fs": features_server()})
    try:
        assert manager.refresh() == {"fs": None}
        result = run(manager, "fs__read_media_file", {"path": "cat.png"})
    finally:
        manager.close()
    assert result.success, result.content
    # The server repeats the image as structured content (like server-filesystem): that used
    # to become the text, ~5 KB of base64.
    assert result.content == "[image: image/png, 4 KB]"
    images = [b for b in result.blocks if isinstance(b, ImageBlock)]
    assert len(images) == 1 and len(images[0].data) > 5000 and images[0].mimeType == "image/png"


# 3. The SDK's loggers: one line on stderr, never a traceback.
def test_junk_on_stdout_is_one_line_not_a_traceback(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"junk": features_server("--junk")})
    proc = cli(["tools", "run", "--yes", "junk__read_media_file", '{"path": "x"}'], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "[image: image/png, 4 KB]" in proc.stdout
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "JSONRPC" in line or "JSON" in line]
    assert lines and all(line.startswith("jarvis: mcp: ") for line in lines), proc.stderr
    debug = cli(["tools", "run", "--yes", "junk__read_media_file", '{"path": "x"}'],
                {**cli_env, "JARVIS_DEBUG": "1"}, tmp_path)
    assert "Traceback" in debug.stderr  # debug shows more


# 3. ...and when an HTTP session ends under a call: the server is killed mid-call.
def _slow_call_then_kill(server: HttpFeatures, manager: McpManager) -> tuple[object, float]:
    """Start `web__slow` (20 s of progress), kill the server once the call is under way (its
    first progress report arrived), return (the result, seconds from the kill to it)."""
    bus = EventBus()
    started = threading.Event()
    bus.subscribe(EventType.TOOL_PROGRESS, lambda event: started.set())
    manager.register_known()
    tool = ToolRegistry.get("web__slow")
    results: list = []
    executor = ToolExecutor([tool], bus=bus, approver=approve_all)
    caller = threading.Thread(target=lambda: results.append(executor.execute(
        {"name": "web__slow", "arguments": {"steps": 200, "delay": 0.1}})))
    caller.start()
    assert started.wait(30), "the call never got under way"
    server.proc.kill()
    killed = time.monotonic()
    server.proc.wait(10)
    caller.join(60)
    assert not caller.is_alive(), "the call never ended after its server was killed"
    return results[0], time.monotonic() - killed


def test_http_server_killed_mid_call_is_a_failed_result_and_the_next_call_reconnects(
        tmp_path: Path) -> None:
    server = HttpFeatures(tmp_path)
    manager = manager_for(tmp_path, {"web": {"url": server.url}})
    try:
        assert manager.refresh() == {"web": None}
        result, took = _slow_call_then_kill(server, manager)
        assert not result.success and result.error_type is ErrorType.TRANSPORT, result
        assert result.content.startswith("MCP server 'web': "), result.content
        assert "Traceback" not in result.content
        assert took < 20  # the dead session is noticed, not waited out to the end of the call
        # While the server is down the next call fails the same clean way, quickly.
        down = run(manager, "web__slow", {"steps": 1, "delay": 0})
        assert not down.success and down.error_type is ErrorType.TRANSPORT, down
        assert "'web'" in down.content
        # Back at the same address: the next call opens a new session and works.
        server = HttpFeatures(tmp_path, port=server.port)
        again = run(manager, "web__slow", {"steps": 1, "delay": 0})
        assert again.success and again.content == "done after 1 steps", again.content
    finally:
        manager.close()
        server.close()


def test_http_server_killed_mid_call_on_the_cli_is_one_line_not_a_traceback(
        tmp_path: Path, cli_env) -> None:
    server = HttpFeatures(tmp_path)
    try:
        write_config(tmp_path, {"web": {"url": server.url}})
        env = {**cli_env, "PYTHONUNBUFFERED": "1"}
        env.pop("JARVIS_CONFIG", None)
        proc = subprocess.Popen(
            [sys.executable, "-m", "jarvis.cli", "tools", "run", "--yes", "web__slow",
             '{"steps": 200, "delay": 0.1}'], env=env, cwd=tmp_path, text=True,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        stderr: list[str] = []
        # The call is under way once the CLI shows the server's first progress report.
        for line in proc.stderr:
            stderr.append(line)
            if line.startswith("[progress] web__slow 1/200"):
                break
        else:
            raise AssertionError(f"the call never got under way: {''.join(stderr)}")
        server.proc.kill()
        server.proc.wait(10)
        out, rest = proc.communicate(timeout=60)
        stderr.append(rest)
    finally:
        server.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = "".join(stderr)
    assert proc.returncode == 1 and out == "", (proc.returncode, out, text)
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if not line.startswith("[progress]")]
    assert errors and errors[-1].startswith("Error (transport): "), text
    assert "'web'" in errors[-1]
    # Whatever the SDK logged about the broken stream came out as single jarvis lines.
    assert all(line.startswith(("Error (transport): ", "jarvis: mcp: ")) for line in errors), text


# 4. A server that never answers server/discover: the initialize handshake, automatically.
def test_server_that_never_answers_discover_connects_with_the_handshake(tmp_path: Path) -> None:
    log = tmp_path / "methods.log"
    manager = manager_for(tmp_path, {"old": {"command": sys.executable,  # logs on the host:
                                             "args": [str(NODISCOVER), "--label", "old"],
                                             "env": {"NODISCOVER_LOG": str(log)},
                                             "sandbox": False}})
    try:
        # Within the default 10 s connect_timeout, which the SDK's own 10 s discover probe
        # used up entirely.
        assert manager.refresh() == {"old": None}
        connection = manager.servers["old"].connection
        assert connection.protocol_version.startswith("20")
        assert connection.legacy  # remembered: a reconnect skips the probe
        assert run(manager, "old__echo", {"text": "hi"}).content == "hi"
    finally:
        manager.close()
    methods = log.read_text().split()
    assert methods.count("initialize") == 1
    assert methods.count("tools/list") == 1  # one listing per connection, not two


# 5. A failing server: the real reason, once; remembered for a while.
def test_failed_server_says_why_and_is_remembered(tmp_path: Path, cli_env) -> None:
    starts = tmp_path / "starts.txt"
    hang = f"open({str(starts)!r}, 'a').write('x'); import time; time.sleep(60)"
    write_config(tmp_path, {"slow": {"command": sys.executable, "args": ["-c", hang],
                                     "connect_timeout": 3, "sandbox": False}})

    def count() -> int:  # server starts (a start too slow to write under load is not counted)
        return len(starts.read_text()) if starts.exists() else 0

    first = cli(["tools", "run", "--yes", "slow__anything", "{}"], cli_env, tmp_path)
    assert first.returncode != 0
    assert "did not finish connecting within 3 s" in first.stderr
    assert "unknown tool" not in first.stderr
    assert first.stderr.count("did not finish connecting") == 1, first.stderr
    started = count()
    assert started <= 1  # one attempt, not two

    again = cli(["tools", "run", "--yes", "slow__anything", "{}"], cli_env, tmp_path)
    assert "did not finish connecting" in again.stderr and "remembered" in again.stderr
    listing = cli(["tools", "list"], cli_env, tmp_path)
    assert listing.returncode == 0 and "calculator" in listing.stdout
    assert "MCP server 'slow' is unavailable" in listing.stderr
    assert count() == started  # remembered: not started again

    listed = cli(["mcp", "list", "--cached", "--json"], cli_env, tmp_path)
    row = json.loads(listed.stdout)[0]
    assert row["status"] == "failed" and "remembered" in row["error"]
    retried = cli(["mcp", "list"], cli_env, tmp_path)  # the explicit check always tries again
    assert retried.returncode == 1 and "did not finish connecting" in retried.stdout
    assert "remembered" not in retried.stdout


# 6. A stdio server whose call timed out does not outlive jarvis.
def test_timed_out_server_tree_is_killed_when_jarvis_exits(tmp_path: Path, cli_env) -> None:
    pids = tmp_path / "pids.txt"
    # unsandboxed: the test follows the server's pids on the host
    write_config(tmp_path, {"tb": stdio_server("tb", "--touch", str(pids), sandbox=False,
                                               tool_timeouts={"hang": 1})})
    spawned = cli(["tools", "run", "--yes", "tb__spawn_child", "{}"], cli_env, tmp_path)
    child = int(spawned.stdout.strip())
    proc = cli(["tools", "run", "--yes", "tb__hang", "{}"], cli_env, tmp_path)
    assert proc.returncode == 1 and "did not answer 'hang'" in proc.stderr
    servers = [int(p) for p in pids.read_text().split()]
    assert len(servers) == 2
    for pid in [*servers, child]:
        assert not pid_alive(pid), f"process {pid} outlived jarvis"


# 7. The older HTTP+SSE transport.
@pytest.fixture(scope="module")
def sse_server(tmp_path_factory: pytest.TempPathFactory):
    server = HttpFeatures(tmp_path_factory.mktemp("sse"), sse=True)
    yield server
    server.close()


def test_sse_server_by_url_and_by_setting(tmp_path: Path, sse_server: HttpFeatures) -> None:
    manager = manager_for(tmp_path, {
        "auto": {"url": sse_server.url},  # ends in /sse: detected
        "told": {"url": sse_server.url, "transport": "sse"},
    })
    try:
        assert manager.refresh() == {"auto": None, "told": None}
        rows = {r["name"]: r for r in manager.status()}
        assert rows["auto"]["transport"] == "sse" and rows["told"]["transport"] == "sse"
        manager.register_known()
        assert "auto__read_media_file" in manager.tool_names("auto")
        assert run(manager, "told__slow", {"steps": 1, "delay": 0}).content == "done after 1 steps"
    finally:
        manager.close()


def test_streamable_http_falls_back_to_sse_when_the_server_does_not_know_it(
        tmp_path: Path, sse_server: HttpFeatures) -> None:
    # The SSE app answers a POST to /sse with 405: that is an older server, not an error.
    url = sse_server.url + "/"  # no longer ends in "/sse": nothing to detect from the URL
    manager = manager_for(tmp_path, {"old": {"url": url}})
    try:
        reasons = manager.refresh()
        assert reasons == {"old": None}, reasons
        assert manager.servers["old"].connection.sse
    finally:
        manager.close()


# 8. A 401 says 401 and what to set.
def test_401_names_the_status_and_the_header_to_set(tmp_path: Path, monkeypatch) -> None:
    server = HttpFeatures(tmp_path, token="s3cret-token")
    try:
        manager = manager_for(tmp_path, {"locked": {"url": server.url}})
        try:
            reason = manager.refresh()["locked"]
        finally:
            manager.close()
        assert "HTTP 401 Unauthorized" in reason and "headers" in reason
        assert "Authorization" in reason and "mcp.servers.locked" in reason
        monkeypatch.setenv("FEATURES_TOKEN", "s3cret-token")
        manager = manager_for(tmp_path, {"locked": {
            "url": server.url, "headers": {"Authorization": "Bearer $FEATURES_TOKEN"}}})
        try:
            assert manager.refresh() == {"locked": None}
        finally:
            manager.close()
    finally:
        server.close()


def test_sse_server_is_reachable_from_a_subprocess_cli(tmp_path: Path, cli_env,
                                                       sse_server: HttpFeatures) -> None:
    write_config(tmp_path, {"old": {"url": sse_server.url}})
    proc = cli(["mcp", "list"], cli_env, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "old  [connected]  sse:" in proc.stdout
    assert "Not Found" not in proc.stdout


def test_wrong_http_path_says_404_after_trying_both_transports(tmp_path: Path) -> None:
    server = HttpFeatures(tmp_path)
    try:
        manager = manager_for(tmp_path, {"typo": {"url": server.base + "/mpc"}})
        try:
            reason = manager.refresh()["typo"]
        finally:
            manager.close()
    finally:
        server.close()
    assert "HTTP 404 Not Found" in reason and "tried streamable HTTP and HTTP+SSE" in reason
    assert "mcp.servers.typo" in reason
