"""The code sandbox attacked a third time, around the fixes of the first two passes.

Each attack runs against the real sandbox on both namespace mechanisms (bubblewrap and
jarvis's own launcher), through the ToolExecutor where the tool's answer is what matters, or
through SandboxedPython where the test must watch the interpreter from outside (its CPU, its
state, jarvis's own memory). Those that broke are the regression proof of their fix; those that
held document a guarantee no other test covers. docs/serve.md's sandbox table names them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import tracemalloc

import pytest
from sandbox_support import call, wait_until_gone

from jarvis.sandbox import SandboxedPython, SandboxLimits, SandboxPolicy
from jarvis.tools.code_interpreter import CodeInterpreterTool
from jarvis.tools.executor import ToolExecutor

pytestmark = [pytest.mark.usefixtures("nothing_left_behind"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")]
MAX_TEST_SECONDS = 60

LIMITS = SandboxLimits(timeout=10.0, cpu_seconds=1, memory_mb=256, max_output_chars=2_000)
TOOL_LIMITS = {"timeout": 10.0, "cpu_seconds": 1, "memory_mb": 256, "max_output_chars": 2_000,
               "requires_confirmation": False, "acquire_timeout": 10.0}




@pytest.fixture
def sandbox(mechanism: str):
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, limits=LIMITS))
    yield proc
    proc.close()


def once(mechanism: str, code: str):
    tool = CodeInterpreterTool(isolation=mechanism, **TOOL_LIMITS)
    return call(ToolExecutor([tool]), "code_interpreter", code)


def state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


# --- resuming a frozen repl ----------------------------------------------------------------
# A POSIX timer whose signal is SIGCONT: the kernel resumes a stopped process when SIGCONT is
# generated, so the interpreter jarvis froze after the call woke itself every 20 ms and its
# thread burned CPU until the next call (2 s of CPU in 3 s here; up to session_cpu_seconds,
# 600 s, between two calls). A message queue's notification and F_SETSIG (the signal of a
# descriptor that gets ready) can choose SIGCONT as well.
RESUME_ITSELF = """\
import ctypes, errno, signal, socket, threading
libc = ctypes.CDLL(None, use_errno=True)
class SigEvent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("pad", ctypes.c_byte * 48)]
class TimeSpec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
class ITimerSpec(ctypes.Structure):
    _fields_ = [("interval", TimeSpec), ("value", TimeSpec)]
def err(ret):
    return "ok" if ret >= 0 else errno.errorcode[ctypes.get_errno()]
event = SigEvent(None, signal.SIGCONT, 0)  # SIGEV_SIGNAL
timer = ctypes.c_void_p()
out = {"timer_create": err(libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)))}
if out["timer_create"] == "ok":
    every = ITimerSpec(TimeSpec(0, 20_000_000), TimeSpec(0, 20_000_000))
    libc.timer_settime(timer, 0, ctypes.byref(every), None)
out["mq_open"] = err(libc.mq_open(b"/wake", 0o102, 0o600, None))  # O_CREAT | O_RDWR
a, b = socket.socketpair()
out["F_SETSIG"] = err(libc.fcntl(a.fileno(), 10, signal.SIGCONT))
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
def burn():
    while True:
        pass
threading.Thread(target=burn, daemon=True).start()
print(out)
"""


def test_a_frozen_repl_cannot_make_the_kernel_resume_it(sandbox: SandboxedPython) -> None:
    result = sandbox.run(RESUME_ITSELF)
    assert result.ok, result.error
    assert result.output.strip() == str({"timer_create": "EPERM", "mq_open": "EPERM",
                                         "F_SETSIG": "EPERM"}), result.output
    used = sandbox.cpu_used()
    time.sleep(0.5)  # resumed, the burning thread would use up to 0.5 s of CPU here
    assert sandbox.cpu_used() - used < 0.05
    assert state_of(sandbox.pid) == "T"
    # The next call thaws it as usual (test_sandbox.py shows its thread's CPU counts then).
    again = sandbox.run("'still here'")
    assert again.ok and again.output == "'still here'\n", again


def test_an_interpreter_resumed_between_calls_is_ended_at_the_next_call(
        sandbox: SandboxedPython) -> None:
    # Any way to resume it that the filter does not know of (this test's own SIGCONT stands
    # for one): jarvis sees the CPU it used while frozen and ends it before the next call.
    result = sandbox.run("import threading\ndef burn():\n    while True:\n        pass\n"
                         "threading.Thread(target=burn, daemon=True).start()\nx = 'state'")
    assert result.ok, result.error
    used = sandbox.cpu_used()
    os.kill(sandbox.pid, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while sandbox.cpu_used() - used < 0.3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sandbox.cpu_used() - used >= 0.3
    pids = {sandbox.pid, sandbox.init_pid}
    after = sandbox.run("x")
    assert not after.ok and after.error_kind == "cpu" and after.restarted, after
    assert "ran while it was frozen" in after.error, after.error
    assert not sandbox.alive and not wait_until_gone(pids, timeout=5)


# --- what the code can reach ---------------------------------------------------------------
SOCKET_FAMILIES = """\
import errno, socket
made, odd = [], []
for family in range(0, 46):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_RAW):
        try:
            socket.socket(family, kind, 0).close()
            made.append(family)
        except OSError as e:
            if e.errno != errno.EPERM and family not in (2, 10, 16):
                odd.append((family, kind, errno.errorcode.get(e.errno)))
try:
    socket.socketpair(socket.AF_INET)
except OSError as e:
    odd.append(("socketpair", errno.errorcode.get(e.errno)))
a, b = socket.socketpair()
a.send(b"asyncio's self-pipe")
print(sorted(set(made)), odd, b.recv(100))
"""


def test_only_ip_and_netlink_sockets_can_be_made(mechanism: str) -> None:
    # AF_VSOCK ignores network namespaces (before Linux 7.0; a VM guest's transport always):
    # in a VM (Firecracker, Kata) the code made vsock sockets with network = false and could
    # reach the VM host's services, past the namespace and Landlock (which checks TCP only).
    # Now every family but IPv4, IPv6 and netlink gets EPERM from the filter, whatever the
    # kernel would have said (EAFNOSUPPORT, EPERM for lack of CAP_NET_RAW, ...).
    result = once(mechanism, SOCKET_FAMILIES)
    assert result.success, result.content
    odd = [("socketpair", "EPERM")]
    assert result.content.strip() == f"[2, 10, 16] {odd} b\"asyncio's self-pipe\"", (
        result.content)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 machine code")
def test_32_bit_syscalls_from_64_bit_code_are_refused(mechanism: str) -> None:
    # `int 0x80` from x86-64 code enters the i386 syscall table, where every number means
    # another call than the filter's: the filter refuses that ABI whole (getpid here: the
    # host answers its pid, the sandbox -EPERM).
    code = ("import ctypes, mmap, os\n"
            "buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
            "buf.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))  # eax=20; int 0x80; ret\n"
            "fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))\n"
            "print(fn(), os.getpid())")
    result = once(mechanism, code)
    assert result.success, result.content
    i386_getpid, pid = result.content.split()
    assert i386_getpid == "-1" and pid != "-1", result.content


def test_the_only_descriptors_are_the_protocol_pipes_and_no_terminal(mechanism: str) -> None:
    # Nothing inherited at exec but the two pipes of the protocol (0, 1 and 2 are /dev/null):
    # no descriptor of jarvis, bwrap or the launcher to read through or escape Landlock with
    # (it checks paths at open time), and no controlling terminal for TIOCSTI.
    code = ("import os\nfds = sorted(int(f) for f in os.listdir('/proc/self/fd'))\n"
            "kinds = [os.readlink(f'/proc/self/fd/{f}').split(':')[0] for f in fds[:5]]\n"
            "try:\n    open('/dev/tty', 'r+b', buffering=0)\n    tty = 'opened'\n"
            "except OSError as e:\n    tty = 'refused'\n"
            "print(len(fds), kinds, tty, any(os.isatty(f) for f in range(5)))")
    result = once(mechanism, code)
    assert result.success, result.content
    # the sixth descriptor is listdir's own
    assert result.content.strip() == ("6 ['/dev/null', '/dev/null', '/dev/null', 'pipe', "
                                      "'pipe'] refused False"), result.content


def test_a_crashed_sandbox_is_never_core_dumped(mechanism: str) -> None:
    # With kernel.core_pattern a pipe (Ubuntu's apport, systemd-coredump) the kernel ignores
    # RLIMIT_CORE 0 and runs that helper as root on the host with the crashed sandbox's memory
    # as its input. The worker is not dumpable, and cannot make itself dumpable again.
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.prctl(3, 0, 0, 0, 0), libc.prctl(4, 1, 0, 0, 0), ctypes.get_errno())")
    result = once(mechanism, code)
    assert result.success and result.content.strip() == "0 -1 1", result.content
    crashed = once(mechanism, "import ctypes\nctypes.string_at(0)")
    assert not crashed.success and crashed.metadata["error_kind"] == "crashed", crashed.content


# --- the supervisor's side --------------------------------------------------------------------
FLOOD = """\
import json, os, struct, sys, time
out = sys.modules["__main__"].OUT_FD
def frame(body):
    return struct.pack(">I", len(body)) + body
