"""CPU time of `jarvis ask --tools calculator` and of `Jarvis()` + close, against their floors.

    python bench/bench_startup.py [--repeat N] [--src DIR ...]

Each figure is CPU time (user + system), not wall time: the machine is shared, and CPU time is
what the work costs whatever else runs. Measured in fresh processes, taking turns (floor,
then each source tree), bytecode cached:

1. `jarvis ask --tools calculator "what is 2+2"` against the scripted OpenAI-compatible
   server (jarvis.testing.FakeOpenAIServer, in this process): the model calls the calculator,
   then answers. CPU of the whole child process. Floor: a stdlib client (http.client + json)
   that sends the same two chat-completion requests, runs nothing else and prints the answer.
2. `Jarvis()` + `close()` in a fresh process, CPU from before `from jarvis import Jarvis` to
   after close (the interpreter's own start excluded). Floor: what a config load minimally
   does: import tomllib, read and parse the same config.toml.

JARVIS_LOAD_PLUGINS is unset in the children (the default: every installed plugin, so the
entry-point scan runs). Before the rounds, each tree runs one untimed `Jarvis()` and one
untimed `ask` (a first start validates the config and scans the installed plugins; later
starts read both from $JARVIS_HOME/cache).

`--src DIR` (repeatable) measures another checkout's `jarvis/` too (e.g. main's, exported with
`git archive main jarvis | tar -x -C /tmp/main-src`), in the same rounds, so before/after
ratios come from one run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from jarvis.testing import FakeOpenAIServer, reply, tool_call

FLOOR_CLIENT = r"""
import http.client, json, sys
from urllib.parse import urlsplit
url = urlsplit(sys.argv[1])
conn = http.client.HTTPConnection(url.hostname, url.port)
tools = [{"type": "function", "function": {"name": "calculator", "description": "math",
          "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                         "required": ["expression"]}}}]
messages = [{"role": "user", "content": sys.argv[2]}]
for _ in range(2):
    body = json.dumps({"model": "test-model", "messages": messages, "tools": tools})
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    message = json.loads(conn.getresponse().read())["choices"][0]["message"]
    messages.append(message)
    for call in message.get("tool_calls") or []:
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "4"})
print(message["content"])
"""

JARVIS_INIT = r"""
import time
start = time.process_time()
from jarvis import Jarvis
Jarvis().close()
print(time.process_time() - start)
"""

FLOOR_INIT = r"""
import time
start = time.process_time()
import os, tomllib
with open(os.path.join(os.environ["JARVIS_HOME"], "config.toml"), "rb") as fh:
    tomllib.load(fh)
print(time.process_time() - start)
"""

CONFIG = """\
[engine]
temperature = 0.2
timeout = 60

[agent]
max_turns = 8

[runs]
enabled = true
"""


def child_cpu(args: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    """(CPU seconds of the child process, its stdout); a failure stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args[:4])} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15, help="rounds (fresh processes each)")
    parser.add_argument("--src", action="append", default=[],
                        help="another checkout's root (its jarvis/ is measured too)")
    args = parser.parse_args()

    here = str(Path(__file__).resolve().parent.parent)
    trees = [("this tree", here)] + [(f"--src {p}", str(Path(p).resolve())) for p in args.src]
    ask_cpu: dict[str, list[float]] = {"floor": []} | {name: [] for name, _ in trees}
    init_cpu: dict[str, list[float]] = {"floor": []} | {name: [] for name, _ in trees}

    with tempfile.TemporaryDirectory() as home, FakeOpenAIServer(default="4") as server:
        os.chmod(home, 0o700)
        Path(home, "config.toml").write_text(CONFIG)
        base = dict(os.environ, JARVIS_HOME=home, JARVIS_ENGINE="vllm", VLLM_HOST=server.url,
                    JARVIS_MODEL="test-model")
        base.pop("PYTHONPATH", None)
        base.pop("JARVIS_LOAD_PLUGINS", None)  # the default: every installed plugin (a scan)
        envs = {name: dict(base, PYTHONPATH=root) for name, root in trees}
        for root in {root for _, root in trees}:  # bytecode cached before the clock runs
            subprocess.run([sys.executable, "-m", "compileall", "-q", f"{root}/jarvis"], check=True)

        def script() -> None:
            server.add(reply(tool_calls=[tool_call("calculator", {"expression": "2+2"})]), "4")

        # Untimed: a first start validates and caches the config and scans the installed
        # plugins (cached too); the rounds measure the starts after it.
        for name, _root in trees:
            child_cpu([sys.executable, "-c", JARVIS_INIT], envs[name], home)
            script()
            child_cpu([sys.executable, "-m", "jarvis.cli", "ask", "--tools", "calculator",
                       "what is 2+2"], envs[name], home)

        for _ in range(args.repeat):
            script()
            cpu, out = child_cpu([sys.executable, "-c", FLOOR_CLIENT, server.url, "what is 2+2"],
                                 base, home)
            ask_cpu["floor"].append(cpu)
            for name, _root in trees:
                script()
                cpu, out = child_cpu([sys.executable, "-m", "jarvis.cli", "ask", "--tools",
                                      "calculator", "what is 2+2"], envs[name], home)
                if out.strip() != "4":
                    raise SystemExit(f"unexpected answer from {name}: {out!r}")
                ask_cpu[name].append(cpu)
            _, out = child_cpu([sys.executable, "-c", FLOOR_INIT], base, home)
            init_cpu["floor"].append(float(out))
            for name, _root in trees:
                _, out = child_cpu([sys.executable, "-c", JARVIS_INIT], envs[name], home)
                init_cpu[name].append(float(out))

    load = os.getloadavg()
    print(f"\n{args.repeat} rounds, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
          f"(2 shared cores here)\n")
    print("| measure | tree | CPU median ms (min) | vs floor |")
    print("|---|---|---|---|")
    for title, table in (("`jarvis ask --tools calculator`, whole process", ask_cpu),
                         ("`Jarvis()` + close, in process", init_cpu)):
        floor = statistics.median(table["floor"])
        for name, values in table.items():
            med = statistics.median(values)
            print(f"| {title} | {name} | {med * 1000:.0f} ({min(values) * 1000:.0f}) | "
                  f"{med / floor:.1f}x |")


if __name__ == "__main__":
    main()
