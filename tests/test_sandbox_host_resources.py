"""The code sandbox and what it shares with the host's kernel (issue 23).

The sandbox held as a boundary of files, network and processes; what broke was the rest of the
host: kernel resources counted per host or per uid instead of per sandbox, locks and leases on
files the host opens too, kernel memory RLIMIT_AS does not count, a terminal that resumed a
frozen repl, the interpreter's whole prefix, the AF_UNIX refusal side-stepped through a
socketpair, and jarvis's own launcher sharing the host's cgroup namespace. Each test reproduces
one class's attack on both mechanisms (bubblewrap and jarvis's own launcher); the suite runs
them as root and as an unprivileged user (tests/test_sandbox_unprivileged.py), where the
sandbox's host uid is the person's own and a per-uid quota it took would be the person's.
"""

from __future__ import annotations

import ast
import fcntl
import json
import os
import platform
import socket
import sqlite3
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from sandbox_support import give_to_sandbox
from waiting import wait_for

from jarvis.sandbox import SandboxedPython, SandboxLimits, SandboxPolicy

pytestmark = [pytest.mark.usefixtures("nothing_left_behind"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")]
MAX_TEST_SECONDS = 90

LIMITS = SandboxLimits(timeout=20.0, cpu_seconds=5, memory_mb=256, max_output_chars=5_000)
REPO = Path(__file__).resolve().parent.parent


def run_once(mechanism: str, code: str, **policy) -> str:
    """Run `code` in a fresh sandbox; its printed output (the call must succeed)."""
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, limits=LIMITS, **policy))
    try:
        result = proc.run(code)
        assert result.ok, result.error
        assert proc.run("6 * 7").output == "42\n"  # and the interpreter goes on
        return result.output.strip()
    finally:
        proc.close()


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# --- quotas counted for the whole host --------------------------------------------------------
def test_the_hosts_async_io_quota_is_out_of_reach(mechanism: str) -> None:
    # fs.aio-max-nr is one count for the whole host: two io_setup calls of half of it each
    # took it all, and every process on the host then failed with EAGAIN. (One event here:
    # the call itself is the attack, without taking the quota from the machine.)
    nr = {"x86_64": 206, "aarch64": 0}[platform.machine()]
    code = ("import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "ctx = ctypes.c_ulong(0)\n"
            f"ret = libc.syscall({nr}, 1, ctypes.byref(ctx))\n"
            "print(ret, errno.errorcode.get(ctypes.get_errno()))")
    assert run_once(mechanism, code) == "-1 EPERM"


# --- quotas counted per uid, shared with the person -------------------------------------------
PER_UID = """\
import asyncio, ctypes, errno, fcntl, os, resource, select, selectors, signal
libc = ctypes.CDLL(None, use_errno=True)
out = {}
made = 0
for _ in range(8):  # fs.inotify.max_user_instances (128) is the host uid's, for all its processes
    if libc.inotify_init1(0) < 0:
        break
    made += 1
out["inotify"] = (made, errno.errorcode.get(ctypes.get_errno()))
try:  # fs.epoll.max_user_watches: one count for every process of the uid
    select.epoll()
    out["epoll"] = "made"
except OSError as e:
    out["epoll"] = errno.errorcode[e.errno]
r, w = os.pipe()
try:  # fs.pipe-user-pages-soft: the uid's pipes get one page each past it
    fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    out["pipe"] = "grown"
except OSError as e:
    out["pipe"] = errno.errorcode[e.errno]
# RLIMIT_SIGPENDING is counted for the uid: 96 000 queued signals and timer_create failed in
# every process of the person
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
for _ in range(1000):
    os.kill(os.getpid(), signal.SIGRTMIN)
queued = int(next(l for l in open("/proc/self/status") if l.startswith("SigQ")).split()[1].split("/")[0])
out["signals queued"] = queued
out["sigpending limit"] = resource.getrlimit(resource.RLIMIT_SIGPENDING)[0]
async def main():
    return "asyncio runs"
out["asyncio"] = (asyncio.run(main()), selectors.DefaultSelector.__name__)
print(out)
"""


