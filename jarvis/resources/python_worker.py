"""The child side of a sandboxed Python process (run as a script, never imported by jarvis).

Started by `jarvis.resources.python_process.PythonProcess` as
`python -I python_worker.py '<limits json>'`. It uses only the standard library, because `-I`
keeps jarvis (and the user's environment) off its path.

Before any user code runs it:
  - moves the request/response pipes to private descriptors and points fds 0, 1 and 2 at
    /dev/null, so code writing to the real stdout cannot corrupt the protocol;
  - sets resource limits: RLIMIT_AS (memory), RLIMIT_CPU (a session-wide hard cap; the soft
    limit is moved per call so a runaway loop gets SIGXCPU -> an exception and the state
    survives), RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE;
  - blocks new processes and signals to others: a seccomp filter (Linux x86_64 / aarch64)
    makes kill/tgkill of another process, tkill, ptrace, process_vm_readv/writev and
    pidfd_send_signal fail, and fork, vfork, clone
    of a non-thread, clone3 and exec* fail, and makes raising any limit but the CPU one fail;
    RLIMIT_NPROC=0 is the fallback where seccomp is unavailable (it binds non-root users only).

Protocol: 4-byte big-endian length + UTF-8 JSON, one request then one response.
Request {"code": str}. Response {"ok", "output", "error", "error_kind", "truncated"}.
"""

import ast
import ctypes
import errno
import io
import json
import math
import os
import platform
import resource
import signal
import struct
import sys
import time
import traceback

IN_FD, OUT_FD = 0, 1


class CpuLimitExceeded(BaseException):
    """Raised in the user's code when its CPU-time budget for this call is spent."""


class OutputLimitExceeded(BaseException):
    """Raised in the user's code when it has printed more than the output limit."""


# --- seccomp ---------------------------------------------------------------------------------
_ARCHES = {
    # machine: (AUDIT_ARCH, {syscall: number})
    "x86_64": (0xC000003E, {"clone": 56, "fork": 57, "vfork": 58, "execve": 59,
                            "execveat": 322, "clone3": 435, "setrlimit": 160, "prlimit64": 302,
                            "kill": 62, "tkill": 200, "tgkill": 234, "ptrace": 101,
                            "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_send_signal": 424}),
    "aarch64": (0xC00000B7, {"clone": 220, "execve": 221, "execveat": 281, "clone3": 435,
                             "setrlimit": 164, "prlimit64": 261, "kill": 129, "tkill": 130,
                             "tgkill": 131, "ptrace": 117, "process_vm_readv": 270,
                             "process_vm_writev": 271,
                             "pidfd_send_signal": 424}),
}
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_CLONE_THREAD = 0x00010000


def _errno_ret(code: int) -> int:
    return 0x00050000 | code


