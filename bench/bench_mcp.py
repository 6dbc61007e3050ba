"""MCP figures: warm-call overhead, `jarvis tools list` with 5 servers, no needless starts.

    python bench/bench_mcp.py [--calls 300]

1. A warm call to a stdio MCP tool through jarvis (ToolExecutor -> proxy tool -> background
   loop -> SDK session) against the same call made directly with the SDK `Client` in one
   event loop (the server's own time plus the transport), and against calling the same
   Python function in-process. Target: jarvis adds < 2 ms (median).
2. `jarvis tools list` with 5 stdio servers configured, cold cache (the servers must be asked,
   concurrently) and warm cache (no server is started), against `jarvis tools list` with no
   servers. Target: < 1 s.
3. `jarvis tools run calculator` with the same 5 servers: no server process may start.

Every server is the SDK-written tests/mcp_servers/toolbox.py.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLBOX = REPO / "tests" / "mcp_servers" / "toolbox.py"
sys.path.insert(0, str(REPO))


def write_config(folder: Path, count: int, marker: Path | None = None) -> None:
    lines = []
    for i in range(count):
        args = [str(TOOLBOX), "--label", f"s{i}"]
        if marker is not None:
            args += ["--touch", str(marker)]
        lines += [f"[mcp.servers.s{i}]", f"command = {sys.executable!r}".replace("'", '"'),
                  "args = [" + ", ".join(f'"{a}"' for a in args) + "]", ""]
    (folder / "config.toml").write_text("\n".join(lines), encoding="utf-8")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def echo(text: str) -> str:
    return text


def bench_warm_call(calls: int, rounds: int = 6) -> dict[str, float]:
    """Medians in ms. The SDK baseline and the jarvis calls alternate in blocks, so machine
    load drifting during the run hits both alike."""
    import threading

    from mcp import Client, StdioServerParameters

    from jarvis.core.config import load_config
    from jarvis.core.registry import ToolRegistry
    from jarvis.mcp.manager import register_mcp_tools
    from jarvis.tools.executor import ToolExecutor

    # In-process: the same function, called directly.
    inproc = []
    for _ in range(calls):
        t = time.perf_counter()
        echo("hello")
        inproc.append(time.perf_counter() - t)

    # The SDK alone: a warm Client in its own event loop, timed inside that loop.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    holder: dict[str, object] = {}
    opened, release = threading.Event(), asyncio.Event()

    async def hold() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(TOOLBOX)])
        async with Client(params, cache=None) as client:  # as jarvis opens it
            holder["client"] = client
            opened.set()
            await release.wait()

    async def raw_block(n: int) -> list[float]:
        client = holder["client"]
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await client.call_tool("echo", {"text": "hello"})
            out.append(time.perf_counter() - t)
        return out

    held = asyncio.run_coroutine_threadsafe(hold(), loop)
    opened.wait(60)
    asyncio.run_coroutine_threadsafe(raw_block(20), loop).result()

    # jarvis: the registry tool through the ToolExecutor, sync and async.
    register_mcp_tools(load_config())
    tool = ToolRegistry.get("s0__echo")
    executor = ToolExecutor([tool])
    call = {"name": "s0__echo", "arguments": {"text": "hello"}}
    for _ in range(20):
        assert executor.execute(call).success

    async def async_block(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await executor.aexecute(call)
            out.append(time.perf_counter() - t)
        return out

    sdk: list[float] = []
    sync: list[float] = []
    asynced: list[float] = []
    block = max(1, calls // rounds)
    for _ in range(rounds):
        sdk += asyncio.run_coroutine_threadsafe(raw_block(block), loop).result()
        for _ in range(block):
            t = time.perf_counter()
            executor.execute(call)
            sync.append(time.perf_counter() - t)
        asynced += asyncio.run(async_block(block))
    loop.call_soon_threadsafe(release.set)
    held.result(30)
    return {"inproc": median_ms(inproc), "sdk": median_ms(sdk), "sync": median_ms(sync),
            "async": median_ms(asynced)}


def timed_cli(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "jarvis.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return time.perf_counter() - t, proc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home, work, empty = root / "home", root / "work", root / "empty"
        for folder in (home, work, empty):
            folder.mkdir()
        marker = root / "starts.txt"
        write_config(work, 5, marker)
        env = {**os.environ, "JARVIS_HOME": str(home)}
        env.pop("JARVIS_CONFIG", None)

        def starts() -> int:
            return len(marker.read_text().split()) if marker.exists() else 0

        # 3 first (cold cache): a command that uses no MCP tool starts nothing.
        t_calc_cold, proc = timed_cli(["tools", "run", "calculator", '{"expression": "2+2"}'], work, env)
        assert proc.stdout.strip() == "4", proc.stderr
        no_start_cold = starts() == 0

        t_base, _ = timed_cli(["tools", "list"], empty, env)
        t_cold, proc = timed_cli(["tools", "list"], work, env)
        assert "s4__echo" in proc.stdout, proc.stderr
        started_by_cold = starts()
        t_warm = min(timed_cli(["tools", "list"], work, env)[0] for _ in range(3))
        t_base = min([t_base] + [timed_cli(["tools", "list"], empty, env)[0] for _ in range(2)])
        t_calc_warm, _ = timed_cli(["tools", "run", "calculator", '{"expression": "2+2"}'], work, env)
        no_start_warm = starts() == started_by_cold

        # One server on its own, connect + list through the SDK (the floor for a cold list).
        async def one_server() -> float:
            from mcp import Client, StdioServerParameters

            t = time.perf_counter()
            async with Client(StdioServerParameters(command=sys.executable, args=[str(TOOLBOX)])) as c:
                await c.list_tools()
                return time.perf_counter() - t

        import mcp  # noqa: F401  (import cost out of the measurement)

        t_one = asyncio.run(one_server())

        os.environ["JARVIS_HOME"] = str(home)
        os.chdir(work)
        warm = bench_warm_call(opts.calls)

    added_sync = warm["sync"] - warm["sdk"]
    added_async = warm["async"] - warm["sdk"]
    print("MCP bench (medians; machine load varies, compare within one run)\n")
    print(f"1. warm stdio call ({opts.calls} calls of toolbox `echo`)")
    print(f"   in-process function call        {warm['inproc'] * 1000:9.1f} us")
    print(f"   SDK Client alone (baseline)     {warm['sdk']:9.3f} ms")
    print(f"   jarvis ToolExecutor.execute     {warm['sync']:9.3f} ms   adds {added_sync:+.3f} ms "
          f"(x{warm['sync'] / warm['sdk']:.2f})  target < 2 ms: {'OK' if added_sync < 2 else 'MISSED'}")
    print(f"   jarvis ToolExecutor.aexecute    {warm['async']:9.3f} ms   adds {added_async:+.3f} ms "
          f"(x{warm['async'] / warm['sdk']:.2f})  target < 2 ms: {'OK' if added_async < 2 else 'MISSED'}")
    print("\n2. `jarvis tools list`, 5 stdio servers configured")
    print(f"   no servers configured (baseline) {t_base:8.3f} s")
    print(f"   warm cache (no server started)   {t_warm:8.3f} s   x{t_warm / t_base:.2f}  "
          f"target < 1 s: {'OK' if t_warm < 1 else 'MISSED'}")
    print(f"   cold cache (5 servers asked)     {t_cold:8.3f} s   x{t_cold / t_base:.2f}  "
          f"target < 1 s: {'OK' if t_cold < 1 else 'MISSED'} (servers started: {started_by_cold})")
    print(f"   one SDK server connect+list      {t_one:8.3f} s   (the floor of a cold list)")
    print("\n3. `jarvis tools run calculator` with the 5 servers configured")
    print(f"   cold cache {t_calc_cold:.3f} s, servers started: {'none' if no_start_cold else 'SOME'}")
    print(f"   warm cache {t_calc_warm:.3f} s, servers started: {'none' if no_start_warm else 'SOME'}")
    if not (no_start_cold and no_start_warm):
        sys.exit(1)


if __name__ == "__main__":
    main()