def test_quotas_counted_per_uid_are_out_of_reach(mechanism: str) -> None:
    # As a normal user the sandbox's host uid is the person's: a quota it takes is taken from
    # the whole desktop session (file watchers, timers, every pipe).
    out = ast.literal_eval(run_once(mechanism, PER_UID))
    assert out["inotify"] == (0, "EPERM"), out
    assert out["epoll"] == "EPERM" and out["pipe"] == "EPERM", out
    assert out["signals queued"] <= out["sigpending limit"] <= 64, out
    # Python's own users of epoll pick poll instead (selectors tries epoll first).
    assert out["asyncio"] == ("asyncio runs", "PollSelector"), out


# --- leases and locks ---------------------------------------------------------------------------
def test_leases_and_locks_never_reach_the_host(mechanism: str, tmp_path: Path) -> None:
    # A lease on a file the sandbox's uid owns (as a normal user: jarvis's own installed
    # files too) made every other open of it wait 45 s (lease-break-time); a lock taken on a
    # SQLite database mounted read-only kept it "locked" for the host while the repl sat
    # frozen between calls. The interpreter is one process (no fork): its locks coordinate
    # nothing inside the sandbox, so they are no-ops there, and leases are refused.
    data = tmp_path / "data"
    data.mkdir()
    db = data / "notes.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table t (x)")
        conn.execute("insert into t values (1)")
    conn.close()
    shared = tmp_path / "shared"
    shared.mkdir()
    doc = shared / "doc.txt"
    doc.write_text("draft")
    give_to_sandbox(shared, doc)
    code = (f"import errno, fcntl, os, sqlite3\nout = {{}}\nopen('/tmp/own.txt', 'w').write('x')\n"
            f"for name, path in (('tmp', '/tmp/own.txt'), ('shared', {str(doc)!r})):\n"
            "    fd = os.open(path, os.O_RDONLY)\n"
            "    try:\n"
            "        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)\n"
            "        out[name] = 'leased'\n"
            "    except OSError as e:\n"
            "        out[name] = errno.errorcode[e.errno]\n"
            f"db = sqlite3.connect('file:{db}?mode=ro', uri=True, isolation_level=None)\n"
            "db.execute('BEGIN')\n"
            "out['rows'] = db.execute('select count(*) from t').fetchone()[0]  # SHARED lock\n"
            f"held = os.open({str(db)!r}, os.O_RDONLY)\n"
            "fcntl.flock(held, fcntl.LOCK_EX)\n"
            "fcntl.lockf(held, fcntl.LOCK_SH)\n"
            "print(out)")
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, limits=LIMITS,
                                         read_only_paths=(str(data),),
                                         writable_paths=(str(shared),)))
    try:
        result = proc.run(code)
        assert result.ok, result.error
        assert ast.literal_eval(result.output) == {"tmp": "EPERM", "shared": "EPERM",
                                                   "rows": 1}, result.output
        wait_for(lambda: state_of(proc.pid) == "T", what="the frozen repl")  # holding its locks
        # An editor opening the shared file does not wait (O_NONBLOCK: EWOULDBLOCK if leased).
        os.close(os.open(doc, os.O_WRONLY | os.O_NONBLOCK))
        writer = sqlite3.connect(db, timeout=0.2)
        try:
            writer.execute("insert into t values (2)")
            writer.commit()
        finally:
            writer.close()
        fd = os.open(db, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        assert proc.run("db.execute('select count(*) from t').fetchone()").output == "(1,)\n"
    finally:
        proc.close()


# --- kernel memory RLIMIT_AS does not count ----------------------------------------------------
PARK = """\
import errno, socket
out = {}
a, b = socket.socketpair()
for name, opt in (("SO_SNDBUF", 7), ("SO_RCVBUF", 8), ("SO_SNDBUFFORCE", 32), ("SO_RCVBUFFORCE", 33)):
    try:
        a.setsockopt(socket.SOL_SOCKET, opt, 1 << 26)
        out[name] = "set"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
try:  # a socket sent inside itself: unreachable, beyond RLIMIT_NOFILE
    socket.send_fds(a, [b"x"], [a.fileno(), b.fileno()])
    out["SCM_RIGHTS"] = "sent"
except OSError as e:
    out["SCM_RIGHTS"] = errno.errorcode[e.errno]
for name, kind in (("tcp", socket.SOCK_STREAM), ("sctp", socket.SOCK_SEQPACKET)):
    try:  # their buffers grow by themselves (tcp_rmem's maximum)
        socket.socket(socket.AF_INET6, kind, 0)
        out[name] = "made"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
parked = 0
pairs = []
for _ in range(8):
    x, y = socket.socketpair()
    x.setblocking(False)
    try:
        x.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 26)
    except OSError:
        pass
    while True:
        try:
            parked += x.send(bytes(65536))
        except BlockingIOError:
            break
    pairs.append((x, y))
out["parked"] = parked
print(out)
"""


def test_socket_and_pipe_buffers_are_bounded(mechanism: str) -> None:
    # Data parked in socket buffers (and sockets passed inside sockets) is kernel memory no
    # process's RLIMIT_AS counts: one paused repl with memory_mb = 512 held 3.1 GB on a host
    # with a raised net.core.wmem_max. Buffers stay at the host's defaults, descriptors cannot
    # be passed, and TCP or SCTP (whose buffers grow by themselves) need network = true.
    out = ast.literal_eval(run_once(mechanism, PARK))
    refused = ("SO_SNDBUF", "SO_RCVBUF", "SO_SNDBUFFORCE", "SO_RCVBUFFORCE", "SCM_RIGHTS",
               "tcp", "sctp")
    assert {k: out[k] for k in refused} == dict.fromkeys(refused, "EPERM"), out
    # A socket's send buffer may go one write past its size: twice it bounds a socket.
    default = int(Path("/proc/sys/net/core/wmem_default").read_text())
    assert 0 < out["parked"] <= 8 * 2 * default, (out["parked"], default)


def test_doctor_says_how_kernel_memory_is_bounded(cli_env) -> None:
    from jarvis.sandbox.cgroup import kernel_memory

    # --no-connect: no engine runs here, which doctor would report as a failure of its own.
    done = subprocess.run([sys.executable, "-m", "jarvis.cli", "doctor", "--json", "--no-connect"],
                          env=cli_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    memory = json.loads(done.stdout)["sandbox"]["memory"]
    expected = kernel_memory(max_open_files=256, network=False)
    assert memory == expected, (memory, expected)
    assert memory["mode"] in ("cgroup", "buffers"), memory
    if memory["mode"] == "buffers":
        per_fd = max(int(Path(f"/proc/sys/net/core/{k}_default").read_text())
                     for k in ("rmem", "wmem"))
        assert memory["bound_bytes"] == 256 * 2 * per_fd and memory["why_no_cgroup"], memory
    text = subprocess.run([sys.executable, "-m", "jarvis.cli", "doctor", "--no-connect"],
                          env=cli_env, capture_output=True, text=True, timeout=60).stdout
    line = next(x for x in text.splitlines() if x.startswith("  kernel memory: "))
    mode = "cgroup v2 under " if memory["mode"] == "cgroup" else "bounded buffers: "
    assert line.startswith("  kernel memory: " + mode), line
    assert memory["mode"] == "cgroup" or f"at most {memory['bound_bytes'] // 2 ** 20} MB" in line


# --- a frozen repl resumed through a terminal --------------------------------------------------
TERMINAL = """\
import errno, fcntl, os, socket, struct, threading
steps = {}
def step(name, fn):
    try:
        steps[name] = fn()
        return steps[name]
    except OSError as e:
        steps[name] = errno.errorcode.get(e.errno)
master = step("ptmx", lambda: os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
step("setsid", lambda: os.setsid() or "ok")
if isinstance(master, int):
    fcntl.ioctl(master, 0x40045431, struct.pack("i", 0))  # TIOCSPTLCK: unlock
    n = struct.unpack("I", fcntl.ioctl(master, 0x80045430, b"\\0" * 4))[0]  # TIOCGPTN
    tty = os.open(f"/dev/pts/{n}", os.O_RDWR)
    step("TIOCSCTTY", lambda: fcntl.ioctl(tty, 0x540E, 0) and "ok")
    # the master parked in a socket cycle: the kernel's garbage collector closes it later,
    # the terminal hangs up, and its session gets SIGHUP and SIGCONT
    a, b = socket.socketpair()
    step("park", lambda: socket.send_fds(a, [b"x"], [master, a.fileno(), b.fileno()]) and "ok")
    os.close(master)
    a.close()
    b.close()
import signal
signal.signal(signal.SIGHUP, signal.SIG_IGN)
def burn():
    while True:
        pass
threading.Thread(target=burn, daemon=True).start()
print(steps, sorted(os.listdir("/dev")))
"""


def collect_unix_garbage() -> None:
    """Make the kernel run its AF_UNIX garbage collector (a cycle closed here)."""
    a, b = socket.socketpair()
    socket.send_fds(a, [b"x"], [a.fileno(), b.fileno()])
    a.close()
    b.close()


def test_a_frozen_repl_cannot_resume_itself_through_a_terminal(mechanism: str) -> None:
    # bubblewrap's /dev held /dev/ptmx and setsid() was allowed: the code made a terminal its
    # controlling one, parked the master in a socket cycle and returned; when the kernel's
    # AF_UNIX garbage collector closed the master (any process on the host can make it run),
    # the hang-up sent SIGCONT, and the frozen interpreter ran between calls.
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, limits=LIMITS))
    try:
        result = proc.run(TERMINAL)
        assert result.ok, result.error
        steps, devices = result.output.strip().split(" ", 1)[0], result.output
        assert result.output.strip() == (
            "{'ptmx': 'ENOENT', 'setsid': 'EPERM'} "
            "['fd', 'full', 'null', 'random', 'stderr', 'stdin', 'stdout', 'urandom', 'zero']"
        ), (steps, devices)
        used = proc.cpu_used()
        collect_unix_garbage()
        time.sleep(0.5)  # resumed, the burning thread would use up to 0.5 s of CPU here
        assert state_of(proc.pid) == "T" and proc.cpu_used() - used < 0.05
    finally:
        proc.close()


