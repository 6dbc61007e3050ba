"""`jarvis mcp list`, MCP tools in `jarvis tools`, and `jarvis mcp serve` driven by the SDK's
Client, as real subprocesses; refused arguments and a listing's messages in process."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

from logged_process import LoggedProcess
from mcp_support import cli, cli_in_process, pid_alive, stdio_server, write_config
from ports import closed_port
from serve_process import owner_headers
from waiting import wait_for


def test_mcp_list_shows_status_tools_and_why_a_server_failed(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {
        "tb": stdio_server("tb", exclude=["crash", "hang"]),
        "broken": {"command": "jarvis-no-such-mcp-server-binary"},
        "off": {"command": "whatever", "enabled": False},
    })
    proc = cli(["mcp", "list"], cli_env, tmp_path)
    assert proc.returncode == 1, proc.stderr  # a server failed
    out = proc.stdout
    assert "tb  [connected]  stdio:" in out
    assert "tb__delete_everything [confirm]" in out
    # A server not marked trusted: every tool asks first, not only those it calls destructive.
    assert "tb__echo [confirm]  Return the text unchanged." in out
    assert "(not exposed by include/exclude: crash, hang)" in out
    assert "broken  [failed]" in out and "command not found" in out
    assert "off  [disabled]" in out
    assert "stderr noise" not in proc.stdout + proc.stderr  # the server's stderr went to its log

    cached = cli(["mcp", "list", "--json", "--cached"], cli_env, tmp_path)
    rows = {row["name"]: row for row in json.loads(cached.stdout)}
    assert rows["tb"]["status"] == "cached"  # from the list fetched above, nothing started
    assert "tb__search" in [t["name"] for t in rows["tb"]["tools"]]
    # The failure is remembered for a while (no retry by commands that only want tools).
    assert rows["broken"]["status"] == "failed"
    assert "command not found" in rows["broken"]["error"] and "remembered" in rows["broken"]["error"]

    # A server that cannot start does not stop the others: a one-line warning, tools listed.
    listing = cli(["tools", "list"], cli_env, tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert "tb__echo" in listing.stdout and "calculator" in listing.stdout
    assert "MCP server 'broken' is unavailable" in listing.stderr
    assert "Traceback" not in listing.stderr


def test_tools_commands_start_servers_only_when_needed(tmp_path: Path, cli_env) -> None:
    marker = tmp_path / "starts.txt"
    # unsandboxed: it marks its starts in a file of the host's
    write_config(tmp_path, {"tb": stdio_server("tb", "--touch", str(marker), sandbox=False)})

    def starts() -> int:
        return len(marker.read_text().split()) if marker.exists() else 0

    run = cli(["tools", "run", "calculator", '{"expression": "6*7"}'], cli_env, tmp_path)
    assert run.returncode == 0 and run.stdout.strip() == "42"
    assert starts() == 0  # cold cache, but no MCP tool was asked for

    listing = cli(["tools", "list"], cli_env, tmp_path)  # cold cache: fetches the list
    assert "tb__echo" in listing.stdout and "calculator" in listing.stdout
    assert starts() == 1
    listing = cli(["tools", "list", "--json"], cli_env, tmp_path)  # warm cache: starts nothing
    assert "tb__search" in [t["name"] for t in json.loads(listing.stdout)]
    assert starts() == 1
    run = cli(["tools", "run", "calculator", '{"expression": "1+1"}'], cli_env, tmp_path)
    assert run.returncode == 0 and starts() == 1

    spawned = cli(["tools", "run", "--yes", "tb__spawn_child"], cli_env, tmp_path)
    assert spawned.returncode == 0, spawned.stderr
    assert starts() == 2
    # The server and the child it started both ended when jarvis exited.
    child, server = int(spawned.stdout.strip()), int(marker.read_text().split()[-1])
    wait_for(lambda: not pid_alive(child) and not pid_alive(server), timeout=5)


async def _drive(server, headers: dict[str, str] | None = None) -> dict:
    """List and call tools of `server` (a URL: with `headers`, e.g. the owner's token)."""
    import contextlib

    from mcp import Client

    async with contextlib.AsyncExitStack() as stack:
        if headers is not None:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            server = streamable_http_client(server, http_client=http)
        client = await stack.enter_async_context(Client(server))
        listed = await client.list_tools()
        ok = await client.call_tool("calculator", {"expression": "sqrt(144) + 3**2"})
        bad = await client.call_tool("calculator", {"expr": "1"})
        unknown = await client.call_tool("no_such_tool", {})
        return {"names": [t.name for t in listed.tools],
                "calculator": listed.tools[[t.name for t in listed.tools].index("calculator")],
                "ok": ok, "bad": bad, "unknown": unknown}


def test_mcp_serve_round_trip_over_stdio(tmp_path: Path, cli_env) -> None:
    from mcp import StdioServerParameters

    env = {k: v for k, v in cli_env.items() if k in ("JARVIS_HOME", "PATH", "HOME")}
    params = StdioServerParameters(command=sys.executable, args=["-m", "jarvis.cli", "mcp", "serve"],
                                   env=env, cwd=str(tmp_path))
    seen = asyncio.run(_drive(params))
    assert "calculator" in seen["names"] and "think" in seen["names"]
    assert "mcp_adapter" not in seen["names"]
    assert seen["calculator"].input_schema["required"] == ["expression"]
    assert not seen["ok"].is_error and seen["ok"].content[0].text == "21.0"
    assert seen["bad"].is_error
    assert "missing required argument 'expression'" in seen["bad"].content[0].text
    assert seen["unknown"].is_error and "unknown tool 'no_such_tool'" in seen["unknown"].content[0].text


def serve_http(args: list[str], env: dict[str, str], cwd: Path) -> tuple[LoggedProcess, str]:
    """`jarvis mcp serve ... --http 127.0.0.1:0` as a subprocess; (the process, its URL), read
    from the line it prints on stderr once it listens (port 0: the system picks a free one)."""
    import re
    import subprocess

    served = LoggedProcess(subprocess.Popen(
        [sys.executable, "-m", "jarvis.cli", "mcp", "serve", *args, "--http", "127.0.0.1:0"],
        env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True),
        "jarvis mcp serve")
    line = served.wait_for_line(" over http://127.0.0.1:")
    return served, re.search(r"(http://127\.0\.0\.1:\d+/mcp)", line).group(1)


def test_mcp_serve_over_http_with_chosen_tools(tmp_path: Path, cli_env) -> None:
    proc, url = serve_http(["--tools", "calculator"], cli_env, tmp_path)
    try:
        seen = asyncio.run(_drive(url, owner_headers(cli_env)))
        assert seen["names"] == ["calculator"]
        assert seen["ok"].content[0].text == "21.0"
        assert seen["bad"].is_error
    finally:
        proc.proc.terminate()
        proc.proc.wait(10)
        proc.close_streams()


def test_mcp_serve_rejects_bad_arguments(tmp_path: Path, cli_env) -> None:
    bad = cli_in_process(["mcp", "serve", "--http", "nowhere"], cli_env, tmp_path)
    assert bad.returncode == 2 and "HOST:PORT" in bad.stderr and "Traceback" not in bad.stderr
    unknown = cli_in_process(["mcp", "serve", "--tools", "nope"], cli_env, tmp_path)
    assert unknown.returncode == 2 and "unknown tool 'nope'" in unknown.stderr
    helped = cli_in_process(["mcp", "--help"], cli_env, tmp_path)
    assert "serve" in helped.stdout and "list" in helped.stdout


def test_ask_uses_an_mcp_tool_end_to_end(tmp_path: Path, cli_env) -> None:
    """`jarvis ask --tools tb__search` with a cold cache: the server is started for the tool,
    the model sees its schema, and the answer comes back through the loopback model server."""
    from jarvis.testing import FakeOpenAIServer, reply, tool_call

    script = [reply(tool_calls=[tool_call("tb__search", {"query": "otters"})]), "Found otters."]
    with FakeOpenAIServer(script) as model:
        extra = (f'[engine]\ndefault = "openai"\nmodel = "test-model"\nmax_retries = 0\n'
                 f'[engine.hosts]\nopenai = "{model.base_url}"\n[memory]\ncontext = false\n')
        write_config(tmp_path, {"tb": stdio_server("tb")}, extra=extra)
        proc = cli(["ask", "--yes", "--tools", "tb__search", "--json", "Find otters"],
                   {**cli_env, "OPENAI_API_KEY": "test-key"}, tmp_path)
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["content"] == "Found otters."
        assert [(t["tool_name"], t["content"]) for t in out["tool_results"]] == [
            ("tb__search", "tb result for otters")]
        first = model.requests[0]
        (sent,) = first["tools"]
        assert sent["function"]["name"] == "tb__search"
        assert sent["function"]["parameters"]["required"] == ["query"]


def test_mcp_serve_over_http_needs_an_api_key_off_loopback(tmp_path: Path, cli_env) -> None:

    import httpx

    refused = cli_in_process(["mcp", "serve", "--http", "0.0.0.0:8799"], cli_env, tmp_path)
    assert refused.returncode == 2 and "without an API key" in refused.stderr
    assert "Traceback" not in refused.stderr
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    proc, url = serve_http(["--tools", "calculator", "--api-key", "key-12345"], cli_env,
                           server_dir)
    try:
        anonymous = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert anonymous.status_code == 401
        # jarvis as the client, sending the key from its config
        write_config(tmp_path, {"keyed": {"url": url, "headers": {"X-API-Key": "key-12345"}}})
        listed = cli_in_process(["mcp", "list", "--json"], cli_env, tmp_path)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        (row,) = json.loads(listed.stdout)
        assert row["status"] == "connected" and [t["name"] for t in row["tools"]] == [
            "keyed__calculator"], row
    finally:
        proc.proc.terminate()
        proc.proc.wait(10)
        proc.close_streams()


def test_mcp_serve_on_a_busy_port_is_one_clear_line(tmp_path: Path, cli_env) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = cli(["mcp", "serve", "--http", f"127.0.0.1:{port}"], cli_env, tmp_path)
    assert busy.returncode == 2, busy.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in busy.stderr and "--http" in busy.stderr
    assert "Traceback" not in busy.stderr and "ERROR:" not in busy.stderr


def test_mcp_list_names_a_missing_cwd(tmp_path: Path, cli_env) -> None:
    write_config(tmp_path, {"nowhere": {"command": sys.executable, "cwd": "no-such-folder"}})
    proc = cli_in_process(["mcp", "list"], cli_env, tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"cwd {tmp_path / 'no-such-folder'} is not a folder" in proc.stdout, proc.stdout
    assert "command not found" not in proc.stdout


PRINTING_TOOL = '''from jarvis import tool

print("loading the shout tool")


@tool
def shout(text: str) -> str:
    """Upper-case the text."""
    print("shouting", text)
    return text.upper()
'''


def test_mcp_serve_stdio_keeps_tool_prints_off_the_wire(tmp_path: Path, cli_env) -> None:
    """What a workspace tool print()s, at import or during a call, goes to stderr: over stdio
    every line on stdout must be a JSON-RPC message."""
    import subprocess

    from mcp.types import LATEST_PROTOCOL_VERSION

    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "shout.py").write_text(PRINTING_TOOL)
    (tmp_path / "config.toml").write_text("")  # makes tmp_path the workspace
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
                    "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "shout", "arguments": {"text": "hey"}}},
    ]
    with subprocess.Popen([sys.executable, "-m", "jarvis.cli", "mcp", "serve", "--tools",
                           "shout"], env=cli_env, cwd=tmp_path, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            for request in requests:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
            answers: list[dict] = []
            while len([a for a in answers if "id" in a]) < 2:
                line = proc.stdout.readline()
                assert line, proc.stderr.read()
                answers.append(json.loads(line))  # fails on any printed text
            proc.stdin.close()
            rest, err = proc.stdout.read(), proc.stderr.read()
            proc.wait(timeout=10)
        finally:
            proc.kill()
    assert answers[-1]["result"]["content"][0]["text"] == "HEY"
    assert rest == "", rest  # nothing flushed onto the wire at exit either
    assert "loading the shout tool" in err and "shouting hey" in err


def test_mcp_list_hides_secrets_in_targets_and_errors(tmp_path: Path, cli_env) -> None:
    """`jarvis mcp list` shows each server's command line or URL: tokens in args, URL
    passwords and query keys are masked as in `jarvis config show`, in errors too."""
    closed = closed_port()  # nothing listens there: the connection fails at once
    write_config(tmp_path, {
        "web": {"url": f"http://user:SECRET-U1@127.0.0.1:{closed}/mcp?api_key=SECRET-U2"},
        "local": {"command": sys.executable,
                  "args": ["-c", "import sys; sys.exit(3)", "--header",
                           "Authorization: Bearer SECRET-A1", "--token", "SECRET-A2"]},
    })
    for args in (["mcp", "list"], ["mcp", "list", "--json"]):
        proc = cli(args, cli_env, tmp_path)
        assert "SECRET" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert f"127.0.0.1:{closed}/mcp" in proc.stdout and "--token" in proc.stdout
