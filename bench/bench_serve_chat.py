"""`jarvis serve` chat throughput: `POST /v1/chat/completions` requests per second at c=8.

    python bench/bench_serve_chat.py [--concurrency 8] [--seconds 3] [--rounds 5]
                                     [--only floor,scripted,...] [--baseline DIR]

Every server runs in its own process; one asyncio client in this process keeps
`--concurrency` kept-alive loopback connections busy (raw HTTP/1.1, so the client costs the
same few microseconds whichever server it talks to). The targets take turns, `--rounds` times,
so load on the shared machine hits them alike; medians are reported with the server's CPU time
per request (user + system, all threads, from /proc), which moves far less with the load than
req/s does.

- floor: a Starlette endpoint that parses the JSON body and answers a fixed completion, served
  by jarvis.server's uvicorn set-up (`bind` + `serve_forever`): what any request costs before
  jarvis does anything.
- scripted: the `jarvis serve` app (`build_app`) on a Jarvis whose engine is the testing kit's
  in-process `ScriptedEngine`: the whole serve path (owner token, guard, parsing, agent, run
  log written to SQLite under a temporary JARVIS_HOME) with no model. Every request carries
  the owner token (`$JARVIS_HOME/serve.token`).
- upstream: the real `jarvis serve` CLI with `JARVIS_ENGINE=openai` and its default client,
  talking to the testing kit's `FakeOpenAIServer` (`python -m jarvis.testing serve`) in a
  third process; "upstream alone" is that fake server driven directly by the same client.
- upstream openai: the same with `[engine] client = "openai"` (the openai package).

`--baseline DIR` (a checkout of another version, e.g. `git archive main | tar -x -C DIR`)
adds the scripted and upstream targets run from DIR's code (PYTHONPATH), as "... (baseline)",
taking turns with the others: before/after in the same run. The fake upstream server is this
checkout's in both.
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
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

FLOOR_APP = """
import json, sys
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from jarvis.server import bind, serve_forever, url_of

ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "simple",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello."},
                       "finish_reason": "stop", "logprobs": None}],
          "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

async def chat(request):
    json.loads(await request.body())
    return JSONResponse(ANSWER)

app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
sock = bind("127.0.0.1", 0)
print("listening on " + url_of(sock), file=sys.stderr, flush=True)
serve_forever(app, sock)
"""

SCRIPTED_APP = """
import sys
from jarvis.sdk import Jarvis
from jarvis.server import ServeSettings, bind, build_app, serve_forever, url_of
from jarvis.testing import ScriptedEngine

jarvis = Jarvis(engine=ScriptedEngine(default="Hello from the script."))
app = build_app(ServeSettings(port=0, tools=[]), jarvis=jarvis)
sock = bind("127.0.0.1", 0, listen=False)
serve_forever(app, sock, announce=lambda: print("listening on " + url_of(sock), file=sys.stderr,
                                                 flush=True))
"""

BODY = json.dumps({"model": "simple", "messages": [{"role": "user", "content": "Say hello."}]})


def start_server(args: list[str], env: dict[str, str], marker: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=env["JARVIS_HOME"])
    stream = proc.stdout if marker == "stdout" else proc.stderr
    assert stream is not None
    seen = ""
    for line in stream:  # a warning may come first (e.g. a state folder made private)
        url = line.split("listening on ", 1)[-1].split()[0] if line.strip() else ""
        if url.startswith("http"):
            # Nothing reads the pipes from here on: the servers are quiet once started.
            return proc, url
        seen += line
    proc.kill()
    raise SystemExit(f"server {args[-1][:60]!r} did not start: {seen}")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> float:
    return os.getloadavg()[0]


async def drive(url: str, path: str, concurrency: int, seconds: float,
                token: str = "sk-bench") -> tuple[int, int, float]:
    """Requests done, errors and elapsed seconds, `concurrency` keep-alive connections."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    body = BODY.encode()
    request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n"
               ).encode() + body
    done = errors = 0
    start = time.perf_counter()
    stop_at = start + seconds

    async def worker() -> None:
        nonlocal done, errors
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < stop_at:
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                status = int(head[9:12])
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                payload = await reader.readexactly(length)
                if status != 200 or b"chat.completion" not in payload:
                    errors += 1
                    if errors == 1:
                        print(f"error from {url}: {status} {payload[:300]!r}", file=sys.stderr)
                done += 1
        finally:
            writer.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done, errors, time.perf_counter() - start