# --- the interpreter's prefix -------------------------------------------------------------------
def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system
        import shutil

        shutil.copy2(source, target)


def fake_conda_env(root: Path) -> Path:
    """An interpreter prefix laid out like a conda environment (the real interpreter, its
    standard library and shared libraries), holding a key where conda keeps them: returns the
    interpreter."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    prefix = root / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").mkdir()
    python = prefix / "bin" / version
    _link_or_copy(Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable))),
                  python)
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    (prefix / "lib" / version).symlink_to(os.path.realpath(base["stdlib"]))
    libdir = Path(sysconfig.get_config_var("LIBDIR") or "/nonexistent")
    for lib in libdir.glob("libpython*.so*"):
        _link_or_copy(lib.resolve(), prefix / "lib" / lib.name)
    (prefix / "conda-meta").mkdir()
    (prefix / "conda-meta" / "state").write_text(
        json.dumps({"env_vars": {"OPENAI_API_KEY": "sk-canary-conda-state"}}))
    (prefix / "etc" / "conda" / "activate.d").mkdir(parents=True)
    (prefix / "etc" / "conda" / "activate.d" / "keys.sh").write_text(
        "export ANTHROPIC_API_KEY=sk-canary-activate\n")
    (prefix / "bin" / "activate").write_text("export TOKEN=sk-canary-bin\n")
    (prefix / "include").mkdir()
    (prefix / "include" / "secret.h").write_text("// sk-canary-include\n")
    for path in prefix.rglob("*"):  # readable by the sandbox's uid, as a conda env is
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or path == python else 0o644)
    return python


LIST_PREFIX = """\
import os, sys
prefix = sys.base_prefix
seen, text = [], ""
for folder, dirs, files in os.walk(prefix):
    for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
        path = os.path.join(folder, name)
        seen.append(os.path.relpath(path, prefix))
        if os.path.isfile(path) and not os.path.islink(path) and os.path.getsize(path) < 10 ** 5:
            text += open(path, errors="replace").read()
