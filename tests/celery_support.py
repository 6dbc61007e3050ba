"""Support for the scale-out tests: `jarvis worker` and `jarvis scheduler start` subprocesses on
a PostgreSQL ledger and a Redis broker, and reading the ledger as another machine would."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from logged_process import LoggedProcess
from scheduler_support import TESTS


def scaleout_env(base: dict[str, str], pg_url: str, broker: str, log: Path) -> dict[str, str]:
    """Environment for daemons and workers sharing one ledger and broker."""
    env = dict(base)
    env["JARVIS_SCHEDULER_STORE"] = pg_url
    env["JARVIS_SCHEDULER_RUNNER"] = "celery"
    env["JARVIS_CELERY_BROKER"] = broker
    env["SCHED_TEST_LOG"] = str(log)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH", "")) if p)
    return env


class Proc(LoggedProcess):
    """A jarvis subprocess in its own process group, its stderr lines collected as they come."""

    def __init__(self, env: dict[str, str], *args: str, cwd: str | None = None) -> None:
        self.args = args
        super().__init__(subprocess.Popen(
            [sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True), " ".join(args))

    def kill9(self) -> None:
        """SIGKILL the whole process group (a worker and its pool processes): a lost machine."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        code = self.proc.returncode
        self.close()
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.kill9()
        else:  # the group may outlive its leader (pool processes)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.close_streams()


def worker(env: dict[str, str], *args: str, cwd: str | None = None) -> Proc:
    w = Proc(env, "worker", *args, cwd=cwd)
    w.wait_for_line("ready.")  # Celery's own line once it consumes
    return w


def daemon(env: dict[str, str], *args: str, cwd: str | None = None) -> Proc:
    d = Proc(env, "scheduler", "start", *args, cwd=cwd)
    d.wait_for_line("started on")
    return d


def pg_rows(url: str, sql: str, params: tuple = ()) -> list[tuple[Any, ...]]:
    """Read the ledger over a separate connection, as another machine would."""
    import psycopg

    with contextlib.closing(psycopg.connect(url, autocommit=True)) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []
