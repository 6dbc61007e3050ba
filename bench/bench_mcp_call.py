"""A warm MCP tool call over stdio: jarvis against the official SDK's session and a bare pipe.

    python bench/bench_mcp_call.py [--calls 40] [--rounds 8] [--repeats 3] [--baseline DIR]

Every server is the SDK-written tests/mcp_servers/toolbox.py; every call is its `echo` tool.
In one process, taking turns in blocks of `--calls` calls, `--rounds` times:

- pipe, new session / pipe, same session: a bare JSON-RPC client (one `tools/call` line out,
  one line back, no SDK on the client side) to a server started in a session of its own (as
  the SDK's stdio_client does) or in jarvis's session. The floor: the server's own time plus
  the pipe, and what a new session costs in wake-ups on a loaded machine (the kernel's
  autogroup scheduling puts each session in a group of its own).
- SDK session: the SDK `Client` over its own `stdio_client`, timed inside its event loop.
- jarvis execute / aexecute: the registry tool through `ToolExecutor.execute` (a worker
  thread's blocking call, handed to the MCP loop) and `aexecute` (from another event loop),
  the server configured with `sandbox = false` (what the SDK's session runs too).
- jarvis execute, sandboxed: the same with the default `sandbox = true` (the server inside
  bubblewrap or jarvis's launcher, which give it a session of its own); not measured for a
  checkout without MCP sandboxing.

CPU per call is this process's user + system time over the blocks of that kind (the server
not included): it moves much less with the machine's load than the wall times do.
The whole measurement runs `--repeats` times in fresh processes; with `--baseline DIR` (another
checkout, e.g. `git archive main | tar -x -C DIR`) the same runs alternate with runs of DIR's
code (PYTHONPATH), so before and after are measured under the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOOLBOX = REPO / "tests" / "mcp_servers" / "toolbox.py"
KINDS = ("pipe, new session", "pipe, same session", "SDK session", "jarvis execute",
         "jarvis aexecute", "jarvis execute, sandboxed")


class Pipe:
    """A bare newline-delimited JSON-RPC client (2026-07-28 protocol, as the SDK speaks it)."""

    META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {}}

    async def start(self, new_session: bool) -> Pipe:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, str(TOOLBOX), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
            start_new_session=new_session)
        self.next_id = 0
        await self.rpc("server/discover", {})
        return self

    async def rpc(self, method: str, params: dict) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.next_id += 1
        message = {"jsonrpc": "2.0", "id": self.next_id, "method": method,
                   "params": {**params, "_meta": self.META}}
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        await self.proc.stdin.drain()
        while True:
            reply = json.loads(await self.proc.stdout.readline())
            if reply.get("id") == self.next_id:
                return reply

    async def call(self) -> None:
        reply = await self.rpc("tools/call", {"name": "echo", "arguments": {"text": "hello"}})
        assert reply["result"]["content"][0]["text"] == "hello", reply

    async def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        await self.proc.wait()


def child(calls: int, rounds: int) -> dict:
    """One measurement in this process: medians (ms) and CPU per call (ms) of each kind."""
    from mcp import Client, StdioServerParameters

    from jarvis.core.config import load_config
    from jarvis.core.registry import ToolRegistry
    from jarvis.mcp.manager import register_mcp_tools
    from jarvis.tools.executor import ToolExecutor

    # The pipes and the SDK client live in one event loop of their own, in a thread.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def on_loop(coro):  # noqa: ANN001, ANN202
        return asyncio.run_coroutine_threadsafe(coro, loop).result(120)

    pipes = {True: on_loop(Pipe().start(True)), False: on_loop(Pipe().start(False))}
    holder: dict = {}
    opened = threading.Event()
    release = asyncio.Event()

    async def hold() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(TOOLBOX)])
        async with Client(params, cache=None) as client:  # as jarvis opens it
            holder["client"] = client
            opened.set()
            await release.wait()

    held = asyncio.run_coroutine_threadsafe(hold(), loop)
    opened.wait(120)

    async def timed(call, n: int) -> list[float]:  # noqa: ANN001
        out = []
        for _ in range(n):
            start = time.perf_counter()
            await call()
            out.append(time.perf_counter() - start)
        return out

    register_mcp_tools(load_config())
    sandboxed = ToolRegistry.contains("s1__echo")
    executor = ToolExecutor([ToolRegistry.get(n) for n in ("s0__echo", "s1__echo")
                             if ToolRegistry.contains(n)])
    request = {"name": "s0__echo", "arguments": {"text": "hello"}}

    def sync_block(n: int, request: dict = request) -> list[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            result = executor.execute(request)
            out.append(time.perf_counter() - start)
            assert result.success and result.content == "hello", result
        return out

    async def async_call() -> None:
        result = await executor.aexecute(request)
        assert result.success, result

    runners = {
        "pipe, new session": lambda n: on_loop(timed(pipes[True].call, n)),
        "pipe, same session": lambda n: on_loop(timed(pipes[False].call, n)),
        "SDK session": lambda n: on_loop(timed(lambda: holder["client"].call_tool(
            "echo", {"text": "hello"}), n)),
        "jarvis execute": sync_block,
        "jarvis aexecute": lambda n: asyncio.run(timed(async_call, n)),
    }
    if sandboxed:
        runners["jarvis execute, sandboxed"] = lambda n: sync_block(
            n, {"name": "s1__echo", "arguments": {"text": "hello"}})
    for run in runners.values():  # warm up
        run(20)
    times: dict[str, list[float]] = {k: [] for k in runners}
    cpu: dict[str, float] = dict.fromkeys(runners, 0.0)
    for _ in range(rounds):
        for kind, run in runners.items():
            before = time.process_time()
            times[kind] += run(calls)
            cpu[kind] += time.process_time() - before
    loop.call_soon_threadsafe(release.set)
    held.result(30)
    for pipe in pipes.values():
        on_loop(pipe.stop())
    return {kind: {"median_ms": statistics.median(t) * 1000,
                   "cpu_ms": cpu[kind] / len(t) * 1000} for kind, t in times.items()}


def run_child(code: Path, calls: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        server = (f'command = {json.dumps(sys.executable)}\n'
                  f'args = [{json.dumps(str(TOOLBOX))}]\n')
        config = f"[mcp.servers.s0]\n{server}"
        if (code / "jarvis" / "mcp" / "sandboxing.py").exists():  # MCP sandboxing is there
            config += f"sandbox = false\n\n[mcp.servers.s1]\n{server}"
        (work / "config.toml").write_text(config, encoding="utf-8")
        env = {**os.environ, "JARVIS_HOME": str(home), "PYTHONPATH": str(code)}
        env.pop("JARVIS_CONFIG", None)
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child",
                              "--calls", str(calls), "--rounds", str(rounds)], cwd=work, env=env,
                             capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"measurement failed ({code}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="calls per block")
    parser.add_argument("--rounds", type=int, default=8, help="blocks of each kind per process")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per version")
    parser.add_argument("--baseline", default="", help="another checkout to compare with")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child(opts.calls, opts.rounds)))
        return

    versions = [("", REPO)] + ([(" (baseline)", Path(opts.baseline))] if opts.baseline else [])
    runs: dict[str, list[dict]] = {suffix: [] for suffix, _ in versions}
    loads = [os.getloadavg()[0]]
    for _ in range(opts.repeats):
        for suffix, code in versions:
            runs[suffix].append(run_child(code, opts.calls, opts.rounds))
            loads.append(os.getloadavg()[0])

    def med(suffix: str, kind: str, key: str) -> float:
        return statistics.median(r[kind][key] for r in runs[suffix])

    print(f"warm MCP stdio call (toolbox `echo`), {opts.repeats} processes x {opts.rounds} "
          f"blocks x {opts.calls} calls per kind; load average {min(loads):.1f}-"
          f"{max(loads):.1f} on {os.cpu_count()} cores\n")
    print(f"{'kind':<32} {'median ms':>10} {'(per process)':>22} {'vs SDK':>7} {'CPU ms/call':>12}")
    for suffix, _ in versions:
        sdk = med(suffix, "SDK session", "median_ms")
        for kind in KINDS:
            if kind not in runs[suffix][0]:
                continue
            per = ", ".join(f"{r[kind]['median_ms']:.2f}" for r in runs[suffix])
            m = med(suffix, kind, "median_ms")
            print(f"{kind + suffix:<32} {m:>10.3f} {per:>22} {m / sdk:>6.2f}x "
                  f"{med(suffix, kind, 'cpu_ms'):>12.3f}")


if __name__ == "__main__":
    main()
