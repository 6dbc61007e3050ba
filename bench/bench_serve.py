"""`jarvis serve` latency and concurrency, over loopback, with the server in its own process.

    python bench/bench_serve.py [--calls N] [--sessions N] [--per-session N]

1. `POST /jarvis/call` for `think` on a warm ORS session (httpx keep-alive client): median and
   p95. Target: median under 2 ms. Baselines in the same run: the same ToolExecutor call made
   in-process (no HTTP), and a trivial starlette endpoint served by uvicorn the same way (the
   HTTP floor: what any request costs before jarvis does anything).
2. The same call through the published ors-sdk client (aiohttp + SSE parsing on the client).
3. N concurrent ORS sessions (default 50) through the ors-sdk async client, each created,
   calling `think` M times, deleted, all at once: errors (target 0), total time, per-call
   median and p95 (at 50 in flight these are mostly queueing on 2 cores), and the server's
   CPU time per call.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

import httpx

from jarvis.server import owner_token

BASELINE_APP = """
import sys
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
from jarvis.server import bind, serve_forever, url_of

async def call(request):
    await request.body()
    return Response('event: end\\ndata: {"ok": true}\\n\\n', media_type="text/event-stream")

app = Starlette(routes=[Route("/jarvis/call", call, methods=["POST"])])
sock = bind("127.0.0.1", 0)
print("listening on " + url_of(sock), file=sys.stderr, flush=True)
serve_forever(app, sock)
"""


def start(args: list[str]) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, JARVIS_RUN_LOG="0")
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    seen = ""
    for line in proc.stderr:  # a warning may come first (e.g. a state folder made private)
        if "listening on" in line:
            return proc, line.split("listening on ", 1)[1].split()[0]
        seen += line
    proc.kill()
    raise SystemExit(f"server did not start: {seen}")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.wait(timeout=15)
    if proc.stderr:
        proc.stderr.close()


def percentile(data: list[float], q: float) -> float:
    data = sorted(data)
    return data[min(len(data) - 1, int(q * len(data)))]


def time_calls(client: httpx.Client, n: int, headers: dict[str, str]) -> list[float]:
    body = {"name": "think", "input": {"thought": "a warm session call"}}
    for _ in range(50):  # warm up
        client.post("/jarvis/call", json=body, headers=headers)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = client.post("/jarvis/call", json=body, headers=headers)
        out.append(time.perf_counter() - t)
        if r.status_code != 200:
            raise SystemExit(f"call failed: {r.status_code} {r.text}")
    return out


def new_session(client: httpx.Client) -> str:
    sid = client.post("/create_session").text.split("data: ", 1)[1].split("\n", 1)[0]
    r = client.post("/create", json={"task_spec": {}}, headers={"X-Session-ID": sid})
    r.raise_for_status()
    return sid


def in_process(n: int) -> list[float]:
    from jarvis.core.types import ToolCall
    from jarvis.tools.executor import ToolExecutor
    from jarvis.tools.think import ThinkTool

    executor = ToolExecutor([ThinkTool()], run_id="bench")
    call = ToolCall(id="c", name="think", arguments={"thought": "a warm session call"})
    out = []
    for _ in range(n):
        t = time.perf_counter()
        executor.execute(call)
        out.append(time.perf_counter() - t)
    return out


def ors_client(url: str, n: int, token: str) -> list[float]:
    from ors.client import ORS, Task

    out = []
    with ORS(base_url=url, api_key=token) as client, client.environment("jarvis").session(
            task=Task("jarvis", {})) as session:
        for _ in range(20):
            session.call_tool("think", {"thought": "warm"})
        for _ in range(n):
            t = time.perf_counter()
            session.call_tool("think", {"thought": "a warm session call"})
            out.append(time.perf_counter() - t)
    return out


async def concurrent(url: str, sessions: int, per_session: int,
                     token: str) -> tuple[int, float, list[float]]:
    """Every session through the ors-sdk async client (aiohttp; SSE; pings), all at once."""
    from ors.client import AsyncORS, Task

    latencies: list[float] = []
    errors = 0
    # Keep the client referenced: its __del__ closes the HTTP sessions.
    client = AsyncORS(base_url=url, api_key=token)
    env = client.environment("jarvis")

    async def one(i: int) -> None:
        nonlocal errors
        try:
            async with env.session(task=Task("jarvis", {})) as session:
                for k in range(per_session):
                    t = time.perf_counter()
                    out = await session.call_tool("think", {"thought": f"{i}/{k}"})
                    latencies.append(time.perf_counter() - t)
                    if out.blocks[0].text != f"{i}/{k}":
                        errors += 1
        except Exception as exc:  # noqa: BLE001 - counted, reported
            errors += 1
            print(f"session {i}: {type(exc).__name__}: {exc}", file=sys.stderr)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(sessions)))
    total = time.perf_counter() - start
    await env.client.close()
    async with httpx.AsyncClient(base_url=url) as http:
        health = (await http.get("/health")).json()  # /health needs no token
    if health["sessions"] != 0:
        errors += 1
        print(f"sessions left open: {health['sessions']}", file=sys.stderr)
    return errors, total, latencies


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc; None elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ms(x: float) -> str:
    return f"{x * 1000:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--per-session", type=int, default=20)
    args = parser.parse_args()

    jarvis_proc, url = start([sys.executable, "-m", "jarvis.cli", "serve", "--port", "0",
                              "--tools", "think"])
    base_proc, base_url = start([sys.executable, "-c", BASELINE_APP])
    token = owner_token()  # the server answers only its owner: every request carries it
    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
            sid = new_session(client)
            served = time_calls(client, args.calls, {"X-Session-ID": sid})
            client.post("/delete", headers={"X-Session-ID": sid}).raise_for_status()
        with httpx.Client(base_url=base_url) as client:
            floor = time_calls(client, args.calls, {})
        direct = in_process(args.calls)
        via_ors = ors_client(url, max(100, args.calls // 5), token)
        cpu_before = cpu_seconds(jarvis_proc.pid)
        errors, total, lat = asyncio.run(concurrent(url, args.sessions, args.per_session,
                                                    token))
        cpu_after = cpu_seconds(jarvis_proc.pid)
    finally:
        stop(jarvis_proc)
        stop(base_proc)

    med = statistics.median(served)
    rows = [
        ("POST /jarvis/call think, warm session (httpx)", served),
        ("baseline: trivial starlette endpoint (httpx)", floor),
        ("baseline: ToolExecutor.execute in-process", direct),
        ("same call through the ors-sdk client", via_ors),
    ]
    print(f"{'measure':<50} {'median ms':>10} {'p95 ms':>9} {'vs served':>10}")
    for name, data in rows:
        m = statistics.median(data)
        print(f"{name:<50} {ms(m):>10} {ms(percentile(data, 0.95)):>9} {m / med:>9.2f}x")
    print(f"\ntarget: served median < 2 ms -> {'OK' if med < 0.002 else 'MISSED'} ({ms(med)} ms); "
          f"HTTP floor {ms(statistics.median(floor))} ms, jarvis adds "
          f"{ms(med - statistics.median(floor))} ms")
    calls = args.sessions * args.per_session
    print(f"\n{args.sessions} concurrent sessions x {args.per_session} calls: {calls} calls in "
          f"{total:.2f} s ({calls / total:.0f} calls/s), per-call median {ms(statistics.median(lat))} "
          f"ms, p95 {ms(percentile(lat, 0.95))} ms, errors: {errors} "
          f"-> {'OK' if errors == 0 else 'FAILED'}")
    if cpu_before is not None and cpu_after is not None:
        print(f"server CPU per call (sessions created and deleted included): "
              f"{ms((cpu_after - cpu_before) / calls)} ms")


if __name__ == "__main__":
    main()
