"""SandboxedPython: one interpreter in its own sandbox, driven from jarvis (the supervisor).

Start: the mechanism's command line (see launch.py) with two pipes (code in, replies out); the
worker restricts itself and says it is ready. Each call: thaw the interpreter (SIGCONT), move its
CPU soft limit to "used so far + the per-call budget" from outside (prlimit on the process: all
its threads count), send the code with a fresh random call id, and accept exactly one reply,
the one carrying that id. Past the wall-clock timeout the code gets SIGINT, then the whole
sandbox is killed. Between calls the interpreter is frozen (SIGSTOP), so nothing it started can
run or burn CPU until the next call. `close()` kills the sandbox's PID namespace by killing its
init: every process and thread in it is gone when close returns.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

from jarvis.sandbox import cgroup
from jarvis.sandbox.policy import SandboxLimits, SandboxPolicy
from jarvis.sandbox.supervise import (  # noqa: F401 - _prlimit_as_owner: tests reach it here
    _joining,
    _prlimit_as_owner,
    _running,
    _wait_for,
    children_of,
    cpu_seconds_of,
    protect_jarvis,
    spawn,
    stat_cpu_seconds,
    wait_exit,
)

START_TIMEOUT = 15.0
INTERRUPT_GRACE = 1.0
# jarvis checks the sandbox's CPU this often during a call, and kills it when code that
# ignores SIGXCPU is this far over its budget.
CPU_POLL = 0.25
CPU_GRACE = 2.0
# CPU a frozen interpreter may still use: the SIGSTOP lands a moment after it is sent (clock
# ticks are 10 ms). More means something resumed it between calls (see SandboxedPython._thaw).
FROZEN_CPU_SLACK = 0.1
# The largest honest reply: JSON spends up to 6 bytes on a character ("\u0001"), so a big
# max_output_chars of control characters went past a fixed 8 MB and the interpreter was
# killed. No more than that either: json.loads makes ~30 times a frame's size of Python
# objects ("[[],[],...": 8 MB of it took 170 MB of jarvis's memory), so a frame's bound is
# what the limits let an honest reply hold (~210 KB for the default 20 000 characters).
JSON_BYTES_PER_CHAR = 6
REPLY_OVERHEAD_BYTES = 64 * 1024
MAX_ERROR_CHARS = 4000  # the worker keeps a traceback's last 4000 characters too
# Once a prlimit of a sandbox was refused (a root jarvis without CAP_SYS_RESOURCE), every
# sandbox's goes through its owner's uid (_prlimit_as_owner) from then on.
_owner_prlimit = [False]


@dataclass(slots=True)
class RunOutcome:
    """What one piece of code did: output, and an error with its kind when it failed.

    error_kind: exception | cpu | memory | output | timeout | disk | crashed | internal.
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


class _CpuOverrun(Exception):
    """The code kept running past its CPU budget (it ignored SIGXCPU)."""


class _FilesOverrun(Exception):
    """The work folder holds more files than its limit (bubblewrap's tmpfs has no nr_inodes)."""


_NOTHING = object()  # no frame arrived before the next check
_STALE = object()    # a frame for another call (or none), dropped unread