def measure(target: dict, concurrency: int, seconds: float) -> dict[str, float]:
    procs = [target["proc"]] + ([target["upstream"]] if target.get("upstream") else [])
    before = [cpu_seconds(p.pid) for p in procs]
    done, errors, elapsed = asyncio.run(drive(target["url"], target["path"], concurrency, seconds,
                                              target.get("token", "sk-bench")))
    after = [cpu_seconds(p.pid) for p in procs]
    out = {"rps": done / elapsed, "errors": errors,
           "cpu_ms": (after[0] - before[0]) / max(done, 1) * 1000}
    if len(procs) > 1:
        out["upstream_cpu_ms"] = (after[1] - before[1]) / max(done, 1) * 1000
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0, help="per block")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated targets to run")
    parser.add_argument("--baseline", default="", help="another checkout to compare with")
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        base_env = {**os.environ, "JARVIS_HOME": str(home), "PYTHONPATH": str(REPO)}
        for key in ("JARVIS_CONFIG", "JARVIS_ENGINE", "JARVIS_MODEL", "JARVIS_RUN_LOG",
                    "OPENAI_BASE_URL"):
            base_env.pop(key, None)
        py = sys.executable
        upstream, upstream_url = start_server(
            [py, "-m", "jarvis.testing", "serve", "--default", "Hello from upstream."],
            base_env, "stdout")
        openai_config = home / "openai-client" / "config.toml"
        openai_config.parent.mkdir()
        openai_config.write_text('[engine]\nclient = "openai"\n')
        upstream_env = dict(base_env, JARVIS_ENGINE="openai", OPENAI_BASE_URL=upstream_url,
                            OPENAI_API_KEY="sk-bench", JARVIS_MODEL="test-model")
        serve_cli = [py, "-m", "jarvis.cli", "serve", "--port", "0", "--tools", "think"]
        kinds = {
            "floor": ([py, "-c", FLOOR_APP], base_env, None),
            "scripted": ([py, "-c", SCRIPTED_APP], base_env, None),
            "upstream": (serve_cli, upstream_env, upstream),
            "upstream openai": (serve_cli, dict(upstream_env, JARVIS_CONFIG=str(openai_config)),
                                upstream),
        }
        wanted = set(filter(None, opts.only.split(","))) or {*kinds, "upstream alone"}
        sources = [("", str(REPO))] + ([(" (baseline)", opts.baseline)] if opts.baseline else [])
        targets: dict[str, dict] = {}
        try:
            for name, (args, env, up) in kinds.items():
                for suffix, path in sources:
                    if name not in wanted or (suffix and name == "floor"):
                        continue
                    proc, url = start_server(args, dict(env, PYTHONPATH=path), "stderr")
                    targets[name + suffix] = {"proc": proc, "url": url, "upstream": up,
                                              "path": "/v1/chat/completions"}
            # A keyless jarvis serve answers only its owner: the token its first start made.
            token_file = home / "serve.token"
            token = token_file.read_text().strip() if token_file.exists() else "sk-bench"
            for target in targets.values():
                target["token"] = token
            if "upstream alone" in wanted:
                targets["upstream alone"] = {"proc": upstream, "url": upstream_url.removesuffix("/v1"),
                                             "path": "/v1/chat/completions"}
            for target in targets.values():  # warm up: engine built, run log created, ...
                measure(target, opts.concurrency, 1.0)
            results: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
            loads = [load_average()]
            for _ in range(opts.rounds):
                for name, target in targets.items():
                    results[name].append(measure(target, opts.concurrency, opts.seconds))
                loads.append(load_average())
        finally:
            for target in targets.values():
                if target["proc"] is not upstream:
                    stop(target["proc"])
            stop(upstream)

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    floor = med("floor", "rps") if "floor" in results else None
    print(f"POST /v1/chat/completions, c={opts.concurrency}, {opts.rounds} rounds of "
          f"{opts.seconds:g} s each, interleaved; load average {min(loads):.1f}-{max(loads):.1f} "
          f"on {os.cpu_count()} cores\n")
    print(f"{'target':<26} {'req/s median':>12} {'(min-max)':>13} {'vs floor':>9} "
          f"{'server CPU ms/req':>18} {'upstream CPU ms/req':>20} {'errors':>7}")
    for name in results:
        rps = [r["rps"] for r in results[name]]
        ratio = f"{med(name, 'rps') / floor:.2f}x" if floor else "-"
        up = f"{med(name, 'upstream_cpu_ms'):.2f}" if "upstream_cpu_ms" in results[name][0] else ""
        errors = sum(int(r["errors"]) for r in results[name])
        print(f"{name:<26} {med(name, 'rps'):>12.0f} {f'({min(rps):.0f}-{max(rps):.0f})':>13} "
              f"{ratio:>9} {med(name, 'cpu_ms'):>18.2f} {up:>20} {errors:>7}")
    if any(sum(int(r["errors"]) for r in rs) for rs in results.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