# Frames for no call: dropped unread, however many.
junk = frame(json.dumps([[]] * 20_000).encode())  # 80 KB: under a reply's bound
end = time.monotonic() + 1.0
n = 0
while time.monotonic() < end:
    os.write(out, junk)
    n += 1
print("flooded", n > 10)
"""


def test_a_reply_flood_costs_jarvis_no_memory(sandbox: SandboxedPython) -> None:
    # json.loads makes ~30 times a frame's size of Python objects: one 8 MB frame of
    # "[[],[],...]" (the old bound) took 170 MB of jarvis's memory, parsed for nothing.
    # Frames are bounded by what an honest reply holds now, and a frame that does not begin
    # with the call's id is dropped without being parsed.
    tracemalloc.start()
    try:
        result = sandbox.run(FLOOD)
        _, flood_peak = tracemalloc.get_traced_memory()
        assert result.ok and result.output == "flooded True\n", result
        assert sandbox.stale_replies > 10
        tracemalloc.reset_peak()
        big = sandbox.run("import json, os, struct, sys\n"  # 8 000 000 bytes
                          "body = json.dumps([[]] * 2_000_000).encode()\n"
                          "os.write(sys.modules['__main__'].OUT_FD, "
                          "struct.pack('>I', len(body)) + body)")
        _, big_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert flood_peak < 20 * 2 ** 20 and big_peak < 20 * 2 ** 20, (flood_peak, big_peak)
    assert not big.ok and big.error_kind == "crashed" and "over the" in big.error, big


def test_short_lived_threads_cannot_hide_their_cpu_from_the_limit(mechanism: str) -> None:
    # jarvis reads the sandbox's CPU every 0.25 s and the kernel counts RLIMIT_CPU per
    # process: threads that burn 50 ms each and are gone before the next look still count
    # (a process's CPU time holds its exited threads'), even with SIGXCPU ignored.
    code = ("import signal, threading, time\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
            "def burn():\n    t = time.thread_time()\n"
            "    while time.thread_time() - t < 0.05:\n        pass\n"
            "while True:\n    ts = [threading.Thread(target=burn) for _ in range(2)]\n"
            "    for t in ts:\n        t.start()\n    for t in ts:\n        t.join()\n")
    tool = CodeInterpreterTool(isolation=mechanism, **{**TOOL_LIMITS, "timeout": 30.0})
    start = time.monotonic()
    result = call(ToolExecutor([tool]), "code_interpreter", code)
    assert not result.success and result.metadata["error_kind"] == "cpu", result.content
    assert time.monotonic() - start < 25


def test_the_work_folder_bounds_its_bytes_across_files(mechanism: str) -> None:
    # RLIMIT_FSIZE (max_file_mb, 50) bounds one file; the tmpfs's size (tmp_mb, 64) bounds
    # them all: /tmp is kernel memory no process's RLIMIT_AS counts. And memory mapped with
    # MAP_NORESERVE (no backing promised) still counts against RLIMIT_AS (memory_mb, 256).
    code = ("import mmap\nout = []\nfor i in range(3):\n    try:\n"
            "        with open(f'/tmp/f{i}', 'wb') as f:\n"
            "            for _ in range(40):\n                f.write(b'x' * 2 ** 20)\n"
            "        out.append('40 MB')\n"
            "    except OSError as e:\n        out.append(e.strerror)\n"
            "try:\n    mmap.mmap(-1, 2 ** 31, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x4000)\n"
            "    out.append('2 GB mapped')\nexcept OSError as e:\n    out.append(e.strerror)\n"
            "print(out)")
    result = once(mechanism, code)
    assert result.success, result.content
    assert result.content.strip() == str(["40 MB", "No space left on device",
                                          "No space left on device",
                                          "Cannot allocate memory"]), result.content


def test_code_that_stops_reading_its_requests_cannot_block_jarvis(mechanism: str) -> None:
    # The code replaced the worker's reading loop; the next call's code, bigger than the
    # pipe's 64 KiB, was half-written when jarvis blocked in write(), with the interpreter's
    # lock held, past every timeout (the executor's too), until the run ended.
    import threading

    limits = SandboxLimits(timeout=2.0, cpu_seconds=1)
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, limits=limits))
    try:
        stop = proc.run("import sys, time\nsys.modules['__main__'].receive = "
                        "lambda: time.sleep(10 ** 6)")
        assert stop.ok, stop
        outcome = []
        caller = threading.Thread(target=lambda: outcome.append(proc.run("x = 1\n" * 30_000)),
                                  daemon=True)
        start = time.monotonic()
        caller.start()
        caller.join(10)
        assert outcome, "jarvis is still blocked writing the code"
        assert time.monotonic() - start < 5
        result = outcome[0]
        assert not result.ok and result.error_kind == "timeout" and result.restarted, result
        assert "did not take the code" in result.error
        assert not proc.alive
    finally:
        proc.close()


def test_code_cannot_plant_a_set_user_id_file_in_a_writable_path(mechanism: str,
                                                                 tmp_path) -> None:
    # chmod 4755 in a writable path left a set-user-ID file on the host, owned by the
    # sandbox's host uid (65534 under a root jarvis, else jarvis's own uid): whoever ran it
    # became that uid. Every way to set the mode refuses S_ISUID and S_ISGID (seccomp).
    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    if os.geteuid() == 0:
        os.chown(out, 65534, 65534)
    code = (f"import ctypes, os\nd = {str(out)!r} + '/'\nres = []\n"
            "def t(what, f):\n    try:\n        f()\n        res.append(what)\n"
            "    except OSError as e:\n        res.append(e.strerror)\n"
            "t('open', lambda: os.close(os.open(d + 'a', os.O_CREAT | os.O_WRONLY, 0o4755)))\n"
            "t('plain', lambda: os.close(os.open(d + 'p', os.O_CREAT | os.O_WRONLY, 0o755)))\n"
            "t('chmod', lambda: os.chmod(d + 'p', 0o4755))\n"
            "t('setgid', lambda: os.chmod(d + 'p', 0o2755))\n"
            "t('fchmod', lambda: os.fchmod(os.open(d + 'p', os.O_RDONLY), 0o6755))\n"
            "t('mknod', lambda: os.mknod(d + 'n', 0o104755))\n"
            "t('chmod 700', lambda: os.chmod(d + 'p', 0o700))\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "res.append(libc.syscall(437, -100, d.encode(), None, 0) == -1 and ctypes.get_errno())\n"
            "print(res)")
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, limits=LIMITS,
                                         writable_paths=(str(out),)))
    try:
        result = proc.run(code)
    finally:
        proc.close()
    refused = "Operation not permitted"
    assert result.ok and result.output.strip() == str(
        [refused, "plain", refused, refused, refused, refused, "chmod 700", 38]), result
    modes = {p.name: p.stat().st_mode for p in out.iterdir()}
    assert modes and not any(mode & 0o6000 for mode in modes.values()), modes


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 syscall numbers")
def test_calls_whose_arguments_the_filter_cannot_read_are_enosys(mechanism: str) -> None:
    # clone3 and openat2 take their flags and mode in a struct the filter cannot read (new
    # namespaces, a set-uid mode): ENOSYS, so glibc falls back to clone and openat, whose
    # arguments it checks. Without the filter the kernel answers EFAULT to a NULL struct.
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nout = []\n"
            "for nr, args in ((435, (None, 88)), (437, (-100, b'/tmp/x', None, 24))):\n"
            "    ctypes.set_errno(0)\n"
            "    out.append((libc.syscall(nr, *args), ctypes.get_errno()))\nprint(out)")
    result = once(mechanism, code)
    assert result.success and result.content.strip() == "[(-1, 38), (-1, 38)]", result.content


def test_an_honest_error_always_fits_a_replys_bound(sandbox: SandboxedPython) -> None:
    # A reply's bound counts on errors of at most 4 000 characters: a SyntaxError quotes its
    # whole line (up to max_code_chars, 4 bytes a character in UTF-8), and an exception's
    # message can be anything; either, cut by jarvis only, went past the bound and the
    # interpreter was killed.
    assert sandbox.run("keep = 'still here'").ok
    for code in ("x = '" + "\u4e2d" * 90_000 + "' +",
                 "raise KeyboardInterrupt('\\x01' * 10 ** 6)",
                 "raise ValueError('\\x01' * 10 ** 6)"):
        result = sandbox.run(code)
        assert not result.ok and result.error_kind == "exception", result.error[-200:]
        assert len(result.error) <= 4_000 and not result.restarted
    assert sandbox.run("keep").output == "'still here'\n"