print(sorted(seen), "sk-canary" in text, prefix)
"""


def test_only_the_interpreter_its_stdlib_and_libraries_of_its_prefix_are_mounted(
        mechanism: str, tmp_path: Path) -> None:
    # The whole prefix was mounted: in a conda environment that folder holds conda-meta/state
    # (`conda env config vars set OPENAI_API_KEY=...` keeps keys there) and the activation
    # scripts. jarvis runs here from such a prefix; the sandbox shows its interpreter, the
    # standard library and the shared libraries the interpreter loads from it, nothing else.
    python = fake_conda_env(tmp_path)
    script = ("import sys\nfrom jarvis.sandbox import SandboxedPython, SandboxPolicy\n"
              f"proc = SandboxedPython(SandboxPolicy(isolation={mechanism!r}))\n"
              "try:\n    r = proc.run(sys.stdin.read())\n"
              "    print(r.output if r.ok else 'FAILED ' + str(r.error))\n"
              "finally:\n    proc.close()\n")
    site_packages = [p for p in sys.path if p.endswith("site-packages")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *site_packages])}
    done = subprocess.run([str(python), "-c", script], input=LIST_PREFIX, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and not done.stdout.startswith("FAILED"), (done.stdout,
                                                                          done.stderr)
    seen, canary, prefix = done.stdout.strip().rsplit(" ", 2)
    assert prefix == str(python.parent.parent), done.stdout  # it really ran from there
    version = python.name
    allowed = {f"bin/{version}", f"lib/{version}"} | {
        f"lib/{p.name}" for p in (python.parent.parent / "lib").glob("lib*.so*")}
    assert set(ast.literal_eval(seen)) <= allowed and f"bin/{version}" in seen, seen
    assert canary == "False", done.stdout


# --- AF_UNIX ----------------------------------------------------------------------------------
UNIX = """\
import errno, socket
out = []
def attempt(what, fn):
    try:
        fn()
        out.append((what, "sent"))
    except OSError as e:
        out.append((what, errno.errorcode[e.errno]))
