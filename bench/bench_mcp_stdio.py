"""Large MCP replies over stdio: jarvis's transport (jarvis/mcp/stdio.py) against the SDK's
`stdio_client`, in the same run.

    python bench/bench_mcp_stdio.py [--sizes 1,8,32] [--rounds 3]

One SDK-written server (a `text(mb)` tool returning that many MB of text) per transport; for
each size, calls alternate between the two transports `--rounds` times and the medians are
compared. The SDK's reader joins every 64 KiB chunk to the part of the line read so far and
splits the whole again, so its time grows with the square of the reply; jarvis's reads each
byte once and drops (without keeping) a message over `max_message_mb`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SERVER = '''
from mcp.server.mcpserver import MCPServer
app = MCPServer("big")

@app.tool()
def text(mb: int) -> str:
    return "a" * (mb * 1024 * 1024)

app.run()
'''


def main() -> None:
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from jarvis.mcp.stdio import bounded_stdio_client

    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    folder = Path(tempfile.mkdtemp())
    (folder / "big.py").write_text(SERVER, encoding="utf-8")
    params = StdioServerParameters(command=sys.executable, args=[str(folder / "big.py")])

    async def run() -> dict[tuple[str, int], list[float]]:
        times: dict[tuple[str, int], list[float]] = {}
        devnull = open(os.devnull, "w")  # noqa: SIM115
        transports = {
            "sdk": stdio_client(params, errlog=devnull),
            "jarvis": bounded_stdio_client(params, devnull, server="big", max_bytes=1 << 30),
        }
        async with contextlib.AsyncExitStack() as stack:  # closed in reverse order
            sessions = {}
            for name, transport in transports.items():
                read, write = await stack.enter_async_context(transport)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                sessions[name] = session
            for size in sizes:
                for _ in range(args.rounds):
                    for name, session in sessions.items():
                        started = time.perf_counter()
                        result = await session.call_tool("text", {"mb": size})
                        times.setdefault((name, size), []).append(time.perf_counter() - started)
                        assert len(result.content[0].text) == size * 1024 * 1024
        return times

    times = anyio.run(run)
    print(f"{'reply':>8} {'SDK stdio_client':>18} {'jarvis':>10} {'ratio':>7}")
    for size in sizes:
        sdk = statistics.median(times[("sdk", size)])
        ours = statistics.median(times[("jarvis", size)])
        print(f"{size:>6} MB {sdk * 1000:>15.0f} ms {ours * 1000:>7.0f} ms {sdk / ours:>6.1f}x")


if __name__ == "__main__":
    main()
