"""Benchmark: what parking a run and resuming it costs (issue 22; targets: a scheduled run
resumes within one scheduler tick of the approval, and the stored state grows in proportion
to the conversation).

A tool that needs confirmation and does nothing; a loopback OpenAI-compatible server that
calls it, then answers. For conversations of 0, 50 and 500 earlier messages:

  straight     ask_full with the tool approved by name: two engine turns, nothing parked
  park         ask_full(on_approval="defer") up to the parked call: state and request stored
  resume       Jarvis.resume with the approval: the state claimed, restored, the call run,
               the second turn
  park+resume  the two together, as a ratio to straight
  state        bytes of the stored state, and per earlier message

Then the scheduler: a real `jarvis scheduler start --poll 0.5` subprocess whose task parks;
the time from the approval being recorded to the ledger's run leaving "parked" (its
continuation claimed), against the poll interval.

Run:  python bench/bench_approvals.py [--quick]
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QUICK = "--quick" in sys.argv
TOOL = '''
from jarvis.tools.base import tool


@tool(requires_confirmation=True, egress="none", output="neutral")
def bench_danger(note: str = "") -> str:
    """Does nothing (needs confirmation).

    Args:
        note: ignored
    """
    return "ok"
'''


def model(body: dict):
    from jarvis.testing import reply, tool_call

    messages = body.get("messages", [])
    if messages and messages[-1].get("role") == "tool":
        return "done"
    return reply(tool_calls=[tool_call("bench_danger", {"note": "x"})])


def history(n: int) -> list:
    from jarvis.core.types import Message

    text = "a sentence of an earlier message in this conversation, about two hundred " * 3
    return [Message(role="user" if i % 2 == 0 else "assistant", content=f"{i} {text}")
            for i in range(n)]


def sdk_figures(folder: Path, engine_url: str) -> None:
    from jarvis import Jarvis
    from jarvis.approvals.stores import open_approvals
    from jarvis.core.config import load_config

    config = folder / "config.toml"
    config.write_text(f'[engine]\ndefault = "openai"\nmodel = "m"\nmax_retries = 0\n'
                      f'[engine.hosts]\nopenai = "{engine_url}"\n[memory]\ncontext = false\n'
                      f'')
    system = Jarvis(config=load_config(config))
    rounds = 5 if QUICK else 15
    print(f"{'earlier messages':>16} {'straight ms':>12} {'park ms':>8} {'resume ms':>10} "
          f"{'park+resume':>12} {'ratio':>6} {'state KB':>9} {'B/message':>10}")
    base = 0.0
    for n in (0, 50, 500):
        past = history(n)
        straight, park, resume, sizes = [], [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            system.ask_full("go", tools=["bench_danger"], agent="orchestrator", history=past,
                            approved_tools=["bench_danger"])
            t1 = time.perf_counter()
            parked = system.ask_full("go", tools=["bench_danger"], agent="orchestrator",
                                     history=past, on_approval="defer")
            t2 = time.perf_counter()
            ident = parked["pending_approvals"][0]["id"]
            done = system.resume(parked["run_id"], {ident: "approve"})
            t3 = time.perf_counter()
            assert done["content"] == "done", done
            straight.append(t1 - t0)
            park.append(t2 - t1)
            resume.append(t3 - t2)
            store = open_approvals(system.config)
            try:
                sizes.append(store.get_run(parked["run_id"], with_state=False).state_bytes)
            finally:
                store.close()
        s, p, r = (statistics.median(x) * 1000 for x in (straight, park, resume))
        size = statistics.median(sizes)
        if n == 0:
            base = size
        per = f"{(size - base) / n:.0f}" if n else "-"
        print(f"{n:>16} {s:>12.1f} {p:>8.1f} {r:>10.1f} {p + r:>12.1f} {(p + r) / s:>6.2f} "
              f"{size / 1024:>9.1f} {per:>10}")
    system.close()


def tick_figures(folder: Path, engine_url: str) -> None:
    from jarvis.approvals import decide
    from jarvis.core.config import load_config

    db = folder / "scheduler.db"
    config = folder / "config.toml"
    config.write_text(f'[engine]\ndefault = "openai"\nmodel = "m"\nmax_retries = 0\n'
                      f'[engine.hosts]\nopenai = "{engine_url}"\n[memory]\ncontext = false\n'
                      f'[scheduler]\ndb_path = "{db}"\n')
    env = dict(os.environ, JARVIS_CONFIG=str(config), OPENAI_API_KEY="bench")
    poll = 0.5
    daemon = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "scheduler", "start",
                               "--poll", str(poll)], env=env, cwd=folder,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    waits = []
    try:
        for _ in range(3 if QUICK else 8):
            from jarvis.scheduler.schedules import iso

            out = subprocess.run([sys.executable, "-m", "jarvis.cli", "schedule", "add", "go",
                                  "--at", iso(time.time() + 3), "--tools", "bench_danger",
                                  "--agent", "orchestrator", "--json"], env=env, cwd=folder,
                                 capture_output=True, text=True, check=True)
            task = json.loads(out.stdout)["task_id"]
            conn = sqlite3.connect(db)
            try:
                parked = _wait(lambda conn=conn, task=task: conn.execute(
                    "SELECT run_log_id FROM runs WHERE task_id = ? AND status = 'parked'",
                    (task,)).fetchone())
                pending = _pending(load_config(config), parked[0])
                decide(pending, True, by="bench", config=load_config(config))
                t0 = time.perf_counter()
                _wait(lambda conn=conn, task=task: conn.execute(
                    "SELECT 1 FROM runs WHERE task_id = ? AND status != 'parked'",
                    (task,)).fetchone(), step=0.002)
                waits.append(time.perf_counter() - t0)
            finally:
                conn.close()
    finally:
        daemon.terminate()
        daemon.wait(30)
    print(f"\nscheduler, poll {poll} s: approval recorded -> continuation claimed: median "
          f"{statistics.median(waits) * 1000:.0f} ms, max {max(waits) * 1000:.0f} ms "
          f"({max(waits) / poll:.2f} ticks at most) over {len(waits)} runs")


def _pending(config, run_id: str) -> str:
    from jarvis.approvals.stores import open_approvals

    store = open_approvals(config)
    try:
        return next(a.id for a in store.of_run(run_id) if a.status == "pending")
    finally:
        store.close()


def _wait(fn, timeout: float = 60.0, step: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(step)
    raise TimeoutError("waited too long")


def main() -> None:
    from jarvis.testing import FakeOpenAIServer

    with tempfile.TemporaryDirectory() as tmp, FakeOpenAIServer(default=model) as engine:
        folder = Path(tmp)
        os.environ["JARVIS_HOME"] = str(folder / "home")
        os.environ["OPENAI_API_KEY"] = "bench"
        os.environ.pop("JARVIS_CONFIG", None)
        (folder / "tools").mkdir()
        (folder / "tools" / "bench_danger.py").write_text(TOOL)
        os.chdir(folder)
        sdk_figures(folder, engine.base_url)
        tick_figures(folder, engine.base_url)


if __name__ == "__main__":
    main()
