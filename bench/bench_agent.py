"""Agent overhead per turn, and `jarvis ask` start-up to its first request.

    python bench/bench_agent.py [--turns N] [--repeat N]

1. Agent overhead per turn: the orchestrator against the in-process ScriptedEngine, each turn
   one tool call (think, through the ToolExecutor) and, at the end, an answer. Baseline: the
   ScriptedEngine's own generate() calls for the same transcript (the part that is not agent).
   Target: under 0.5 ms per turn.
2. `jarvis ask` from process start to the first chat-completions request arriving at the
   loopback FakeOpenAIServer (engine named, model named: no discovery). Baselines in the same
   run: `python -c pass` and `python -c "import openai"` (what the openai package costs).
   Target: under 400 ms.
3. `jarvis ask` with no engine reachable: start to non-zero exit. Target: under 1.5 s.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from jarvis.agents import OrchestratorAgent
from jarvis.testing import FakeOpenAIServer, ScriptedEngine, reply, tool_call
from jarvis.tools.think import ThinkTool


def agent_turns(turns_per_run: int, runs: int) -> tuple[float, float]:
    """(ms per agent turn, ms per bare engine call) for runs of `turns_per_run` turns."""
    script = [reply(tool_calls=[tool_call("think", {"thought": f"step {i}"})])
              for i in range(turns_per_run - 1)] + ["done"]
    tool = ThinkTool()
    # Warm up (imports, validators, first-call caches).
    OrchestratorAgent(ScriptedEngine(list(script)), "m", tools=[tool],
                      max_turns=turns_per_run).run("warm")
    start = time.perf_counter()
    for _ in range(runs):
        agent = OrchestratorAgent(ScriptedEngine(list(script)), "m", tools=[tool],
                                  max_turns=turns_per_run)
        agent.run("go")
    per_turn = (time.perf_counter() - start) / (runs * turns_per_run) * 1000

    # Baseline: the engine alone, answering the same growing transcripts.
    agent = OrchestratorAgent(ScriptedEngine(list(script)), "m", tools=[tool],
                              max_turns=turns_per_run)
    transcript = agent.run("go").messages
    prefixes = [transcript[:i] for i in range(2, len(transcript), 2)][:turns_per_run]
    tools = agent.executor.get_openai_tools()
    start = time.perf_counter()
    for _ in range(runs):
        engine = ScriptedEngine(list(script))
        for prefix in prefixes:
            engine.generate(prefix, tools=tools, model="m")
    per_call = (time.perf_counter() - start) / (runs * len(prefixes)) * 1000
    return per_turn, per_call


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time_command(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(args, env=env, capture_output=True, check=False)
    return (time.perf_counter() - start) * 1000


def ask_first_request(repeat: int, home: str) -> tuple[list[float], list[float]]:
    """Per run: ms from Popen to the first POST, and ms to process exit."""
    first_request: list[float] = []
    total: list[float] = []
    arrived = threading.Event()
    stamp: list[float] = []

    def on_request(record) -> None:
        if record.method == "POST" and not arrived.is_set():
            stamp.append(time.perf_counter())
            arrived.set()

    with FakeOpenAIServer(default="ok", on_request=on_request) as server:
        env = dict(os.environ, JARVIS_HOME=home, JARVIS_ENGINE="vllm", VLLM_HOST=server.url,
                   JARVIS_MODEL="test-model", JARVIS_RUN_LOG="1")
        for _ in range(repeat):
            arrived.clear()
            stamp.clear()
            start = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "hello"], env=env,
                                  capture_output=True, text=True, cwd=home)
            end = time.perf_counter()
            if proc.returncode != 0 or not stamp:
                raise SystemExit(f"jarvis ask failed: {proc.stderr}")
            first_request.append((stamp[0] - start) * 1000)
            total.append((end - start) * 1000)
    return first_request, total


def ask_no_engine(repeat: int, home: str) -> list[float]:
    env = dict(os.environ, JARVIS_HOME=home)
    for var in ("JARVIS_ENGINE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        env.pop(var, None)
    for var in ("OLLAMA_HOST", "VLLM_HOST", "LLAMACPP_HOST", "LMSTUDIO_HOST", "SGLANG_HOST"):
        env[var] = f"http://127.0.0.1:{_closed_port()}"
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "jarvis.cli", "ask", "hello"], env=env,
                              capture_output=True, cwd=home)
        out.append((time.perf_counter() - start) * 1000)
        if proc.returncode == 0:
            raise SystemExit("expected jarvis ask to fail with no engine")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=5, help="turns per agent run")
    parser.add_argument("--runs", type=int, default=400, help="agent runs to time")
    parser.add_argument("--repeat", type=int, default=5, help="subprocess repetitions")
    args = parser.parse_args()

    per_turn, per_call = agent_turns(args.turns, args.runs)
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, JARVIS_HOME=home)
        py_pass = [_time_command([sys.executable, "-c", "pass"], env) for _ in range(args.repeat)]
        py_openai = [_time_command([sys.executable, "-c", "import openai"], env)
                     for _ in range(args.repeat)]
        first, total = ask_first_request(args.repeat, home)
        no_engine = ask_no_engine(args.repeat, home)

    med = statistics.median
    rows = [
        ("agent turn (orchestrator + 1 tool call)", per_turn, "ScriptedEngine.generate alone",
         per_call, 0.5),
        ("agent overhead per turn (turn - engine)", per_turn - per_call, "", None, 0.5),
        ("jarvis ask: start -> first request", med(first), "python -c pass", med(py_pass), 400),
        ("  (same)", med(first), "python -c 'import openai'", med(py_openai), 400),
        ("jarvis ask: start -> exit (answered)", med(total), "python -c pass", med(py_pass), None),
        ("jarvis ask, no engine: start -> exit", med(no_engine), "python -c pass", med(py_pass),
         1500),
    ]
    print(f"{'measure':<42} {'ms':>9}  {'baseline':<28} {'ms':>9}  {'ratio':>7}  target")
    for name, value, base_name, base, target in rows:
        ratio = f"{value / base:6.2f}x" if base else ""
        base_text = f"{base:9.3f}" if base is not None else ""
        verdict = "" if target is None else ("ok" if value < target else "MISSED") + f" (<{target} ms)"
        print(f"{name:<42} {value:9.3f}  {base_name:<28} {base_text:>9}  {ratio:>7}  {verdict}")


if __name__ == "__main__":
    main()
