"""Benchmark: what the workspace costs each time the SDK or CLI starts an ask.

`load_extensions` runs once per Jarvis instance (the scheduler makes one per task), so the
repeated (cached) load of tool files and plugins must cost far less than the first one, and
reading agents/*.toml must stay cheap. Baselines measured in the same run:
  - first load of N tool files      vs  plain importlib exec of the same files
  - cached load of N tool files     vs  the first load (ratio should be << 1)
  - cached plugin scan              vs  an uncached importlib.metadata scan
  - reading N agent files           vs  tomllib parsing the same files without validation

Run:  python bench/bench_workspace.py [N]
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys
import tempfile
import time
import tomllib
from pathlib import Path

TOOL = '''
from jarvis import tool


@tool
def bench_tool_{i}(text: str, times: int = 1) -> str:
    """Repeat a text.

    Args:
        text: The text.
        times: How often.
    """
    return text * times
'''

AGENT = '''
name = "agent_{i}"
description = "Benchmark agent {i}."
base = "react"
instructions = "You are agent {i}."
tools = ["calculator", "think"]
max_turns = 5
schedule = "0 7 * * *"
'''


def timed(fn, repeat: int = 20) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    os.environ.pop("JARVIS_LOAD_PLUGINS", None)
    from jarvis.core.config import load_config
    from jarvis.core.registry import ToolRegistry
    from jarvis.plugins import installed_plugins, load_plugins
    from jarvis.workspace.agents import load_agents
    from jarvis.workspace.tools import load_workspace_tools

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "tools").mkdir()
        (root / "agents").mkdir()
        (root / "config.toml").write_text("")
        for i in range(n):
            (root / "tools" / f"t{i}.py").write_text(TOOL.format(i=i))
            (root / "agents" / f"a{i}.toml").write_text(AGENT.format(i=i))
        config = load_config(root / "config.toml")
        ToolRegistry.keys()

        def plain_exec() -> None:
            snap = ToolRegistry.snapshot()
            for i, path in enumerate(sorted((root / "tools").glob("*.py"))):
                spec = importlib.util.spec_from_file_location(f"_bench_plain_{i}", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            ToolRegistry.restore(snap)

        def first_load() -> None:
            snap = ToolRegistry.snapshot()
            for path in (root / "tools").glob("*.py"):
                os.utime(path)  # a new mtime: the loader must run the file again
            load_workspace_tools(config)
            ToolRegistry.restore(snap)

        baseline_exec = timed(plain_exec, 5)
        first = timed(first_load, 5)
        load_workspace_tools(config)
        cached = timed(lambda: load_workspace_tools(config))

        def uncached_scan() -> None:
            installed_plugins(refresh=True)

        scan = timed(uncached_scan, 10)
        load_plugins()
        plugins_cached = timed(load_plugins)

        def toml_only() -> None:
            for path in sorted((root / "agents").glob("*.toml")):
                tomllib.loads(path.read_text())

        toml_base = timed(toml_only)
        agents = timed(lambda: load_agents(config))

    rows = [
        (f"first load, {n} tool files", first, "plain importlib exec", baseline_exec),
        (f"cached load, {n} tool files", cached, "first load", first),
        ("plugin load (cached scan)", plugins_cached, "uncached entry-point scan", scan),
        (f"read {n} agent files", agents, "tomllib only", toml_base),
    ]
    print(f"{'measure':<30} {'ms':>9}   {'baseline':<26} {'ms':>9}  ratio")
    for name, value, base_name, base in rows:
        print(f"{name:<30} {value * 1000:9.3f}   {base_name:<26} {base * 1000:9.3f}  "
              f"{value / base:5.2f}x")


if __name__ == "__main__":
    main()
