"""The inside of a sandbox: runs model-written Python (a script, never imported by jarvis).

Started as `python -I -S /.jarvis/worker.pyc '<config json>'` (its bytecode and confine.py's,
compiled by jarvis once per process: launch.bytecode_folder), inside the namespaces bubblewrap
or `unshare_launcher.py` built (or as a plain child with isolation "none"). Standard library
only, and as little of it as a start needs: the C halves of json (_json) and ast (_ast), no
`signal`, `traceback` only when code fails (each import is time every cold call pays).

Before any user code runs it moves the request/reply pipes to private descriptors and points
fds 0, 1 and 2 at /dev/null, so writing to the real stdout cannot corrupt the protocol; then
confine.py sets its limits, Landlock and seccomp (see there).

"output", "error", "error_kind", "truncated"}, the id first (jarvis reads no further in a frame
that does not begin with its call's id). jarvis accepts one reply per call, only with the
call's id (a fresh random one each call), so code that writes its own frames cannot shift or
fake the result of any other call.
"""


import _ast
import _json
import _signal
import io
import os
import struct
import sys
import time

IN_FD, OUT_FD = 0, 1
MAX_ERROR_CHARS = 4000  # as jarvis's process.MAX_ERROR_CHARS
HERE = sys._getframe(0).f_code.co_filename  # this file's frames, left out of tracebacks


class _Decoding:
    """What _json's scanner asks of json.JSONDecoder (the json package costs a start ~5 ms:
    it imports re)."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int

    @staticmethod
    def parse_constant(name: str) -> float:
        raise ValueError(f"JSON constant {name}")


_scan = _json.make_scanner(_Decoding())
# json.dumps(..., ensure_ascii=False) without the json package: the same C encoder
_encode = _json.make_encoder(None, None, _json.encode_basestring, None, ": ", ", ", False,
                             False, True)


def loads(text: str):
    value, end = _scan(text, 0)
    if text[end:].strip():
        raise ValueError("extra data after the JSON value")
    return value


def dumps(value) -> str:
    return "".join(_encode(value, 0))


class CpuLimitExceeded(BaseException):
    """Raised in the user's code when its CPU-time budget for this call is spent."""


class OutputLimitExceeded(BaseException):
    """Raised in the user's code when it has printed more than the output limit."""


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
    return None if body is None else loads(body.decode("utf-8"))


def send(message: dict) -> None:
    data = dumps(message).encode("utf-8", "replace")
    data = struct.pack(">I", len(data)) + data
    while data:
        written = os.write(OUT_FD, data)
        data = data[written:]


# --- running code ---------------------------------------------------------------------------------
def _on_sigxcpu(signum, frame):  # noqa: ARG001 - signal handler signature
    raise CpuLimitExceeded()


_in_user_code = False


def _on_sigint(signum, frame):  # noqa: ARG001 - signal handler signature
    # jarvis's SIGINT (a call's timeout) interrupts user code only. Raised anywhere else it
    # cut a reply frame between two writes, and the worker died or garbled the protocol.
    if _in_user_code:
        raise KeyboardInterrupt


def _execute(code: str, namespace: dict, writer: BoundedWriter) -> None:
    global _in_user_code
    tree = compile(code, "<repl>", "exec", _ast.PyCF_ONLY_AST)
    last = None
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        last = _ast.Expression(tree.body.pop().value)
    _in_user_code = True
    try:
        exec(compile(tree, "<repl>", "exec"), namespace)
        if last is not None:
            value = eval(compile(last, "<repl>", "eval"), namespace)
            if value is not None:
                namespace["_"] = value
                text = repr(value)
                writer.write(text if text.endswith("\n") else text + "\n")
    finally:
        _in_user_code = False


