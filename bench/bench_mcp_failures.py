"""MCP figures for servers that misbehave, and for images in requests.

    python bench/bench_mcp_failures.py

1. `jarvis tools run SERVER__tool` for a server that never finishes connecting
   (connect_timeout 2 s): the first run (one attempt, the real reason) and the next run (the
   failure is remembered: no attempt), against `jarvis tools run calculator` (process start).
2. Connecting to a server that never answers `server/discover` (tests/mcp_servers/nodiscover.py)
   against connecting to the same server reached without the filter.
3. Bytes of the second chat request after an MCP tool returned a ~4 KB image: a vision model
   (image_url part) against a text-only model (placeholder).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "mcp_servers"
sys.path.insert(0, str(REPO))


def jarvis(folder: Path, *args: str) -> float:
    env = {**os.environ, "JARVIS_HOME": str(folder / "home")}
    env.pop("JARVIS_CONFIG", None)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "jarvis.cli", *args], cwd=folder, env=env,
                   capture_output=True, timeout=120)
    return time.perf_counter() - start


def failing_server(folder: Path) -> list[tuple[str, float]]:
    (folder / "config.toml").write_text(
        f'[mcp.servers.slow]\ncommand = {json.dumps(sys.executable)}\n'
        'args = ["-c", "import time; time.sleep(60)"]\nconnect_timeout = 2\n', encoding="utf-8")
    base = jarvis(folder, "tools", "run", "calculator", '{"expression": "1+1"}')
    first = jarvis(folder, "tools", "run", "slow__x", "{}")
    again = jarvis(folder, "tools", "run", "slow__x", "{}")
    return [("tools run calculator (baseline)", base), ("failing server, first run", first),
            ("failing server, remembered", again)]


def connect_times(folder: Path) -> list[tuple[str, float]]:
    from jarvis.core.config import load_config
    from jarvis.mcp.manager import McpManager

    os.environ["JARVIS_HOME"] = str(folder / "home")
    out = []
    for label, script in (("toolbox (answers discover)", "toolbox.py"),
                          ("nodiscover (never answers)", "nodiscover.py")):
        (folder / "config.toml").write_text(
            f'[mcp.servers.s]\ncommand = {json.dumps(sys.executable)}\n'
            f'args = [{json.dumps(str(SERVERS / script))}]\n', encoding="utf-8")
        manager = McpManager(load_config(folder / "config.toml"))
        start = time.perf_counter()
        reason = manager.refresh()["s"]
        took = time.perf_counter() - start
        manager.close()
        out.append((f"connect + list, {label}" + (f" FAILED: {reason}" if reason else ""), took))
    return out


def request_bytes(folder: Path) -> list[tuple[str, float]]:
    from jarvis.engine.openai_compat import OpenAICompatEngine
    from jarvis.sdk import Jarvis
    from jarvis.testing import FakeOpenAIServer, reply, tool_call

    (folder / "config.toml").write_text(
        f'[mcp.servers.fs]\ncommand = {json.dumps(sys.executable)}\n'
        f'args = [{json.dumps(str(SERVERS / "features.py"))}]\n', encoding="utf-8")
    out = []
    for model in ("llava-test", "qwen3:8b"):
        script = [reply(tool_calls=[tool_call("fs__read_media_file", {"path": "x.png"})]),
                  reply("done")]
        with FakeOpenAIServer(script, models=[model]) as server:
            engine = OpenAICompatEngine("vllm", server.url, model=model, client="http")
            with Jarvis(config_path=folder / "config.toml", engine=engine) as j:
                j.ask_full("what is it?", agent="orchestrator", tools=["fs__read_media_file"])
            engine.close()
            size = len(json.dumps(server.requests[1]["messages"]))
        out.append((f"2nd request messages, {model}", size))
    return out


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for step in (failing_server, connect_times, request_bytes):
            folder = Path(tmp) / step.__name__
            folder.mkdir()
            rows += step(folder)
    print("| measure | value |\n|---|---|")
    for label, value in rows:
        shown = f"{value:.2f} s" if isinstance(value, float) else f"{value} bytes"
        print(f"| {label} | {shown} |")


if __name__ == "__main__":
    main()
