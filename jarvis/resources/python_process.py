"""PythonProcess: a sandboxed Python interpreter in a child process (the REPL resource).

The child (`python_worker.py`) runs with resource limits and a seccomp filter (see its module
docstring). This side sends code, waits for the answer with a wall-clock timeout, interrupts
(SIGINT) and then kills the child's whole process group when the timeout passes, and removes
the child's scratch folder on close. Code never runs in the jarvis process.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jarvis.resources.spec import ResourceSpec

WORKER = Path(__file__).with_name("python_worker.py")
START_TIMEOUT = 15.0
INTERRUPT_GRACE = 1.0
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
# Only these variables reach the child: API keys and the like in our environment stay here.
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "SYSTEMROOT")


@dataclass(slots=True, frozen=True)
class SandboxLimits:
    """Limits of one sandboxed interpreter.

    Args:
        timeout: wall-clock seconds per call; past it the code is interrupted, then killed.
        cpu_seconds: CPU seconds per call (RLIMIT_CPU soft limit, moved per call).
        session_cpu_seconds: CPU seconds for the interpreter's whole life (hard limit).
        memory_mb: address-space limit (RLIMIT_AS).
        max_output_chars: printed characters kept per call; more stops the code.
        max_file_mb: largest file the code may write (RLIMIT_FSIZE).
    """

    timeout: float = 30.0
    cpu_seconds: int = 10
    session_cpu_seconds: int = 600
    memory_mb: int = 512
    max_output_chars: int = 20_000
    max_file_mb: int = 50

    def __post_init__(self) -> None:
        for name in ("timeout", "cpu_seconds", "session_cpu_seconds", "memory_mb",
                     "max_output_chars", "max_file_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"sandbox limit {name} must be positive, got {getattr(self, name)}")


@dataclass(slots=True)
class RunOutcome:
    """What one piece of code did: output, and an error with its kind when it failed.

    error_kind: exception | cpu | memory | output | timeout | crashed | internal.
    """

    ok: bool
    output: str
    error: str | None = None
    error_kind: str | None = None
    truncated: bool = False
    restarted: bool = False
    seconds: float = 0.0


class SandboxError(RuntimeError):
    """The interpreter could not be started or talked to."""


class PythonProcess:
    """One sandboxed interpreter; state (variables, imports) lives until `close()`."""

    def __init__(self, limits: SandboxLimits | None = None, python: str | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.workdir = tempfile.mkdtemp(prefix="jarvis-py-")
        env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
        env.update(HOME=self.workdir, TMPDIR=self.workdir, PYTHONDONTWRITEBYTECODE="1",
                   PYTHONIOENCODING="utf-8")
        config = {**asdict(self.limits)}
        self.calls = 0
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._closed = False
        try:
            self._proc = subprocess.Popen(
                [python or sys.executable, "-I", str(WORKER), json.dumps(config)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                cwd=self.workdir, env=env, start_new_session=True, close_fds=True)
        except OSError as exc:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise SandboxError(f"cannot start a Python process: {exc}") from exc
        try:
            hello = self._read(time.monotonic() + START_TIMEOUT)
        except SandboxError:
            self.close()
            raise
        if not hello or not hello.get("ready"):
            self.close()
            raise SandboxError(f"the Python process did not start properly: {hello!r}")
        self.pid = self._proc.pid
        self.protection = {"seccomp": bool(hello.get("seccomp")), "nproc": bool(hello.get("nproc"))}

    # --- Resource protocol ---------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    def close(self) -> None:
        """Kill the interpreter (and anything it started) and remove its scratch folder."""
        self._closed = True
        proc = self._proc if hasattr(self, "_proc") else None
        if proc is not None:
            self._kill_group()
            for stream in (proc.stdin, proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.workdir, ignore_errors=True)

    # --- running code ----------------------------------------------------------------------
    def run(self, code: str) -> RunOutcome:
        """Run `code` in this interpreter; never raises for what the code does."""
        with self._lock:
            start = time.monotonic()
            if not self.alive:
                return RunOutcome(False, "", "the interpreter is no longer running", "crashed")
            self.calls += 1
            try:
                self._write({"code": code})
                deadline = start + self.limits.timeout
                try:
                    reply = self._read(deadline)
                except TimeoutError:
                    reply = self._interrupt()
            except SandboxError as exc:
                self.close()
                return RunOutcome(False, "", f"the interpreter died: {exc}", "crashed",
                                  restarted=True, seconds=time.monotonic() - start)
            if reply is None:
                self.close()
                return RunOutcome(False, "", f"wall-clock timeout ({self.limits.timeout:g} s): the "
                                  f"code did not stop when interrupted, so the interpreter was "
                                  f"killed and its state is lost", "timeout", restarted=True,
                                  seconds=time.monotonic() - start)
            return RunOutcome(ok=bool(reply.get("ok")), output=str(reply.get("output") or ""),
                              error=reply.get("error"), error_kind=reply.get("error_kind"),
                              truncated=bool(reply.get("truncated")),
                              seconds=time.monotonic() - start)

    def _interrupt(self) -> dict[str, Any] | None:
        """SIGINT first (state survives), then None so the caller kills the process."""
        try:
            os.kill(self._proc.pid, signal.SIGINT)
        except ProcessLookupError:
            return None
        try:
            return self._read(time.monotonic() + INTERRUPT_GRACE)
        except (TimeoutError, SandboxError):
            return None

    def _kill_group(self) -> None:
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self._proc.kill()
        except OSError:
            pass

    def _write(self, message: dict[str, Any]) -> None:
        data = json.dumps(message).encode("utf-8")
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write(struct.pack(">I", len(data)) + data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise SandboxError(f"cannot send code ({exc})") from None

    def _read(self, deadline: float) -> dict[str, Any] | None:
        # A message is consumed only once it is complete: bytes that arrive before a timeout
        # stay buffered, so a late reply is read whole by the next `_read`.
        self._fill(4, deadline)
        size = struct.unpack(">I", self._buffer[:4])[0]
        if size > MAX_RESPONSE_BYTES:
            raise SandboxError(f"reply of {size} bytes is over the {MAX_RESPONSE_BYTES} limit")
        self._fill(4 + size, deadline)
        body = bytes(self._buffer[4:4 + size])
        del self._buffer[:4 + size]
        try:
            return json.loads(body.decode("utf-8", "replace"))
        except ValueError as exc:
            raise SandboxError(f"unreadable reply ({exc})") from None

    def _fill(self, n: int, deadline: float) -> None:
        stream = self._proc.stdout
        assert stream is not None
        fd = stream.fileno()
        while len(self._buffer) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = self._proc.poll()
                reason = f"exit code {code}" if code is not None else "closed its pipe"
                if code is not None and code < 0:
                    reason = f"killed by signal {-code}"
                raise SandboxError(f"the process ended ({reason})")
            self._buffer += chunk

    def __repr__(self) -> str:
        return f"<PythonProcess pid={getattr(self, 'pid', None)} calls={self.calls}>"


def python_spec(kind: str, limits: SandboxLimits, max_size: int) -> ResourceSpec:
    """The ResourceSpec of sandboxed interpreters with these limits (one pool per limits)."""
    return ResourceSpec(kind=kind, factory=lambda: PythonProcess(limits), max_size=max_size,
                        reusable=False, params=tuple(sorted(asdict(limits).items())))