def run(code: str, namespace: dict, config: dict) -> dict:
    global _in_user_code
    writer = BoundedWriter(int(config["max_output_chars"]))
    error = kind = None
    started = time.monotonic()
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = writer
    try:
        _execute(code, namespace, writer)
    except CpuLimitExceeded:
        kind, error = "cpu", f"CPU time limit exceeded ({config['cpu_seconds']} s); the code was stopped"
    except OutputLimitExceeded:
        kind, error = "output", (f"output limit exceeded ({config['max_output_chars']} characters); "
                                 f"the code was stopped and the output cut")
    except KeyboardInterrupt as exc:
        import traceback

        if time.monotonic() - started < float(config["timeout"]) * 0.9:
            # The code interrupted itself (raise KeyboardInterrupt, SIGINT to itself): not ours.
            kind, error = "exception", "".join(traceback.format_exception_only(type(exc), exc)).strip()
        else:
            kind, error = "timeout", (f"wall-clock timeout ({config['timeout']} s); the code was "
                                      f"interrupted")
    except MemoryError:
        kind, error = "memory", f"MemoryError: memory limit exceeded ({config['memory_mb']} MB)"
    except SyntaxError as exc:
        import traceback

        kind, error = "exception", "".join(traceback.format_exception_only(type(exc), exc)).strip()
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything, SystemExit too
        import traceback

        kind = "exception"
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        # Drop this file's frames: the model only needs the frames of its own code.
        error = "".join(line for line in tb if HERE not in line)[-4000:].strip()
    finally:
        _in_user_code = False  # also when the interrupt came before _execute's try
        sys.stdout, sys.stderr = old_out, old_err
    if error is not None:
        # Every error's last 4000 characters (jarvis's bound on a reply counts on it): a
        # SyntaxError quotes its whole line, up to max_code_chars of the code.
        error = error[-MAX_ERROR_CHARS:]
    return {"ok": error is None, "output": writer.getvalue(), "error": error, "error_kind": kind,
            "truncated": writer.overflow}


# --- site-packages ----------------------------------------------------------------------------
def add_site_dirs(folders: list) -> None:
    """site.addsitedir for each folder, with the `import` lines of its .pth files run at the
    first import nothing else finds, not at the start: they set up import hooks (editable
    installs' finders, setuptools' distutils shim) whose imports cost every cold start 10-40
    ms, for code that rarely needs them. Path lines are added at once, as site does."""
    deferred = []
    for folder in folders:
        if folder not in sys.path:
            sys.path.append(folder)
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".pth")
                           and not n.startswith("."))
        except OSError:
            continue
        for name in names:
            try:
                with open(os.path.join(folder, name), encoding="utf-8-sig") as f:
                    lines = f.read().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            for line in lines:
                if not line.strip() or line.startswith("#"):
                    continue
                if line.startswith(("import ", "import\t")):
                    deferred.append(line)
                    continue
                path = os.path.abspath(os.path.join(folder, line.rstrip()))
                if path not in sys.path and os.path.exists(path):
                    sys.path.append(path)
    if deferred:
        sys.meta_path.append(_DeferredPth(deferred))


class _DeferredPth:
    """The .pth import lines, run when an import first gets past every other finder; the
    finders they install are then asked for that import."""

    def __init__(self, lines: list) -> None:
        self.lines = lines

    def find_spec(self, name, path=None, target=None):
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        before = list(sys.meta_path)
        for line in self.lines:
            try:
                exec(line, {"__name__": "sitecustomize-pth"})  # noqa: S102 - as site does
            except Exception:  # noqa: BLE001, S112 - site reports and goes on
                continue
        for finder in [f for f in sys.meta_path if f not in before]:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find else None
            if spec is not None:
                return spec
        return None


def main() -> None:
    global IN_FD, OUT_FD
    config = loads(sys.argv[1])
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # confine's bytecode
    try:
        import confine
    finally:
        del sys.path[0]  # the code's sys.path is the interpreter's own

    # Die with the parent (jarvis, bwrap's init or our launcher), even while frozen.
    if sys.platform.startswith("linux"):
        confine._libc.prctl(1, _signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if config.get("parent") and os.getppid() != config["parent"]:
            return  # jarvis died before the line above
    # Private copies of the pipes; 0/1/2 go to /dev/null so user code cannot reach them.
    IN_FD, OUT_FD = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for fd in (IN_FD, OUT_FD):
        os.set_inheritable(fd, False)
    try:
        add_site_dirs(config.get("site_dirs", []))
        _signal.signal(_signal.SIGXCPU, _on_sigxcpu)
        _signal.signal(_signal.SIGINT, _on_sigint)
        status = confine.apply_limits(config)
    except OSError as exc:
        send({"ready": False, "error": f"cannot restrict the sandbox: {exc}"})
        return
    send({"ready": True, "pid": os.getpid(), **status})
    namespace: dict = {"__name__": "__main__", "__builtins__": __builtins__}
    while True:
        try:
            request = receive()
        except KeyboardInterrupt:  # a late interrupt while idle
            continue
        if request is None:  # the parent closed the pipe (or died): leave
            return
        call_id = request.get("id")
        try:
            response = run(str(request.get("code", "")), namespace, config)
        except BaseException as exc:  # noqa: BLE001 - never die silently
            response = {"ok": False, "output": "", "error": f"{type(exc).__name__}: {exc}"[-MAX_ERROR_CHARS:],
                        "error_kind": "internal", "truncated": False}
        # The id first: jarvis drops a frame that does not begin with its call's id unread.
        send({"id": call_id, **response})


if __name__ == "__main__":
    main()
