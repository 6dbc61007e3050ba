"""Dispatch under a backlog: 1 000 runs due at once on Celery workers, with a short and the
default `dispatch_timeout`, counting the messages the broker got.

    python bench/bench_scheduler_backlog.py [--runs 1000] [--work 0.05] [--concurrency 1]
                  [--workers 1,3] [--timeouts 8,300] [--repeat 3] [--base PATH]

Needs the test extra (`pip install -e '.[test]'`): a real PostgreSQL (fsync on) and Redis on
loopback ports (tests/servers.py), one `jarvis scheduler start` daemon and `jarvis worker`
processes whose runs only wait `--work` seconds (tests/scheduler_support.py ScriptRunner,
"sleep"), so the dispatch path is what is measured. The tasks are due within one second, one
millisecond apart, so their due order is known. One run at a time per worker process by
default: 1 000 runs of 50 ms make a backlog of about a minute on one worker (as fewer,
minute-long agent runs would), and `lease_seconds = 20`, so the daemon's reaper passes every
10 s during it.

For each (workers, dispatch_timeout): messages the broker got (Redis LPUSH calls, from INFO
commandstats) per run, runs re-sent (the daemon's log), runs/s = runs / (last finish - first
due time), start lateness (start - scheduled time, p50 / p99) and FIFO order (mean distance
between a run's place in the due order and in the start order, in runs). The 300 s case of
the same worker count is the baseline in the same run. The cases are interleaved `--repeat`
times, every other round in reverse order, and each figure is the median (the machine's load
varies). `--base PATH` runs the
daemon and workers from another checkout (e.g. the commit before a change): the before table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_scheduler_celery import env_for, pct, spawn, stop, wait_line

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(TESTS)]


def follow(proc: object, needle: str, lines: list[str], timeout: float = 60) -> None:
    """Wait for `needle` on the process's stderr, and keep collecting its lines after it."""
    import threading

    found = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if needle in line:
                found.set()

    threading.Thread(target=read, daemon=True).start()
    if not found.wait(timeout):
        raise RuntimeError(f"{proc.args} did not log {needle!r}")


def lpush_calls(redis_url: str) -> int:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return int(client.info("commandstats").get("cmdstat_lpush", {}).get("calls", 0))
    finally:
        client.close()


