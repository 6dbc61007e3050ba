"""Benchmark: a stdio MCP server in the sandbox beside the same server unsandboxed, one run.

  - start: a fresh McpManager connects to the server and lists its tools (`refresh`): the
    process start, the sandbox (runtime found, bubblewrap), the handshake and tools/list.
    Target: sandboxed <= 1.3x unsandboxed (median).
  - warm call: `echo` on a connected server, through the ToolExecutor. Target: <= 1.1x.

The server is tests/mcp_servers/toolbox.py (official SDK, Python). Rounds interleave the two,
so both see the same load.

Run:  python bench/bench_mcp_sandbox.py [--quick]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

QUICK = "--quick" in sys.argv
REPO = Path(__file__).resolve().parent.parent
TOOLBOX = REPO / "tests" / "mcp_servers" / "toolbox.py"


def main() -> None:
    from jarvis.core.config import load_config
    from jarvis.core.registry import ToolRegistry
    from jarvis.mcp.manager import McpManager
    from jarvis.tools.executor import ToolExecutor

    rounds, calls = (4, 50) if QUICK else (12, 200)
    folder = Path(tempfile.mkdtemp(prefix="bench-mcp-sandbox-"))
    os.environ["JARVIS_HOME"] = str(folder / "home")
    configs = {}
    for sandbox in (False, True):
        path = folder / f"{sandbox}.toml"
        path.write_text(f'[mcp.servers.tb]\ncommand = "{sys.executable}"\n'
                        f'args = ["{TOOLBOX}"]\nsandbox = {str(sandbox).lower()}\n'
                        f"connect_timeout = 60\n")
        configs[sandbox] = load_config(path)
    start: dict[bool, list[float]] = {False: [], True: []}
    warm: dict[bool, list[float]] = {False: [], True: []}
    for sandbox in (False, True):  # warm-up: imports, the sandbox probe, the runtime lookup
        manager = McpManager(configs[sandbox])
        assert manager.refresh() == {"tb": None}
        manager.close()
    for _ in range(rounds):
        for sandbox in (False, True):
            manager = McpManager(configs[sandbox])
            began = time.perf_counter()
            assert manager.refresh() == {"tb": None}
            start[sandbox].append(time.perf_counter() - began)
            manager.register_known()
            executor = ToolExecutor([ToolRegistry.get("tb__echo")])
            for _ in range(calls // rounds):
                began = time.perf_counter()
                result = executor.execute({"name": "tb__echo", "arguments": {"text": "x"}})
                warm[sandbox].append(time.perf_counter() - began)
                assert result.success, result.content
            manager.close()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'measure':<30} {'unsandboxed ms':>15} {'sandboxed ms':>13} {'ratio':>7}")
    for label, data, target in (("start (connect + tools/list)", start, 1.3),
                                ("warm call echo", warm, 1.1)):
        before, after = statistics.median(data[False]), statistics.median(data[True])
        flag = "" if after / before <= target else f"  OVER the {target}x target"
        print(f"{label:<30} {before * 1000:>15.1f} {after * 1000:>13.1f} "
              f"{after / before:>6.2f}x{flag}")


if __name__ == "__main__":
    main()