def _seccomp_program() -> list[tuple[int, int, int, int]] | None:
    arch = _ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit_arch, nr = arch
    eperm, eagain, enosys = (_errno_ret(errno.EPERM), _errno_ret(errno.EAGAIN),
                             _errno_ret(errno.ENOSYS))
    # (code, jt, jf, k); jumps are relative. Labels resolved by hand below.
    prog: list[tuple[int, int, int, int]] = []

    def emit(code: int, jt: int, jf: int, k: int) -> None:
        prog.append((code, jt, jf, k))

    emit(_LD_W_ABS, 0, 0, 4)                       # A = arch
    emit(_JEQ, 1, 0, audit_arch)                    # native arch? skip the deny
    emit(_RET, 0, 0, eperm)                         # foreign ABI (e.g. int 0x80): deny all
    emit(_LD_W_ABS, 0, 0, 0)                        # A = syscall number
    emit(_JGE, 0, 1, 0x40000000)                    # x32 ABI numbers: deny
    emit(_RET, 0, 0, eperm)
    for name in ("fork", "vfork", "execve", "execveat", "tkill", "ptrace", "process_vm_readv",
                 "process_vm_writev", "pidfd_send_signal"):
        if name in nr:
            code = eagain if name in ("fork", "vfork") else eperm
            emit(_JEQ, 0, 1, nr[name])
            emit(_RET, 0, 0, code)
    # Signals only to itself: without this the code could kill jarvis (its parent) or any
    # other process of the same user. kill(pid) may name this process (pid), its own group
    # (0 or -pid; the worker leads its own session); tgkill(tgid, ...) only this process.
    me = os.getpid()
    emit(_JEQ, 0, 6, nr["kill"])
    emit(_LD_W_ABS, 0, 0, 16)                       # A = low word of args[0] (pid)
    emit(_JEQ, 3, 0, me)
    emit(_JEQ, 2, 0, 0)
    emit(_JEQ, 1, 0, (-me) & 0xFFFFFFFF)
    emit(_RET, 0, 0, eperm)
    emit(_RET, 0, 0, _ALLOW)
    emit(_JEQ, 0, 4, nr["tgkill"])
    emit(_LD_W_ABS, 0, 0, 16)                       # A = low word of args[0] (tgid)
    emit(_JEQ, 1, 0, me)
    emit(_RET, 0, 0, eperm)
    emit(_RET, 0, 0, _ALLOW)
    emit(_LD_W_ABS, 0, 0, 0)                        # A = syscall number again
    emit(_JEQ, 0, 1, nr["clone3"])                  # glibc falls back to clone on ENOSYS
    emit(_RET, 0, 0, enosys)
    emit(_JEQ, 0, 4, nr["clone"])
    emit(_LD_W_ABS, 0, 0, 16)                       # A = low word of args[0] (clone flags)
    emit(_JSET, 1, 0, _CLONE_THREAD)                # a thread: allow
    emit(_RET, 0, 0, eagain)                        # a new process: deny
    emit(_RET, 0, 0, _ALLOW)
    emit(_JEQ, 0, 1, nr["setrlimit"])               # the worker itself uses prlimit64
    emit(_RET, 0, 0, eperm)
    emit(_JEQ, 0, 9, nr["prlimit64"])
    emit(_LD_W_ABS, 0, 0, 32)                       # args[2] (new limit pointer), low word
    emit(_JEQ, 0, 3, 0)
    emit(_LD_W_ABS, 0, 0, 36)                       # high word
    emit(_JEQ, 0, 1, 0)
    emit(_RET, 0, 0, _ALLOW)                        # reading limits is fine
    emit(_LD_W_ABS, 0, 0, 24)                       # args[1]: which limit
    emit(_JEQ, 0, 1, resource.RLIMIT_CPU)           # the per-call CPU budget moves
    emit(_RET, 0, 0, _ALLOW)
    emit(_RET, 0, 0, eperm)                         # raising memory, file, ... limits: denied
    emit(_RET, 0, 0, _ALLOW)
    return prog


def install_seccomp() -> bool:
    """Install the filter; False where the platform does not support it."""
    prog = _seccomp_program()
    if prog is None or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    filters = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), filters)
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if libc.prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        return False
    return libc.prctl(pr_set_seccomp, seccomp_mode_filter, ctypes.byref(fprog), 0, 0) == 0


# --- limits ----------------------------------------------------------------------------------
def _set(limit: int, soft: int, hard: int | None = None) -> None:
    try:
        resource.setrlimit(limit, (soft, soft if hard is None else hard))
    except (ValueError, OSError):
        pass


def apply_limits(limits: dict) -> dict:
    memory = int(limits["memory_mb"]) * 1024 * 1024
    _set(resource.RLIMIT_AS, memory)
    _set(resource.RLIMIT_CORE, 0)
    _set(resource.RLIMIT_FSIZE, int(limits["max_file_mb"]) * 1024 * 1024)
    _set(resource.RLIMIT_NOFILE, 256)
    session_cpu = int(limits["session_cpu_seconds"])
    _set(resource.RLIMIT_CPU, session_cpu, session_cpu)
    sandboxed = install_seccomp() if limits.get("seccomp", True) else False
    if not sandboxed:
        # Binds only non-root users; the status says which protection is in force.
        _set(resource.RLIMIT_NPROC, 0)
    return {"seccomp": sandboxed, "nproc": not sandboxed and os.geteuid() != 0}