def case(*, runs: int, workers: int, timeout: float, concurrency: int, pg: object,
         redis_url: str, work: Path, base: str, seconds: float) -> dict:
    from servers import new_database

    from jarvis.scheduler.scheduler import TaskScheduler
    from jarvis.scheduler.store_postgres import PostgresStore

    label = f"{workers}w_{int(timeout)}s_{os.urandom(3).hex()}"
    folder = work / label
    folder.mkdir()
    (folder / "home").mkdir()
    (folder / "config.toml").write_text(
        f"[scheduler]\npoll_seconds = 0.2\nlease_seconds = 20\n\n[scheduler.celery]\n"
        f"dispatch_timeout = {timeout}\n")
    url = new_database(pg, f"backlog_{label}_{os.getpid()}")
    store = PostgresStore(url)
    api = TaskScheduler(store=store, runner=lambda t, o: "unused")
    ids = [api.add(f"sleep {seconds}", every=86400).id for _ in range(runs)]
    log = folder / "runs.log"
    env = env_for(folder / "home", log, url, redis_url, "celery")
    if base:  # the daemon and workers import jarvis from that checkout
        env["PYTHONPATH"] = os.pathsep.join([base, env["PYTHONPATH"]])
    runner = ["--runner", "scheduler_support:ScriptRunner"]
    procs = []
    lines: list[str] = []
    try:
        for _ in range(workers):
            w = spawn(env, folder, "worker", "--concurrency", str(concurrency), *runner)
            procs.append(w)
            wait_line(w, "ready.", timeout=180)
        d = spawn(env, folder, "scheduler", "start")
        procs.append(d)
        follow(d, "started on", lines, timeout=180)
        sent_before = lpush_calls(redis_url)
        due = time.time() + 2.0
        with store._tx() as cur:  # due one millisecond apart, in id order
            cur.executemany("UPDATE jarvis_tasks SET next_run = %s WHERE id = %s",
                            [(due + i / 1000, task_id) for i, task_id in enumerate(ids)])
        deadline = time.time() + 900
        while time.time() < deadline:
            done = [r for r in store.list_runs(limit=None) if r.status in ("succeeded", "failed")]
            if len(done) >= runs:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{label}: only {len(done)} of {runs} runs finished")
        sent = lpush_calls(redis_url) - sent_before
    finally:
        stop(procs)
    store.close()
    starts = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    first_start = {}
    for e in starts:
        if e["event"] == "start":
            first_start.setdefault(e["task_id"], e["time"])
    due_rank = {task_id: i for i, task_id in enumerate(ids)}
    started = sorted(first_start, key=first_start.get)
    displacement = [abs(i - due_rank[task_id]) for i, task_id in enumerate(started)]
    lateness = [r.started_at - r.scheduled_for for r in done]
    span = max(r.finished_at for r in done) - due
    resent = sum("is sent again" in line or "sending it again" in line for line in lines)
    return {"workers": workers, "timeout": timeout, "runs": runs, "messages": sent,
            "resent": resent, "runs_per_s": runs / span, "p50": pct(lateness, 0.5),
            "p99": pct(lateness, 0.99), "fifo": statistics.mean(displacement),
            "failed": sum(r.status != "succeeded" for r in done),
            "executed": sum(e["event"] == "start" for e in starts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--work", type=float, default=0.05, help="seconds each run waits")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--workers", default="1,3")
    parser.add_argument("--timeouts", default="8,300")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--base", default="", help="a checkout to run the processes from")
    args = parser.parse_args()
    from servers import start_postgres, start_redis

    work = Path(tempfile.mkdtemp(prefix="jarvis-bench-backlog-"))
    pg = start_postgres(durable=True)
    redis = start_redis()
    configs = [(int(w), float(t)) for w in args.workers.split(",")
               for t in sorted((float(t) for t in args.timeouts.split(",")), reverse=True)]
    measured: dict[tuple[int, float], list[dict]] = {c: [] for c in configs}
    try:
        for repeat in range(args.repeat):
            # Every other round in reverse: a case run right after another pays for the
            # database's work on it (checkpoints with fsync on); no config always goes second.
            for workers, timeout in configs if repeat % 2 == 0 else configs[::-1]:
                r = case(runs=args.runs, workers=workers, timeout=timeout,
                         concurrency=args.concurrency, pg=pg, redis_url=redis.url, work=work,
                         base=args.base, seconds=args.work)
                measured[(workers, timeout)].append(r)
                print(f"  {workers} worker(s), dispatch_timeout {timeout:g} s: {r['messages']} "
                      f"messages, {r['resent']} re-sent, {r['runs_per_s']:.1f} runs/s, p50 "
                      f"{r['p50']:.1f} s, p99 {r['p99']:.1f} s, FIFO {r['fifo']:.1f}, "
                      f"{r['executed']} executions, {r['failed']} failed", file=sys.stderr)
    finally:
        redis.stop()
        pg.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)

    def median(config: tuple[int, float], key: str) -> float:
        return statistics.median(r[key] for r in measured[config])

    print(f"\n{args.runs} runs of {args.work:g} s due at once; {args.concurrency} run(s) at a "
          f"time per worker; medians of {args.repeat}\n")
    print("| workers | dispatch_timeout | messages per run | runs re-sent | runs/s (vs 300 s) "
          "| lateness p50 / p99 (s) | FIFO: mean displacement (runs) |")
    print("|---|---|---|---|---|---|---|")
    for workers, timeout in configs:
        config = (workers, timeout)
        base = (workers, max(t for w, t in configs if w == workers))
        rate = median(config, "runs_per_s")
        print(f"| {workers} | {timeout:g} s | {median(config, 'messages') / args.runs:.3f} | "
              f"{median(config, 'resent'):.0f} | {rate:.1f} ({rate / median(base, 'runs_per_s'):.2f}x)"
              f" | {median(config, 'p50'):.1f} / {median(config, 'p99'):.1f} | "
              f"{median(config, 'fifo'):.1f} |")


if __name__ == "__main__":
    main()