class SandboxedPython:
    """One sandboxed interpreter; state (variables, imports) lives until `close()`."""

    def __init__(self, policy: SandboxPolicy | None = None, mechanism: str | None = None,
                 *, freeze_between_calls: bool = True) -> None:
        from jarvis.sandbox import launch, probe

        self.policy = policy or SandboxPolicy()
        self.limits: SandboxLimits = self.policy.limits
        self.mechanism = mechanism or probe.resolve(self.policy.isolation)
        self.freeze_between_calls = freeze_between_calls
        self.calls = 0
        self.init_pid: int | None = None  # the sandbox's PID-namespace init (host pid)
        self.pid = 0                      # the worker (host pid)
        self.workdir: str | None = None
        self._buffer = bytearray()
        self._lock = threading.Lock()
        self._closed = False
        self._frozen = False
        self._cpu_at_freeze: float | None = None
        self.stale_replies = 0
        # The CPU soft limit in force: the worker starts with cpu_seconds + 1 (what the
        # first call's "used + cpu_seconds, rounded up" is), and jarvis sets it only when
        # a call needs another value.
        self._soft = min(self.limits.session_cpu_seconds, self.limits.cpu_seconds + 1)
        self._stat_fd = self._tmp_fd = -1  # /proc/<worker>/stat, the work folder
        self.after_close: Any = None  # called once, when close() is done (spares.py)
        self._max_reply = JSON_BYTES_PER_CHAR * (
            self.limits.max_output_chars + MAX_ERROR_CHARS) + REPLY_OVERHEAD_BYTES
        protect_jarvis()
        info_r, info_w = os.pipe() if self.mechanism != "none" else (-1, -1)
        env: dict[str, str] | None = {}
        # bwrap or jarvis's launcher runs outside the sandbox as its host uid: started in
        # jarvis's working folder, it let any process of that uid read the project's files
        # (.env) through /proc/<pid>/cwd, past a parent folder only root may pass through.
        cwd: str | None = "/"
        preexec = None
        try:
            if self.mechanism == "bwrap":
                bwrap = probe.find_bwrap() or "bwrap"
                argv, env = launch.bwrap_command(self.policy, bwrap, info_w)
                preexec = launch.bwrap_preexec(self.policy, bwrap)
            elif self.mechanism == "namespaces":
                argv, env = launch.namespaces_command(self.policy, sys.executable, info_w)
            else:
                self.workdir = cwd = tempfile.mkdtemp(prefix="jarvis-py-")
                argv, env = launch.plain_command(self.policy, self.workdir)
        except launch.PathProblem as exc:  # a configured path missing or too wide: say so
            for fd in (info_r, info_w):
                if fd >= 0:
                    os.close(fd)
            self._remove_workdir()
            raise SandboxError(str(exc)) from None
        self._cgroup = None
        if self.mechanism != "none":
            try:
                self._cgroup = cgroup.for_sandbox(self.limits.memory_mb, self.limits.tmp_mb,
                                                  self.limits.max_threads)
            except OSError as exc:
                os.close(info_r)
                os.close(info_w)
                raise SandboxError(f"cannot make the sandbox's cgroup: {exc}") from None
            if self._cgroup is not None:
                preexec = _joining(self._cgroup, preexec)
        try:
            self._proc = spawn(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, cwd=cwd, start_new_session=True, close_fds=True,
                pass_fds=(info_w,) if info_w >= 0 else (), preexec_fn=preexec)
        except (OSError, subprocess.SubprocessError) as exc:
            for fd in (info_r, info_w):
                if fd >= 0:
                    os.close(fd)
            self._remove_workdir()
            if self._cgroup is not None:
                self._cgroup.remove()
            raise SandboxError(f"cannot start a sandboxed Python process: {exc}") from exc
        if info_w >= 0:
            os.close(info_w)
        try:
            if info_r >= 0:
                self.init_pid = self._read_info(info_r, time.monotonic() + START_TIMEOUT)
            hello = self._read(time.monotonic() + START_TIMEOUT)
        except (SandboxError, TimeoutError) as exc:
            detail = self._stderr_tail()
            self.close()
            raise SandboxError(f"the sandbox did not start ({exc or 'timeout'})"
                               + (f": {detail}" if detail else "")) from None
        finally:
            if info_r >= 0:
                os.close(info_r)
        if not hello or not hello.get("ready"):
            self.close()
            raise SandboxError(f"the sandbox did not start properly: "
                               f"{(hello or {}).get('error') or hello!r}")
        if self.mechanism != "none" and not hello.get("max_threads"):
            self.close()
            raise SandboxError(probe.UNBOUNDED.format(uid=self.policy.uid))
        self.pid = self._worker_pid()
        # Opened once, read each call (pread, fstatvfs): no path lookups through /proc per
        # call. Both stay bound to this worker: once it is gone they fail, never read
        # another process that got its pid.
        try:
            self._stat_fd = os.open(f"/proc/{self.pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass
        # Files in the work folder, counted from outside (see launch.TMP_BYTES_PER_FILE).
        self.max_tmp_files = launch.tmp_files(self.policy)
        self._tmp_root = (f"/proc/{self.pid}/root{launch.WORK_DIR}"
                          if self.mechanism in ("bwrap", "namespaces") else None)
        if self._tmp_root:
            try:  # before any code ran: nothing of the code's can stand in its place
                self._tmp_fd = os.open(self._tmp_root, os.O_RDONLY | os.O_DIRECTORY
                                       | os.O_CLOEXEC)
            except OSError:
                pass
        assert self._proc.stdin is not None and self._proc.stdout is not None
        os.set_blocking(self._proc.stdin.fileno(), False)
        self.protection = {"mechanism": self.mechanism, "seccomp": bool(hello.get("seccomp")),
                           "landlock": int(hello.get("landlock") or 0),
                           "max_threads": int(hello.get("max_threads") or 0)}
        if self._proc.stderr is not None:
            self._proc.stderr.close()  # the launcher's errors only matter at start-up
        self._freeze()

    # --- start-up helpers -------------------------------------------------------------------
    def _read_info(self, fd: int, deadline: float) -> int:
        """The host pid of the sandbox's init, from bwrap's --info-fd (or our launcher's)."""
        data = b""
        while b"}" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not _wait_for(fd, select.POLLIN, deadline):
                raise TimeoutError("no sandbox info")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise SandboxError("the launcher exited before the sandbox started")
            data += chunk
        return int(json.loads(data[:data.index(b"}") + 1])["child-pid"])

    def _worker_pid(self) -> int:
        if self.mechanism == "bwrap" and self.init_pid:
            kids = children_of(self.init_pid)
            if kids:
                return kids[0]  # the reaper's only child: the worker (it cannot fork)
        if self.mechanism == "namespaces" and self.init_pid:
            return self.init_pid  # the worker is the namespace's init itself
        return self._proc.pid

    def _stderr_tail(self) -> str:
        stream = getattr(self, "_proc", None) and self._proc.stderr
        if not stream:
            return ""
        try:
            self._proc.wait(timeout=1)  # a sandbox that failed to start exits by itself
            text = stream.read(4000).decode("utf-8", "replace")
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return ""
        return " ".join(text.split())[-300:]

    # --- Resource protocol ---------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return not self._closed and self._proc.poll() is None

    def close(self) -> None:
        """Kill the sandbox (every process and thread in it) and remove its work folder.
        Synchronous: when it returns, no process of the sandbox is left."""
        self._closed = True
        proc = getattr(self, "_proc", None)
        if proc is not None:
            self._kill_all(proc)
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                try:
                    if stream is not None:
                        stream.close()
                except OSError:
                    pass
        for name in ("_stat_fd", "_tmp_fd"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)
        if getattr(self, "_cgroup", None) is not None:
            self._cgroup.remove()
            self._cgroup = None
        self._remove_workdir()
        then, self.after_close = getattr(self, "after_close", None), None
        if then is not None:
            then()

    def _remove_workdir(self) -> None:
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _kill_all(self, proc: subprocess.Popen) -> None:
        # Killing a PID namespace's init makes the kernel kill everything in the namespace;
        # the launcher (bwrap or ours) reaps it and exits, so waiting for the launcher waits
        # for the whole sandbox. Only a launcher that does not exit is killed itself.
        # Once the launcher is reaped, the init and the worker are gone too, and their pids
        # are free for any process of the host (pid_max can be 32768): never signal them then.
        if proc.poll() is not None:
            return
        first = self.init_pid or self.pid or proc.pid
        try:
            os.kill(first, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if not wait_exit(proc, 3):
            for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
                try:
                    kill()
                except OSError:
                    pass
            wait_exit(proc, 5)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
                _running(p) for p in (self.pid, self.init_pid) if p):
            time.sleep(0.005)

    # --- freezing and CPU budget ------------------------------------------------------------
    def _freeze(self) -> None:
        if self.freeze_between_calls and not self._frozen and self.alive:
            try:
                os.kill(self.pid, signal.SIGSTOP)
                self._frozen = True
            except ProcessLookupError:
                return
            self._cpu_at_freeze = self._cpu()  # None: unknown, no check at the next call

    def ran_while_frozen(self, now: float | None = None) -> float:
        """CPU seconds the interpreter used since it was frozen, past the slack (0: none).
        The seccomp filter refuses the ways we know to make the kernel send it SIGCONT
        later (POSIX timers, F_SETSIG, message queue notifications); this catches any other,
        at the next call. `now`: its CPU now, if the caller has just read it."""
        if not self._frozen or self._cpu_at_freeze is None:
            return 0.0
        now = self._cpu() if now is None else now
        if now is None:
            return 0.0
        extra = now - self._cpu_at_freeze
        return extra if extra > FROZEN_CPU_SLACK else 0.0

    def _thaw(self) -> None:
        if self._frozen and self.alive:
            try:
                os.kill(self.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self._frozen = False

    def tmp_files_used(self) -> int | None:
        """Files (inodes) in the sandbox's work folder now, with the KiB its extended attributes
        take (tmpfs counts both in one space); None if it cannot be seen."""
        if not self._tmp_root:
            return None
        try:
            st = os.fstatvfs(self._tmp_fd) if self._tmp_fd >= 0 else os.statvfs(self._tmp_root)
        except OSError:
            return None
        return st.f_files - st.f_ffree

    def _check(self, cpu_limit: float) -> None:
        if self.cpu_used() > cpu_limit:
            raise _CpuOverrun
        used = self.tmp_files_used()
        if used is not None and used > self.max_tmp_files:
            raise _FilesOverrun(used)

    def _cpu(self) -> float | None:
        """User + system CPU of the interpreter, all its threads (None: cannot be read)."""
        try:
            if self._stat_fd >= 0:
                return stat_cpu_seconds(os.pread(self._stat_fd, 1024, 0))
            return cpu_seconds_of(self.pid)
        except (OSError, ValueError, IndexError):
            return None

    @property
    def _owner_prlimit(self) -> bool:
        """Whether CPU limits go through the sandbox uid (see _prlimit_as_owner)."""
        return _owner_prlimit[0]

    def cpu_used(self) -> float:
        used = self._cpu()
        return 0.0 if used is None else used

    def _set_cpu_budget(self, used: float | None = None, *, force: bool = False) -> str | None:
        """Move the CPU soft limit to used + budget (rounded up; not when it is there
        already, unless `force`); None, or why no call may run."""
        import resource

        hard = self.limits.session_cpu_seconds
        used = self.cpu_used() if used is None else used
        if used + 1 >= hard:
            return (f"this interpreter has used its total CPU budget of {hard} s; start a new "
                    f"run")
        soft = min(hard, math.ceil(used + self.limits.cpu_seconds))
        if soft == self._soft and not force:
            return None
        try:
            if _owner_prlimit[0]:
                _prlimit_as_owner(self.pid, self.policy.uid, (soft, hard))
            else:
                try:
                    resource.prlimit(self.pid, resource.RLIMIT_CPU, (soft, hard))
                except PermissionError:
                    if os.geteuid() != 0:
                        raise
                    _owner_prlimit[0] = True
                    _prlimit_as_owner(self.pid, self.policy.uid, (soft, hard))
        except (OSError, ValueError) as exc:
            return f"cannot set the CPU limit ({exc})"
        self._soft = soft
        return None

    # --- running code ----------------------------------------------------------------------
    def run(self, code: str) -> RunOutcome:
        """Run `code` in this interpreter; never raises for what the code does."""
        with self._lock:
            start = time.monotonic()
            if not self.alive:
                return RunOutcome(False, "", "the interpreter is no longer running", "crashed")
            self.calls += 1
            now = self.cpu_used()  # one read serves the three checks below
            ran = self.ran_while_frozen(now)
            if ran:
                self.close()
                return RunOutcome(False, "", f"the interpreter ran while it was frozen between "
                                  f"calls ({ran:.2f} s of CPU: something resumed it); it was "
                                  f"killed and its state is lost", "cpu", restarted=True,
                                  seconds=time.monotonic() - start)
            problem = self._set_cpu_budget(now)
            if problem:
                return RunOutcome(False, "", problem, "cpu", seconds=time.monotonic() - start)
            call_id = secrets.token_hex(16)
            cpu_limit = now + self.limits.cpu_seconds + CPU_GRACE
            try:
                self._thaw()
                deadline = start + self.limits.timeout
                try:
                    self._write({"id": call_id, "code": code}, deadline)
                except TimeoutError:
                    self.close()
                    return RunOutcome(False, "", f"wall-clock timeout ({self.limits.timeout:g} s):"
                                      f" the interpreter did not take the code (it stopped "
                                      f"reading its requests); it was killed and its state is "
                                      f"lost", "timeout", restarted=True,
                                      seconds=time.monotonic() - start)
                try:
                    reply = self._reply(call_id, deadline, cpu_limit)
                except TimeoutError:
                    reply = self._interrupt(call_id)
            except _FilesOverrun as exc:
                return self._too_many_files(exc.args[0], start)
            except _CpuOverrun:
                self.close()
                return RunOutcome(False, "", f"CPU time limit exceeded ({self.limits.cpu_seconds}"
                                  f" s) by code that ignored the signal; the interpreter was "
                                  f"killed and its state is lost", "cpu", restarted=True,
                                  seconds=time.monotonic() - start)
            except SandboxError as exc:
                self.close()
                return RunOutcome(False, "", f"the interpreter died: {exc}", "crashed",
                                  restarted=True, seconds=time.monotonic() - start)
            if reply is None:
                self.close()
                return RunOutcome(False, "", f"wall-clock timeout ({self.limits.timeout:g} s): "
                                  f"the code did not stop when interrupted, so the interpreter "
                                  f"was killed and its state is lost", "timeout", restarted=True,
                                  seconds=time.monotonic() - start)
            used = self.tmp_files_used()
            if used is not None and used > self.max_tmp_files:
                return self._too_many_files(used, start)
            self._freeze()
            kind = reply.get("error_kind")
            if kind not in (None, "exception", "cpu", "memory", "output", "timeout", "internal"):
                kind = "exception"
            # The code can read this call's id from the worker's frames and send a reply of
            # its own: what the reply says is the code's word, so jarvis bounds it again.
            output = str(reply.get("output") or "")
            cut = len(output) > self.limits.max_output_chars
            error = None if reply.get("ok") else str(reply.get("error"))[-MAX_ERROR_CHARS:]
            return RunOutcome(ok=bool(reply.get("ok")),
                              output=output[:self.limits.max_output_chars], error=error,
                              error_kind=None if reply.get("ok") else kind,
                              truncated=bool(reply.get("truncated")) or cut,
                              seconds=time.monotonic() - start)

    def _too_many_files(self, used: int, start: float) -> RunOutcome:
        self.close()
        # tmpfs counts extended attributes in the same space, a slot per KiB (BOGO_INODE_SIZE)
        return RunOutcome(False, "", f"the work folder holds over its limit of "
                          f"{self.max_tmp_files} files ({used}; extended attributes count too, "
                          f"one per KiB); the interpreter was killed and its state is lost",
                          "disk", restarted=True, seconds=time.monotonic() - start)

    def _reply(self, call_id: str, deadline: float,
               cpu_limit: float | None = None) -> dict[str, Any]:
        """The reply of this call: frames with any other id (forged by the code, or late
        replies of a call that timed out) are dropped. With `cpu_limit`, the sandbox's CPU
        (all threads) and its work folder's files are checked every CPU_POLL seconds, also
        while frames keep arriving (_CpuOverrun, _FilesOverrun past their limits)."""
        next_check = time.monotonic() + CPU_POLL
        while True:
            if cpu_limit is None:
                message = self._read(deadline, call_id)
            else:
                try:
                    message = self._read(min(deadline, next_check), call_id)
                except TimeoutError:
                    message = _NOTHING
                if message is _NOTHING or time.monotonic() >= next_check:
                    self._check(cpu_limit)
                    next_check = time.monotonic() + CPU_POLL
                if message is _NOTHING:
                    if time.monotonic() >= deadline:
                        raise TimeoutError
                    continue
            if isinstance(message, dict) and message.get("id") == call_id:
                return message
            self.stale_replies += 1

    def _interrupt(self, call_id: str) -> dict[str, Any] | None:
        """SIGINT first (state survives), then None so the caller kills the sandbox."""
        if not self.alive:  # its pid may belong to another process now
            return None
        try:
            os.kill(self.pid, signal.SIGINT)
        except ProcessLookupError:
            return None
        try:
            return self._reply(call_id, time.monotonic() + INTERRUPT_GRACE)
        except (TimeoutError, SandboxError):
            return None

    def _write(self, message: dict[str, Any], deadline: float) -> None:
        """Send a request by `deadline` (TimeoutError past it). Non-blocking: code that
        replaced the worker's reading loop (sys.modules['__main__'].receive) left a request
        bigger than the pipe's 64 KiB half-written, and jarvis blocked in write() with the
        interpreter's lock held, past every timeout, until the run ended."""
        data = json.dumps(message).encode("utf-8")
        view = memoryview(struct.pack(">I", len(data)) + data)
        try:
            assert self._proc.stdin is not None
            fd = self._proc.stdin.fileno()
            if os.get_blocking(fd):
                os.set_blocking(fd, False)
            while view:
                if not _wait_for(fd, select.POLLOUT, deadline):
                    raise TimeoutError
                try:
                    view = view[os.write(fd, view):]
                except BlockingIOError:
                    continue
        except TimeoutError:  # an OSError too, but not a dead interpreter
            raise
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise SandboxError(f"cannot send code ({exc})") from None

    def _read(self, deadline: float, call_id: str | None = None) -> Any:
        """The next frame, parsed; with `call_id`, a frame that does not begin with that id
        (the worker writes it first) is _STALE, dropped without parsing: a thread flooding
        the pipe with big frames cost jarvis a JSON parse (CPU and memory) for each."""
        # A message is consumed only once it is complete: bytes that arrive before a timeout
        # stay buffered, so a late reply is read whole (and dropped by its id) later.
        self._fill(4, deadline)
        size = struct.unpack(">I", self._buffer[:4])[0]
        if size > self._max_reply:
            raise SandboxError(f"reply of {size} bytes is over the {self._max_reply} limit")
        self._fill(4 + size, deadline)
        body = bytes(self._buffer[4:4 + size])
        del self._buffer[:4 + size]
        if call_id is not None and not body.startswith(b'{"id": "%s"' % call_id.encode()):
            return _STALE
        try:
            return json.loads(body.decode("utf-8", "replace"))
        except (ValueError, RecursionError) as exc:  # [[[[... nested past the C stack guard
            raise SandboxError(f"unreadable reply ({exc})") from None

    def _fill(self, n: int, deadline: float) -> None:
        stream = self._proc.stdout
        assert stream is not None
        fd = stream.fileno()
        while len(self._buffer) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if not _wait_for(fd, select.POLLIN, deadline):
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
        return f"<SandboxedPython {self.mechanism} pid={self.pid} calls={self.calls}>"
