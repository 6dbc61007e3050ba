"""Support for the scheduler tests: a real TaskRunner driven by the task's prompt, usable in
process and by daemon subprocesses (`--runner scheduler_support:ScriptRunner`, with this folder
on PYTHONPATH), plus helpers to start daemons and wait for observable database state.

Prompts: "echo TEXT" answers TEXT; "fail" raises; "sleep SECONDS" sleeps then answers;
"hang-first SECONDS" sleeps on attempt 1 only (then answers "recovered"); "gate DIR" waits
until the test creates the file DIR/<run id> (then answers "opened"). Every run appends a
JSON line to $SCHED_TEST_LOG when set: what actually ran, independent of the run table.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from logged_process import LoggedProcess
from waiting import wait_for

from jarvis.scheduler.runner import RunOutcome

TESTS = Path(__file__).resolve().parent


def _log(event: str, task: Any, occurrence: Any) -> None:
    path = os.environ.get("SCHED_TEST_LOG")
    if not path:
        return
    line = json.dumps({"event": event, "task_id": task.id, "scheduled_for": occurrence.scheduled_for,
                       "attempt": occurrence.attempt, "run_id": occurrence.id, "pid": os.getpid(),
                       "pidns": pid_namespace(), "time": time.time()}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def pid_namespace() -> int:
    """The inode of this process's PID namespace: tells daemons in containers apart."""
    return os.stat("/proc/self/ns/pid").st_ino


class ScriptRunner:
    """A TaskRunner whose behaviour is the task's prompt (see the module docstring)."""

    def run(self, task: Any, occurrence: Any) -> RunOutcome:
        _log("start", task, occurrence)
        verb, _, rest = task.prompt.partition(" ")
        if verb == "fail":
            raise RuntimeError("boom: the task failed on purpose")
        if verb == "sleep":
            time.sleep(float(rest))
        if verb == "gate":  # held until the test creates DIR/<run id> (at most 60 s)
            gate, deadline = Path(rest) / str(occurrence.id), time.monotonic() + 60
            while not gate.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            rest = "opened" if gate.exists() else "gate timed out"
        if verb == "hang-first" and occurrence.attempt == 1:
            time.sleep(float(rest))
            rest = "woke up"
        elif verb == "hang-first":
            rest = "recovered"
        _log("end", task, occurrence)
        return RunOutcome(success=True, answer=rest or verb, run_log_id=f"log-{occurrence.id}")


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def query(db: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """Read the scheduler database from a separate connection, as another process would."""
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def daemon_env(base: dict[str, str], db: Path, log: Path) -> dict[str, str]:
    env = dict(base)
    env["JARVIS_SCHEDULER_DB"] = str(db)
    env["SCHED_TEST_LOG"] = str(log)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    return env


def start_daemon(env: dict[str, str], *args: str, stderr: Any = subprocess.PIPE) -> subprocess.Popen:
    """`jarvis scheduler start` as a real subprocess with the script runner."""
    return subprocess.Popen(
        [sys.executable, "-m", "jarvis.cli", "scheduler", "start",
         "--runner", "scheduler_support:ScriptRunner", *args],
        env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)


def jarvis(env: dict[str, str], *args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


class Daemon(LoggedProcess):
    """A `jarvis scheduler start` subprocess whose stderr lines are collected as they come."""

    line_timeout = 15.0

    def __init__(self, env: dict[str, str], *args: str, runner: str | None = "scheduler_support:ScriptRunner",
                 cwd: str | None = None, prefix: tuple[str, ...] = ()) -> None:
        # `prefix` wraps the daemon, e.g. in `unshare` (then `pid` is unshare's, not the daemon's).
        command = [*prefix, sys.executable, "-m", "jarvis.cli", "scheduler", "start", *args]
        if runner:
            command += ["--runner", runner]
        super().__init__(subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True), "daemon")

    def stop(self, sig: int | None = None, timeout: float = 15.0) -> int:
        import signal

        # A daemon still starting up (Python and jarvis importing: seconds on a loaded
        # machine) has no signal handler yet: SIGTERM would kill it (-15), not stop it.
        wait_for(lambda: self.proc.poll() is not None
                 or any(" started on " in line for line in list(self.lines)),
                 30, "the daemon to finish starting (or exit)")
        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        finally:
            self.close()
        return code

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait(10)  # reap it: an unreaped child still answers kill(pid, 0)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.close_streams()


def future_at(args: list[str]) -> list[str]:
    """A documented `schedule add` command line with the time after `--at` moved to a year
    from now, in the same shape: the docs and --help show a fixed date (readable), which one
    day is in the past and refused, so the tests that run them would break."""
    import re

    out = list(args)
    for i, arg in enumerate(out[:-1]):
        if arg == "--at":
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", out[i + 1]), out[i + 1]
            when = datetime.now(UTC) + timedelta(days=365)
            out[i + 1] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return out