def pair(kind):
    return socket.socketpair(socket.AF_UNIX, kind)[0]
attempt("dgram pair", lambda: pair(socket.SOCK_DGRAM).sendto(b"1", PATH))
attempt("seqpacket pair", lambda: pair(socket.SOCK_SEQPACKET).sendto(b"2", PATH))
a, b = socket.socketpair()
attempt("stream sendto", lambda: a.sendto(b"3", PATH))
attempt("stream connect", lambda: a.connect(PATH))
b.close()
attempt("sendto, peer gone", lambda: a.sendto(b"4", PATH))
attempt("connect, peer gone", lambda: a.connect(PATH))
print(out)
"""


def test_a_host_unix_socket_is_out_of_reach_through_a_socketpair(mechanism: str,
                                                                 tmp_path: Path) -> None:
    # socket(AF_UNIX) is refused, but socketpair(AF_UNIX, SOCK_DGRAM) then sendto(path)
    # reached a host datagram socket in a folder shown read-only (sending to a socket file
    # is no file access Landlock checks). Only a connected stream pair is made now: it has no
    # destination to change.
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "host.sock"
    host = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        host.bind(str(path))
        path.chmod(0o777)
        host.settimeout(0.3)
        out = ast.literal_eval(run_once(mechanism, f"PATH = {str(path)!r}\n" + UNIX,
                                        read_only_paths=(str(folder),)))
        results = dict(out)
        assert results["dgram pair"] == results["seqpacket pair"] == "EPERM", out
        # sendto: "already connected"; connect: "wrong protocol type" (a pair's peer is set)
        assert {k: v for k, v in results.items() if "pair" not in k} == {
            "stream sendto": "EISCONN", "stream connect": "EPROTOTYPE",
            "sendto, peer gone": "EISCONN", "connect, peer gone": "EPROTOTYPE"}, out
        with pytest.raises(TimeoutError):
            host.recv(16)
    finally:
        host.close()


# --- cgroups ----------------------------------------------------------------------------------
def test_the_sandbox_has_a_cgroup_namespace_of_its_own(mechanism: str) -> None:
    # jarvis's own launcher made no cgroup namespace: /proc/self/cgroup showed the host's
    # cgroup paths (bubblewrap's --unshare-all makes one).
    code = ("import os\nprint(os.readlink('/proc/self/ns/cgroup'), "
            "sorted({l.split(':', 2)[2] for l in open('/proc/self/cgroup').read().splitlines()}))")
    namespace, paths = run_once(mechanism, code).split(" ", 1)
    assert namespace != os.readlink("/proc/self/ns/cgroup"), namespace
    assert paths == "['/']", paths