def cpu_used() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- output capture ----------------------------------------------------------------------------
class BoundedWriter(io.TextIOBase):
    """stdout/stderr for user code: keeps the first `limit` characters, then stops the code."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0
        self.overflow = False

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        room = self.limit - self.size
        if len(text) > room:
            self.parts.append(text[:max(room, 0)])
            self.size = self.limit
            self.overflow = True
            raise OutputLimitExceeded()
        self.parts.append(text)
        self.size += len(text)
        return len(text)

    def getvalue(self) -> str:
        return "".join(self.parts)


# --- protocol -----------------------------------------------------------------------------------
def read_exact(n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = os.read(IN_FD, n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def receive() -> dict | None:
    header = read_exact(4)
    if header is None:
        return None
    body = read_exact(struct.unpack(">I", header)[0])
    return None if body is None else json.loads(body.decode("utf-8"))


def send(message: dict) -> None:
    data = json.dumps(message, ensure_ascii=False).encode("utf-8", "replace")
    data = struct.pack(">I", len(data)) + data
    while data:
        written = os.write(OUT_FD, data)
        data = data[written:]


# --- running code ---------------------------------------------------------------------------------
def _on_sigxcpu(signum, frame):  # noqa: ARG001 - signal handler signature
    raise CpuLimitExceeded()


def run(code: str, namespace: dict, limits: dict) -> dict:
    writer = BoundedWriter(int(limits["max_output_chars"]))
    used = cpu_used()
    hard = int(limits["session_cpu_seconds"])
    if used + 1 >= hard:
        return {"ok": False, "output": "", "error": f"this interpreter has used its total CPU "
                f"budget of {hard} s; start a new run", "error_kind": "cpu", "truncated": False}
    soft = min(hard, math.ceil(used + int(limits["cpu_seconds"])))
    _set(resource.RLIMIT_CPU, soft, hard)
    error = kind = None
    started = time.monotonic()
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = writer
    try:
        tree = ast.parse(code, filename="<repl>", mode="exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<repl>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<repl>", "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                text = repr(value)
                writer.write(text if text.endswith("\n") else text + "\n")
    except CpuLimitExceeded:
        kind, error = "cpu", f"CPU time limit exceeded ({limits['cpu_seconds']} s); the code was stopped"
    except OutputLimitExceeded:
        kind, error = "output", (f"output limit exceeded ({limits['max_output_chars']} characters); "
                                 f"the code was stopped and the output cut")
    except KeyboardInterrupt as exc:
        if time.monotonic() - started < float(limits["timeout"]) * 0.9:
            # The code interrupted itself (raise KeyboardInterrupt, SIGINT to itself): not ours.
            kind, error = "exception", "".join(traceback.format_exception_only(type(exc), exc)).strip()
        else:
            kind, error = "timeout", (f"wall-clock timeout ({limits['timeout']} s); the code was "
                                      f"interrupted")
    except MemoryError:
        kind, error = "memory", f"MemoryError: memory limit exceeded ({limits['memory_mb']} MB)"
    except SyntaxError as exc:
        kind, error = "exception", "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit too
        kind = "exception"
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        # Drop this file's frames: the model only needs the frames of its own code.
        error = "".join(line for line in tb if __file__ not in line)[-4000:].strip()
    finally:
        sys.stdout, sys.stderr = old_out, old_err
        _set(resource.RLIMIT_CPU, hard, hard)
    return {"ok": error is None, "output": writer.getvalue(), "error": error, "error_kind": kind,
            "truncated": writer.overflow}


def main() -> None:
    global IN_FD, OUT_FD
    limits = json.loads(sys.argv[1])
    # Private copies of the pipes; 0/1/2 go to /dev/null so user code cannot reach them.
    IN_FD, OUT_FD = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for fd in (IN_FD, OUT_FD):
        os.set_inheritable(fd, False)
    signal.signal(signal.SIGXCPU, _on_sigxcpu)
    status = apply_limits(limits)
    send({"ready": True, "pid": os.getpid(), **status})
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        try:
            request = receive()
        except KeyboardInterrupt:  # a late interrupt while idle
            continue
        if request is None:  # the parent closed the pipe (or died): leave
            return
        try:
            response = run(str(request.get("code", "")), namespace, limits)
        except BaseException as exc:  # noqa: BLE001 - never die silently
            response = {"ok": False, "output": "", "error": f"{type(exc).__name__}: {exc}",
                        "error_kind": "internal", "truncated": False}
        try:
            send(response)
        except KeyboardInterrupt:
            send(response)


if __name__ == "__main__":
    main()
