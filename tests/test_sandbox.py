"""The code sandbox, attacked as a model would: one test per attack class of issue 11.

Every attack goes through the ToolExecutor exactly as a model's tool call does, on both
namespace mechanisms (bubblewrap and jarvis's own unshare launcher), with the real kernel
features (user/pid/mount/net namespaces, Landlock, seccomp, rlimits). Each ends with a clear
failed result or harmless output, this process (jarvis) still alive and answering, and no
process left behind.
"""

from __future__ import annotations

import ctypes
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandbox_support import call, descendants, give_to_sandbox, new_descendants, pid_alive, wait_until_gone

from jarvis.resources import default_manager, release_run
from jarvis.tools.code_interpreter import CodeInterpreterTool
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.repl import ReplTool

pytestmark = [pytest.mark.usefixtures("nothing_left_behind"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")]

MAX_TEST_SECONDS = 120
JARVIS_CPU_LIMIT = resource.getrlimit(resource.RLIMIT_CPU)  # what the attacks try to change
LIMITS = {"timeout": 5.0, "cpu_seconds": 1, "memory_mb": 256, "max_output_chars": 2_000,
          "requires_confirmation": False, "acquire_timeout": 10.0}


@pytest.fixture
def tools(mechanism: str) -> tuple[ReplTool, CodeInterpreterTool]:
    return (ReplTool(isolation=mechanism, **LIMITS),
            CodeInterpreterTool(isolation=mechanism, **LIMITS))


class Run:
    """One run (a conversation) with both code tools, released at the end."""

    def __init__(self, tools: tuple[ReplTool, CodeInterpreterTool], run_id: str) -> None:
        self.run_id = run_id
        self.tools = tools
        self.executor = ToolExecutor(list(tools), run_id=run_id)

    def repl(self, code: str):
        return call(self.executor, "repl", code)

    def once(self, code: str):
        return call(self.executor, "code_interpreter", code)

    def close(self) -> None:
        release_run(self.run_id)


@pytest.fixture
def run(tools, request: pytest.FixtureRequest):
    r = Run(tools, f"attack-{request.node.name}")
    yield r
    r.close()


def jarvis_still_answers(run: Run) -> None:
    """This process is unharmed: its limits are intact and a fresh call works."""
    assert resource.getrlimit(resource.RLIMIT_CPU) == JARVIS_CPU_LIMIT
    again = run.once("6 * 7")
    assert again.success and again.content.strip() == "42", again.content


# --- isolation of jarvis's process --------------------------------------------------------------
def test_code_cannot_write_jarvis_memory_through_proc(run: Run) -> None:
    canary = ctypes.create_string_buffer(b"jarvis-intact", 32)
    address = ctypes.addressof(canary)
    code = (f"import os\nout = []\n"
            f"for pid in ({os.getpid()}, os.getppid(), 1):\n"
            f"    try:\n"
            f"        with open(f'/proc/{{pid}}/mem', 'r+b', buffering=0) as f:\n"
            f"            f.seek({address})\n"
            f"            f.write(b'PWNED')\n"
            f"        out.append(f'{{pid}}: WROTE')\n"
            f"    except OSError as e:\n"
            f"        out.append(f'{{pid}}: {{type(e).__name__}}')\n"
            f"print(out)")
    for result in (run.repl(code), run.once(code)):
        assert result.success, result.content
        assert "WROTE" not in result.content, result.content
    assert canary.value == b"jarvis-intact"
    # jarvis made itself non-dumpable when it started a sandbox (PR_GET_DUMPABLE is 3).
    assert ctypes.CDLL(None).prctl(3, 0, 0, 0, 0) == 0
    jarvis_still_answers(run)


def test_code_cannot_take_jarvis_file_descriptors(run: Run) -> None:
    code = (f"import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"res = []\n"
            f"for pid in ({os.getpid()}, os.getppid(), 1):\n"
            f"    fd = libc.syscall(434, pid, 0)\n"                     # pidfd_open
            f"    res.append(('open', fd, ctypes.get_errno()))\n"
            f"    got = libc.syscall(438, 3 if fd < 0 else fd, 0, 0)\n"  # pidfd_getfd
            f"    res.append(('getfd', got, ctypes.get_errno()))\n"
            f"print(res)")
    result = run.once(code)
    assert result.success, result.content
    values = eval(result.content)  # noqa: S307 - our own test's printed tuples
    assert all(ret == -1 and err == 1 for _, ret, err in values), values  # EPERM every time
    jarvis_still_answers(run)


def test_code_cannot_limit_or_signal_jarvis(run: Run) -> None:
    me = os.getpid()
    code = (f"import ctypes, os, signal\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"res = []\n"
            f"limit = (ctypes.c_ulong * 2)(1, 1)\n"
            f"info = ctypes.create_string_buffer(128)\n"
            # jarvis, the sandbox's parent and its init, whichever are not the code itself
            f"for pid in {{{me}, os.getppid(), 1}} - {{0, os.getpid()}}:\n"
            f"    res.append(libc.syscall(302, pid, 0, limit, None) == -1)\n"   # prlimit64
            f"    res.append(libc.syscall(129, pid, 9, info) == -1)\n"          # rt_sigqueueinfo
            f"    res.append(libc.syscall(297, pid, pid, 9, info) == -1)\n"     # rt_tgsigqueueinfo
            f"    try:\n"
            f"        os.kill(pid, signal.SIGKILL)\n"
            f"        res.append(False)\n"
            f"    except OSError:\n"
            f"        res.append(True)\n"
            f"print(all(res), res)")
    for result in (run.repl(code), run.once(code)):
        assert result.success and result.content.startswith("True"), result.content
    assert pid_alive(me)
    jarvis_still_answers(run)


# --- what the code can see --------------------------------------------------------------------
def test_code_cannot_read_jarvis_environment(mechanism: str) -> None:
    # A real jarvis process started with a key in its environment (a variable set later with
    # os.environ would not show in /proc/<pid>/environ, so the test process cannot be it).
    attack = ("import os\nseen = str(dict(os.environ))\n"
              "for pid in (@JARVIS@, 'self', 1, os.getppid()):\n"
              "    try:\n"
              "        seen += open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace')\n"
              "    except OSError as e:\n"
              "        seen += type(e).__name__\n"
              "print('sk-secret' in seen, sorted(os.environ))")
    script = (
        "import os, sys\n"
        "from jarvis.core.types import ToolCall\n"
        "from jarvis.tools.executor import ToolExecutor\n"
        "from jarvis.tools.code_interpreter import CodeInterpreterTool\n"
        "from jarvis.tools.repl import ReplTool\n"
        f"tools = [ReplTool(requires_confirmation=False, isolation={mechanism!r}),\n"
        f"         CodeInterpreterTool(requires_confirmation=False, isolation={mechanism!r})]\n"
        "code = sys.stdin.read().replace('@JARVIS@', str(os.getpid()))\n"
        "assert 'sk-secret' in open(f'/proc/{os.getpid()}/environ').read()\n"
        "ex = ToolExecutor(tools, run_id='env')\n"
        "for name in ('repl', 'code_interpreter'):\n"
        "    r = ex.execute(ToolCall(id='c', name=name, arguments={'code': code}))\n"
        "    print(r.success, r.content.strip(), flush=True)\n"
    )
    env = {**os.environ, "OPENAI_API_KEY": "sk-secret-canary"}
    done = subprocess.run([sys.executable, "-c", script], input=attack, env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("True False [") for line in lines), lines
    assert "OPENAI_API_KEY" not in done.stdout


def test_code_cannot_read_home_secrets_or_shadow(run: Run, tmp_path: Path,
                                                 jarvis_home: Path) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE-KEY-CANARY")
    project_env = Path.cwd() / ".env"
    project_env.write_text("API_KEY=ENV-CANARY")
    (jarvis_home / "config.toml").write_text("# HOME-CANARY")
    targets = [str(home / ".ssh" / "id_ed25519"), str(project_env),
               str(jarvis_home / "config.toml"), "/etc/shadow", "/etc/passwd",
               str(Path.home() / ".ssh"), str(Path(__file__))]
    code = (f"import os\nout = []\n"
            f"for path in {targets!r}:\n"
            f"    try:\n"
            f"        out.append(open(path).read(100) if os.path.isfile(path) else os.listdir(path))\n"
            f"    except OSError as e:\n"
            f"        out.append(type(e).__name__)\n"
            f"print(out)")
    for result in (run.repl(code), run.once(code)):
        assert result.success, result.content
        assert "CANARY" not in result.content and "root:" not in result.content, result.content
        assert result.content.count("Error") == len(targets), result.content
    jarvis_still_answers(run)


def test_jarvis_home_inside_a_folder_the_sandbox_needs_stays_hidden(
        mechanism: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only listed paths were checked for secrets: a JARVIS_HOME under /usr/local, the
    # interpreter's prefix or the venv's site-packages was readable through their mounts.
    import shutil

    from jarvis.sandbox import SandboxedPython, SandboxPolicy
    from jarvis.sandbox.policy import python_paths

    packages = python_paths(True)[2]
    assert packages, "the test needs a site-packages folder the sandbox mounts"
    home = Path(packages[0]) / f"jarvis-test-home-{os.getpid()}-{mechanism}"
    home.mkdir()
    try:
        (home / ".env").write_text("OPENAI_API_KEY=sk-secret\n")
        monkeypatch.setenv("JARVIS_HOME", str(home))
        proc = SandboxedPython(SandboxPolicy(isolation=mechanism))
        try:
            result = proc.run(f"import os\nos.listdir({str(home)!r}), "
                              f"os.path.exists({str(home / '.env')!r})")
            assert result.ok and result.output.strip() == "([], False)", result
        finally:
            proc.close()
    finally:
        shutil.rmtree(home)


@pytest.mark.root_only  # it mounts a tmpfs on the host
def test_the_mounts_alone_are_read_only_without_landlock(mechanism: str, tmp_path: Path) -> None:
    # Run as root, bubblewrap maps the sandbox's uid onto root (jarvis itself now drops to
    # [sandbox] uid first, but the mounts must hold either way): as root, on a kernel
    # without Landlock, only the mounts stand between the code and host files. A writable
    # /proc let it write host sysctls (kernel/core_pattern: a command run as root on any
    # crash), and jarvis's launcher left a mount *below* a read-only path writable. The
    # sandbox here runs a plain `python -c` (no worker: no Landlock, no seccomp).
    import ctypes as c

    from jarvis.sandbox import SandboxPolicy
    from jarvis.sandbox.launch import bwrap_command, namespaces_command
    from jarvis.sandbox.policy import python_paths

    data = tmp_path / "data"
    (data / "inner").mkdir(parents=True)
    libc = c.CDLL(None, use_errno=True)
    assert libc.mount(b"tmpfs", str(data / "inner").encode(), b"tmpfs", 0, b"size=1m") == 0, (
        "the test mounts a tmpfs (it runs as root, like CI)")
    try:
        code = ("out = []\n"
                f"for path in ('/proc/sys/vm/swappiness', {str(data / 'inner' / 'x')!r}):\n"
                "    try:\n"
                "        old = open(path).read() if path.startswith('/proc') else 'x'\n"
                "        open(path, 'w').write(old)\n"    # the same value: harmless
                "        out.append('WROTE')\n"
                "    except OSError as e:\n        out.append(e.strerror)\n"
                "print(out)")
        policy = SandboxPolicy(isolation=mechanism, read_only_paths=(str(data),))
        command = [python_paths(False)[0], "-I", "-S", "-c", code]
        info_r, info_w = os.pipe()
        try:
            argv = (bwrap_command(policy, "bwrap", info_w, command) if mechanism == "bwrap"
                    else namespaces_command(policy, sys.executable, info_w, command))[0]
            done = subprocess.run(argv, pass_fds=(info_w,), capture_output=True, text=True,
                                  env={}, timeout=30)
        finally:
            os.close(info_w)
            os.close(info_r)
        assert done.stdout.strip() == str(["Read-only file system"] * 2), (done.stdout,
                                                                            done.stderr)
        assert not (data / "inner" / "x").exists()
    finally:
        libc.umount2(str(data / "inner").encode(), 2)


def test_code_writes_only_its_work_folder(run: Run, tmp_path: Path) -> None:
    outside = tmp_path / "escaped.txt"
    code = (f"import os, sys\nout = []\n"
            f"for path in {[str(outside), '/usr/escaped', '/etc/escaped', '/escaped']!r} + "
            f"[os.path.join(sys.prefix, 'escaped'), '/proc/sys/kernel/hostname']:\n"
            f"    try:\n"
            f"        with open(path, 'w') as f:\n"
            f"            f.write('x')\n"
            f"        out.append('WROTE ' + path)\n"
            f"    except OSError as e:\n"
            f"        out.append(type(e).__name__)\n"
            f"open('/tmp/mine.txt', 'w').write('kept')\n"
            f"print(out)")
    result = run.repl(code)
    assert result.success and "WROTE" not in result.content, result.content
    assert not outside.exists()
    # The work folder is private to the run and survives between its calls.
    assert run.repl("open('/tmp/mine.txt').read()").content.strip() == "'kept'"
    jarvis_still_answers(run)


def test_code_has_no_capabilities_and_sees_only_its_own_processes(run: Run) -> None:
    code = ("import ctypes, os, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "status = open('/proc/self/status').read()\n"
            "cap = max(l.split()[1] for l in status.splitlines() if l.startswith('Cap'))\n"
            "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
            "unshare = libc.unshare(0x10000000)\n"  # a nested user namespace
            "mount = libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)\n"
            "try:\n    os.setuid(0); uid = 'ROOT'\nexcept OSError:\n    uid = os.getuid()\n"
            "print(cap, pids, unshare, mount, uid, socket.gethostname())")
    result = run.once(code)
    assert result.success, result.content
    cap, *rest = result.content.split(" ", 1)
    assert cap == "0000000000000000", result.content
    assert "[1]" in rest[0] or "[1, 2]" in rest[0], result.content  # the sandbox's own only
    assert " -1 -1 65534 sandbox" in result.content, result.content
    assert str(os.getpid()) not in result.content
    jarvis_still_answers(run)


def test_code_cannot_reach_a_loopback_listener(run: Run) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    code = ("import socket\nout = []\n"
            f"for host in ('127.0.0.1', 'localhost', '::1'):\n"
            f"    try:\n"
            f"        socket.create_connection((host, {port}), timeout=2).close()\n"
            f"        out.append('CONNECTED')\n"
            f"    except OSError as e:\n"
            f"        out.append(type(e).__name__)\n"
            "print(out, [n for _, n in socket.if_nameindex()])")
    try:
        for result in (run.repl(code), run.once(code)):
            assert result.success and "CONNECTED" not in result.content, result.content
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    jarvis_still_answers(run)


def test_landlock_and_seccomp_are_in_force(run: Run) -> None:
    # The mounts alone would let the code list / and get ENETUNREACH on connect; Landlock
    # answers EACCES first for files. A TCP socket is refused before Landlock's TCP rule is
    # reached: seccomp's EPERM (without the network, datagram sockets only). seccomp mode 2
    # and no_new_privs are visible in /proc.
    code = ("import errno, os, socket\nout = []\n"
            "try:\n    os.listdir('/')\n    out.append('listed')\n"
            "except PermissionError as e:\n    out.append('landlock-fs ' + errno.errorcode[e.errno])\n"
            "try:\n    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
            "except PermissionError as e:\n    out.append('no-tcp ' + errno.errorcode[e.errno])\n"
            "except OSError as e:\n    out.append(type(e).__name__)\n"
            "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
            "print(out, status['Seccomp'].strip(), status['NoNewPrivs'].strip())")
    result = run.once(code)
    assert result.success, result.content
    assert result.content.strip() == "['landlock-fs EACCES', 'no-tcp EPERM'] 2 1", result.content
    proc = run.tools[0].resource_spec().factory()
    try:
        assert proc.protection["landlock"] >= 4 and proc.protection["seccomp"]
    finally:
        proc.close()


SECCOMP_DENIED_X86_64 = {  # called with zero arguments: without the filter each would answer
    # something else than EPERM here (EFAULT, EINVAL, EBADF, ESRCH, or success as root)
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_open": 434,
    "pidfd_getfd": 438, "process_madvise": 440, "rt_sigqueueinfo": 129,
    "rt_tgsigqueueinfo": 297, "kcmp": 312, "userfaultfd": 323, "perf_event_open": 298,
    "bpf": 321, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "add_key": 248, "request_key": 249, "keyctl": 250, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsmount": 432, "mount_setattr": 442,
    "name_to_handle_at": 303, "open_by_handle_at": 304, "setrlimit": 160, "syslog": 103,
    # memory RLIMIT_AS does not count (msgget(0, 0) would create a queue)
    "memfd_create": 319, "shmget": 29, "shmat": 30, "shmdt": 67, "msgget": 68, "semget": 64,
    # a signal of the code's choosing later (SIGCONT resumed a frozen repl), personas
    "timer_create": 222, "mq_open": 240, "mq_notify": 244, "personality": 135,
    # quotas of the whole host or of the host uid (test_sandbox_host_resources.py)
    "io_setup": 206, "inotify_init": 253, "inotify_init1": 294, "epoll_create": 213,
    "epoll_create1": 291,
}


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 syscall numbers")
@pytest.mark.parametrize("isolation", ["bwrap", "none"])
def test_seccomp_denies_the_kernel_attack_surface(isolation: str) -> None:
    # With isolation "none" as root (CI), nothing but the filter answers EPERM to these.
    tool = CodeInterpreterTool(isolation=isolation, **LIMITS)
    code = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nbad = []\n"
            f"for name, nr in {SECCOMP_DENIED_X86_64!r}.items():\n"
            "    ctypes.set_errno(0)\n"
            "    if libc.syscall(nr, 0, 0, 0, 0, 0, 0) != -1 or ctypes.get_errno() != 1:\n"
            "        bad.append(name)\n"
            "print(bad)")
    result = call(ToolExecutor([tool]), "code_interpreter", code)
    assert result.success and result.content.strip() == "[]", result.content


REFUSE_SECCOMP = (  # run argv[1:] under a filter: prctl(PR_SET_SECCOMP, ...) gets EINVAL
    "import ctypes, os, sys\n"
    "f = [(0x20, 0, 0, 0), (0x15, 0, 3, 157), (0x20, 0, 0, 16), (0x15, 0, 1, 22),\n"
    "     (0x06, 0, 0, 0x50016), (0x06, 0, 0, 0x7FFF0000)]\n"
    "class F(ctypes.Structure):\n"
    "    _fields_ = [('code', ctypes.c_ushort), ('jt', ctypes.c_ubyte),\n"
    "                ('jf', ctypes.c_ubyte), ('k', ctypes.c_uint)]\n"
    "class P(ctypes.Structure):\n"
    "    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.POINTER(F))]\n"
    "libc = ctypes.CDLL(None)\n"
    "assert libc.prctl(38, 1, 0, 0, 0) == 0\n"
    "prog = P(len(f), (F * len(f))(*[F(*i) for i in f]))\n"
    "assert libc.prctl(22, 2, ctypes.byref(prog), 0, 0) == 0\n"
    "argv = sys.argv[1:]\n"
    "os.execve(argv[0], argv, dict(os.environ))\n")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 syscall numbers")
def test_a_seccomp_filter_that_cannot_be_installed_stops_the_start(tmp_path: Path) -> None:
    # The worker ran on without its filter (and said so only in a field nobody read) when
    # prctl(PR_SET_SECCOMP) failed. A parent's filter that refuses that prctl stands in for
    # a kernel that cannot; the worker must answer "not ready" instead of running code.
    import json
    import struct

    from jarvis.sandbox import SandboxPolicy
    from jarvis.sandbox.launch import plain_command

    argv, env = plain_command(SandboxPolicy(isolation="none"), str(tmp_path))
    config = json.loads(argv[-1])
    config.pop("parent")  # the wrapper's exec keeps the pid, but not jarvis as the parent
    done = subprocess.run([sys.executable, "-c", REFUSE_SECCOMP, *argv[:-1], json.dumps(config)],
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    size = struct.unpack(">I", done.stdout[:4])[0]
    hello = json.loads(done.stdout[4:4 + size])
    assert hello["ready"] is False, hello
    assert "cannot install the seccomp filter" in hello["error"], hello


def test_network_true_gives_the_host_network(mechanism: str) -> None:
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, network=True))
    try:
        port = listener.getsockname()[1]
        result = proc.run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), "
                          f"timeout=5).close()\n'connected'")
        assert result.ok and result.output.strip() == "'connected'", result.error
        listener.accept()[0].close()
    finally:
        proc.close()
        listener.close()


def test_only_the_allowed_site_packages_are_visible(mechanism: str) -> None:
    import site

    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    code = (f"import os\nseen = [os.path.isdir(p) and bool(os.listdir(p)) for p in "
            f"{site.getsitepackages()!r}]\n"
            "try:\n    import pydantic\n    seen.append('pydantic')\n"
            "except ImportError:\n    seen.append('no pydantic')\nprint(seen)")
    for allowed, expected in ((True, "True"), (False, "False")):
        proc = SandboxedPython(SandboxPolicy(isolation=mechanism, site_packages=allowed))
        try:
            result = proc.run(code)
        finally:
            proc.close()
        assert result.ok, result.error
        assert result.output.startswith(f"[{expected}"), result.output
        assert ("'pydantic'" in result.output) is allowed, result.output


# --- processes and threads -----------------------------------------------------------------------
BURN = ("import os, threading\n"
        "def burn():\n"
        "    while True:\n"
        "        pass\n"
        "threading.Thread(target=burn).start()\n"   # non-daemon: would keep Python alive
        "try:\n    os.fork()\nexcept OSError as e:\n    print(type(e).__name__)\n")


def test_threads_and_forks_are_gone_after_a_code_interpreter_call(run: Run) -> None:
    before = descendants()
    result = run.once(BURN + "'returned'")
    assert result.success and "BlockingIOError" in result.content, result.content
    # The call killed its whole sandbox: nothing of it is left, burning or not.
    assert not wait_until_gone(new_descendants(before), timeout=5)
    jarvis_still_answers(run)


def test_repl_threads_are_frozen_between_calls_and_counted_in_the_cpu_limit(
        mechanism: str) -> None:
    repl = ReplTool(isolation=mechanism, **{**LIMITS, "timeout": 30.0})
    run = Run((repl,), f"frozen-{mechanism}")
    try:
        result = run.repl(BURN + "x = 'state'")
        assert result.success, result.content
        proc = default_manager().leased(run.run_id, repl.resource_spec())
        used = proc.cpu_used()
        time.sleep(0.5)  # the burning thread would use up to 0.5 s of CPU here if it ran
        assert proc.cpu_used() - used < 0.05
        # During the next call the thread runs again, and its CPU counts against the call:
        # this code only sleeps, waiting for the process's CPU time (all threads) to grow.
        start = time.monotonic()
        busy = run.repl("import time\nt0 = time.process_time()\n"
                        "while time.process_time() - t0 < 5:\n    time.sleep(0.05)\nx")
        assert not busy.success and busy.metadata["error_kind"] == "cpu", busy.content
        assert time.monotonic() - start < 30
    finally:
        run.close()


def test_the_sandbox_ends_when_its_session_ends(run: Run) -> None:
    before = descendants()
    assert run.repl(BURN + "1").success
    started = new_descendants(before)
    assert len(started) >= 2  # the launcher/bwrap and the interpreter at least
    run.close()
    assert not wait_until_gone(started, timeout=5)


@pytest.mark.parametrize("during_call", [False, True])
def test_the_sandbox_dies_with_a_sigkilled_jarvis(mechanism: str, during_call: bool) -> None:
    script = (
        "import os, signal, sys, threading\n"
        "from jarvis.core.types import ToolCall\n"
        "from jarvis.tools.executor import ToolExecutor\n"
        "from jarvis.tools.repl import ReplTool\n"
        f"ex = ToolExecutor([ReplTool(requires_confirmation=False, isolation={mechanism!r})],"
        " run_id='r')\n"
        # Cleared, its death signal would let the interpreter outlive jarvis (the worker is
        # the namespace's init with isolation "namespaces").
        "code = ('import ctypes, threading, time\\n'\n"
        "        'assert ctypes.CDLL(None).prctl(1, 0, 0, 0, 0) == -1\\n'\n"
        "        'threading.Thread(target=lambda: time.sleep(3600)).start()\\n1')\n"
        "r = ex.execute(ToolCall(id='c', name='repl', arguments={'code': code}))\n"
        "assert r.success, r.content\n"
        f"if {during_call!r}:\n"
        "    threading.Thread(target=ex.execute, args=(ToolCall(id='d', name='repl', "
        "arguments={'code': 'while True: pass'}),)).start()\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
    )
    jarvis = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert jarvis.stdout.readline().strip() == "ready"
        sandbox = descendants(jarvis.pid)
        assert len(sandbox) >= 2
    finally:
        jarvis.kill()
        jarvis.wait(10)
        jarvis.stdin.close()
        jarvis.stdout.close()
    assert not wait_until_gone(sandbox, timeout=10)


def test_a_sandbox_that_ended_never_signals_a_reused_pid(mechanism: str) -> None:
    # The code can end its own sandbox (os._exit). Its pids are then free, and on a host with
    # pid_max 32768 another process soon holds one: close() (again when the run ends) killed
    # "the sandbox's init" by pid. Here a sleeper stands for the process that got the pid.
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    proc = SandboxedPython(SandboxPolicy(isolation=mechanism))
    ended = proc.run("import os\nos._exit(0)")
    assert not ended.ok and ended.error_kind == "crashed", ended
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        proc.init_pid = proc.pid = sleeper.pid
        proc.close()
        assert pid_alive(sleeper.pid)
        again = proc.run("1")
        assert not again.ok and again.error_kind == "crashed"
        assert pid_alive(sleeper.pid)
    finally:
        sleeper.kill()
        sleeper.wait(10)


# --- the reply channel -------------------------------------------------------------------------------
def test_forged_replies_cannot_shift_or_fake_other_calls(run: Run) -> None:
    forge = ("import sys\nw = sys.modules['__main__']\n"
             "for i in range(50):\n"
             "    w.send({'id': 'guess-%d' % i, 'ok': True, 'output': 'FORGED\\n'})\n"
             "w.send({'ok': True, 'output': 'FORGED\\n'})\n"
             "w.send({'id': None, 'ok': True, 'output': 'FORGED\\n'})\n"
             "x = 'real state'\n'real answer'")
    first = run.repl(forge)
    assert first.success and first.content.strip() == "'real answer'", first.content
    for expected in ("42", "'real state'"):
        later = run.repl("40 + 2" if expected == "42" else "x")
        assert later.success and later.content.strip() == expected, later.content
    # A thread that keeps forging while later calls run does not shift them either.
    assert run.repl("import threading, sys, time\nw = sys.modules['__main__']\n"
                    "def spam():\n    while True:\n"
                    "        w.send({'id': 'x', 'ok': True, 'output': 'FORGED\\n'})\n"
                    "        time.sleep(0.001)\n"
                    "threading.Thread(target=spam, daemon=True).start()").success
    for n in range(5):
        later = run.repl(f"{n} * 2")
        assert later.success and later.content.strip() == str(n * 2), later.content
    # Raw bytes on the reply pipe only break this run's own interpreter, loudly.
    broken = run.repl("import os, sys\nos.write(sys.modules['__main__'].OUT_FD, "
                      "b'\\x00\\x00\\x00\\x05junk!')\nimport time\ntime.sleep(0.5)\n1")
    assert not broken.success or broken.content.strip() == "1", broken.content
    after = run.repl("7")
    assert after.success and after.content.strip() == "7", after.content
    jarvis_still_answers(run)


def test_an_interrupt_while_the_reply_is_written_does_not_kill_the_interpreter() -> None:
    # jarvis's SIGINT (a call's timeout) can come while the worker writes its reply: the
    # KeyboardInterrupt cut the frame, and the worker died ("exit code 1") or sent a garbled
    # second one. Here the code's own thread sends SIGINTs for a while after a big reply.
    from collections import Counter

    from jarvis.sandbox import SandboxedPython, SandboxLimits, SandboxPolicy

    policy = SandboxPolicy(isolation="bwrap", limits=SandboxLimits(max_output_chars=3_000_000))
    code = ("import os, signal, threading, time\n"
            "def spam():\n    start = time.monotonic()\n"
            "    while time.monotonic() - start < 0.2:\n"
            "        os.kill(os.getpid(), signal.SIGINT)\n        time.sleep(0.0005)\n"
            "threading.Thread(target=spam, daemon=True).start()\n"
            "try:\n    print('x' * 2_500_000)\nexcept KeyboardInterrupt:\n    pass\n")
    kinds: Counter = Counter()
    proc = SandboxedPython(policy)
    try:
        for _ in range(20):
            result = proc.run(code)
            kinds[result.error_kind] += 1
            if not proc.alive:
                proc.close()
                proc = SandboxedPython(policy)
    finally:
        proc.close()
    assert set(kinds) <= {None, "exception"}, kinds


def test_a_stream_of_stale_frames_does_not_hide_a_cpu_overrun(mechanism: str) -> None:
    # jarvis checked the sandbox's CPU only when no frame arrived for CPU_POLL seconds: a
    # thread sending junk frames every few ms kept code that ignores SIGXCPU burning until
    # the wall-clock timeout instead of its CPU budget.
    code = ("import signal, sys, threading\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
            "w = sys.modules['__main__']\n"
            "def spam():\n    while True:\n        w.send({'id': 'stale'})\n"
            "threading.Thread(target=spam, daemon=True).start()\nwhile True:\n    pass\n")
    # The budget is 1 s (+2 s grace); the worker gets under a core while jarvis reads.
    # It ends by its CPU budget, not by the 20 s wall-clock timeout (error_kind says which;
    # the wall time itself depends on the machine's load).
    tool = CodeInterpreterTool(isolation=mechanism, **{**LIMITS, "timeout": 20.0})
    result = call(ToolExecutor([tool]), "code_interpreter", code)
    assert not result.success and result.metadata["error_kind"] == "cpu", result.content


# --- bombs -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("code", "kinds", "needle"), [
    ("hog = bytearray(2 * 1024 ** 3)", {"memory"}, "MemoryError"),
    ("n = 0\nwhile True:\n    n += 1", {"cpu", "timeout"}, "CPU time limit"),
    ("fds = [open('/dev/null') for _ in range(100_000)]", {"exception"}, "Too many open files"),
    ("print('x' * 10_000_000)", {"output"}, "output limit exceeded"),
    ("import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True:\n    pass",
     {"cpu", "timeout"}, "CPU time limit"),
    ("with open('/tmp/big', 'wb') as f:\n    for _ in range(1000):\n"
     "        f.write(b'x' * 1024 * 1024)", {"exception"}, "OSError"),
    ("import threading, time\nfor _ in range(100_000):\n"
     "    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
     {"exception", "memory"}, "Error"),
])
def test_bombs_are_stopped_with_a_clear_failure(run: Run, code: str, kinds: set[str],
                                                needle: str) -> None:
    assert run.repl("keep = 'still here'").success
    start = time.monotonic()
    result = run.repl(code)
    assert not result.success and result.metadata["error_kind"] in kinds, result.content
    assert needle in result.content or result.metadata["error_kind"] == "timeout", result.content
    assert len(result.content) < 2_000 + 500
    assert time.monotonic() - start < 20
    survived = run.repl("keep")
    assert survived.content.strip() == "'still here'" or survived.metadata.get(
        "fresh_interpreter"), survived.content
    jarvis_still_answers(run)


def test_memory_that_rlimit_as_does_not_count_is_refused(run: Run) -> None:
    # memfd pages written with write() and SysV shared memory attached, filled and detached
    # are not in the address space: 300 MB of either went past memory_mb = 256, and with
    # 256 descriptors (or no limit at all for SysV) to the host's whole RAM.
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nout = []\n"
            "try:\n    fd = os.memfd_create('balloon')\n"
            "    for _ in range(300):\n        os.write(fd, b'x' * 2 ** 20)\n"
            "    out.append('memfd: 300 MB')\n"
            "except OSError as e:\n    out.append(f'memfd: {e.strerror}')\n"
            "for name, args in (('shmget', (0, 300 << 20, 0o1600)), ('msgget', (0, 0o1600)),\n"
            "                   ('semget', (0, 1, 0o1600))):\n"
            "    ok = getattr(libc, name)(*args) >= 0\n"
            "    out.append(f'{name}: ' + ('made' if ok else os.strerror(ctypes.get_errno())))\n"
            "print(out)")
    for result in (run.repl(code), run.once(code)):
        assert result.success, result.content
        assert result.content.strip() == str([f"{name}: Operation not permitted" for name in (
            "memfd", "shmget", "msgget", "semget")]), result.content
    jarvis_still_answers(run)


def test_the_work_folder_bounds_files_as_well_as_bytes(run: Run) -> None:
    # tmpfs `size` does not count empty files: 300 000 of them took 300 MB of the host's
    # kernel memory in 3 s. The work folder holds one file per 4 KiB of tmp_mb (64 MB: 16 384):
    # jarvis's launcher mounts it so (then: No space left on device); bubblewrap cannot, so
    # jarvis counts the files from outside, also while the code runs, and ends the sandbox.
    code = ("import os\nn = 0\ntry:\n    for n in range(200_000):\n"
            "        os.close(os.open(f'/tmp/{n}', os.O_CREAT | os.O_WRONLY))\n"
            "except OSError as e:\n    print(n, e.strerror)\n")
    for result in (run.repl(code), run.once(code)):
        if run.tools[0].policy.isolation == "namespaces":
            assert result.success, result.content
            count, reason = result.content.split(" ", 1)
            assert 16_000 < int(count) <= 16_384, result.content
            assert reason.strip() == "No space left on device", result.content
        else:
            assert not result.success and result.metadata["error_kind"] == "disk", (
                result.content)
            assert "over its limit of 16384 files" in result.content, result.content
    # Extended attributes are kernel memory that `size` does not count either (64 KiB each
    # on one file: 128 MB went through); tmpfs counts them with the files.
    xattrs = ("import os\nopen('/tmp/x', 'w').close()\nn = 0\ntry:\n"
              "    for n in range(2_000):\n"
              "        os.setxattr('/tmp/x', f'user.k{n}', b'v' * 65536)\n"
              "except OSError as e:\n    print(n, e.strerror)\n")
    result = run.once(xattrs)
    if run.tools[0].policy.isolation == "namespaces":
        assert result.success and result.content.split(" ", 1)[1].strip() == (
            "No space left on device"), result.content
        assert int(result.content.split()[0]) < 300, result.content
    else:
        assert not result.success and result.metadata["error_kind"] == "disk", result.content
    # Deleting what it made keeps an interpreter (and its state) alive.
    ok = run.repl("import os\nfor n in range(16_000):\n    open(f'/tmp/{n}', 'w').close()\n"
                  "for n in range(16_000):\n    os.remove(f'/tmp/{n}')\nkept = 'yes'")
    assert ok.success, ok.content
    assert run.repl("kept").content.strip() == "'yes'"
    jarvis_still_answers(run)


def test_code_cannot_connect_to_unix_sockets(mechanism: str, tmp_path: Path) -> None:
    # A socket file in a folder the config mounts (a host server's, read-only) is reachable
    # by connect(), which Landlock does not check; abstract sockets stop at the network
    # namespace. socketpair() still works (asyncio needs it).
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    shared = tmp_path / "shared"
    shared.mkdir()
    listeners = []
    for address in (str(shared / "host.sock"), f"\0jarvis-test-{os.getpid()}-{mechanism}"):
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(address)
        listener.listen(1)
        listener.settimeout(0.5)
        listeners.append(listener)
    os.chmod(shared / "host.sock", 0o777)
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, read_only_paths=(str(shared),)))
    try:
        result = proc.run(
            "import asyncio, socket\nout = []\n"
            f"for address in ({str(shared / 'host.sock')!r}, "
            f"'\\0jarvis-test-{os.getpid()}-{mechanism}'):\n"
            "    try:\n        s = socket.socket(socket.AF_UNIX)\n"
            "        s.settimeout(2)\n        s.connect(address)\n"
            "        out.append('connected')\n"
            "    except OSError as e:\n        out.append(type(e).__name__)\n"
            "a, b = socket.socketpair()\na.send(b'p')\nout.append(b.recv(1).decode())\n"
            "async def main():\n    return 'loop'\nout.append(asyncio.run(main()))\nout")
        assert result.ok, result.error
        assert result.output.strip() == str(["PermissionError", "PermissionError", "p", "loop"])
        for listener in listeners:
            with pytest.raises(TimeoutError):
                listener.accept()
    finally:
        proc.close()
        for listener in listeners:
            listener.close()


FIND_CALL_ID = ("import sys\nw = sys.modules['__main__']\nf = sys._getframe()\ncid = None\n"
                "while f:\n    cid = f.f_locals.get('call_id', cid)\n    f = f.f_back\n")


def test_a_reply_forged_with_the_call_id_is_still_bounded(mechanism: str) -> None:
    # The code can read its own call's id from the worker's frames and reply in its place:
    # that reply is the code's word, so jarvis bounds it again (output limit, error size),
    # and a frame bigger than an honest reply could be ends the interpreter unread.
    from jarvis.sandbox import SandboxedPython, SandboxLimits, SandboxPolicy

    limits = SandboxLimits(max_output_chars=1_000)
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism, limits=limits))
    try:
        result = proc.run(FIND_CALL_ID + "w.send({'id': cid, 'ok': True, 'output': 'A' * 50_000})")
        assert result.ok and result.output == "A" * 1_000 and result.truncated
        result = proc.run(FIND_CALL_ID + "w.send({'id': cid, 'ok': False, 'error': 'E' * 50_000})")
        assert not result.ok and len(result.error) <= 4_000
        result = proc.run(FIND_CALL_ID + "w.send({'id': cid, 'ok': True, 'output': 'A' * 10**6})")
        assert not result.ok and result.error_kind == "crashed" and "over the" in result.error
    finally:
        proc.close()


def test_an_honest_reply_of_escaped_characters_is_not_too_big() -> None:
    # Printing max_output_chars control characters is allowed, but JSON spends 6 bytes on
    # each ("\\u0001"): past 8 MB the reply was refused and the interpreter killed.
    from jarvis.sandbox import SandboxedPython, SandboxLimits, SandboxPolicy

    proc = SandboxedPython(SandboxPolicy(isolation="bwrap", limits=SandboxLimits(
        max_output_chars=2_000_000)))
    try:
        result = proc.run("print('\\x01' * 1_999_000)\nx = 1")
        assert result.ok and result.output == "\x01" * 1_999_000 + "\n", result.error
        assert proc.run("x").output.strip() == "1"
    finally:
        proc.close()


def test_a_deeply_nested_reply_is_a_clear_failure(run: Run) -> None:
    # json.loads raises RecursionError (not ValueError) on [[[[...: it escaped the tool.
    # (a frame for this call: jarvis parses no other; 40 000 levels fit in a reply's bound)
    nested = FIND_CALL_ID + (
        "import os, struct\nbody = b'{\"id\": \"%s\", \"x\": ' % cid.encode() + b'[' * 40000 "
        "+ b']' * 40000 + b'}'\n"
        "os.write(w.OUT_FD, struct.pack('>I', len(body)) + body)\nimport time\ntime.sleep(1)")
    for result in (run.repl(nested), run.once(nested)):
        assert not result.success and result.metadata.get("error_kind") == "crashed", (
            result.content)
        assert "unreadable reply" in result.content, result.content
    assert run.repl("1 + 1").content.strip() == "2"
    jarvis_still_answers(run)


# --- refusing to run without isolation, and saying which mechanism is in force -----------------
def jarvis_cli(*args: str, env: dict[str, str], prefix: tuple[str, ...] = ()):
    return subprocess.run([*prefix, sys.executable, "-m", "jarvis.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.same_for_every_uid
def test_code_tools_refuse_when_the_configured_mechanism_is_missing(cli_env) -> None:
    # bwrap forced, on a PATH without it: one line saying why and how to fix it, no traceback.
    env = {**cli_env, "PATH": str(Path(sys.executable).parent), "JARVIS_SANDBOX": "bwrap"}
    for tool in ("repl", "code_interpreter"):
        done = jarvis_cli("tools", "run", tool, '{"code": "print(1)"}', "--yes", env=env)
        assert done.returncode == 1 and done.stdout == "", (done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert "code sandbox unavailable: bubblewrap (bwrap) is not installed" in lines[0]
        for fix in ("install bubblewrap", "user namespaces", 'isolation = "none"'):
            assert fix in lines[0]


@pytest.mark.same_for_every_uid
def test_auto_refuses_on_a_host_without_user_namespaces(cli_env) -> None:
    # A real host without user namespaces: jarvis runs inside a user namespace whose
    # user.max_user_namespaces is 0 (bwrap --disable-userns), so neither bwrap nor the
    # unshare launcher can build a sandbox there.
    no_userns = ("bwrap", "--unshare-user", "--unshare-pid", "--disable-userns", "--bind", "/",
                 "/", "--dev", "/dev", "--proc", "/proc", "--")
    done = jarvis_cli("tools", "run", "code_interpreter", '{"code": "print(1)"}', "--yes",
                      env=cli_env, prefix=no_userns)
    assert done.returncode == 1 and "1" not in done.stdout, (done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "code sandbox unavailable" in done.stderr
    doctor = jarvis_cli("doctor", "--json", env=cli_env, prefix=no_userns)
    assert doctor.returncode == 1
    import json

    info = json.loads(doctor.stdout)["sandbox"]
    assert info["mechanism"] is None and info["user_namespaces"] is False
    # Opting out is explicit, and then the code runs (unisolated, as the config says).
    opted = jarvis_cli("tools", "run", "code_interpreter", '{"code": "print(1)"}', "--yes",
                       env={**cli_env, "JARVIS_SANDBOX": "none"}, prefix=no_userns)
    assert opted.returncode == 0 and opted.stdout.strip() == "1", opted.stderr


def test_doctor_and_tools_show_name_the_mechanism_in_force(cli_env) -> None:
    import json

    # --no-connect: no engine runs here, which doctor would report as a failure of its own.
    done = jarvis_cli("doctor", "--json", "--no-connect", env=cli_env)
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)["sandbox"]
    assert info["mechanism"] == "bwrap" and info["bwrap_works"] and info["user_namespaces"]
    assert info["landlock_abi"] >= 1 and info["seccomp"]
    text = jarvis_cli("doctor", "--no-connect", env=cli_env).stdout
    assert text.startswith("sandbox: bwrap (user, pid, mount, ipc, uts, net namespaces, Landlock")
    shown = jarvis_cli("tools", "show", "repl", env=cli_env).stdout
    assert "\nsandbox: bwrap (" in shown
    forced = jarvis_cli("tools", "show", "code_interpreter", "--json",
                        env={**cli_env, "JARVIS_SANDBOX": "namespaces"})
    assert json.loads(forced.stdout)["sandbox_in_force"]["mechanism"] == "namespaces"
    none = jarvis_cli("tools", "show", "repl", env={**cli_env, "JARVIS_SANDBOX": "none"}).stdout
    assert 'sandbox: none (isolation = "none"' in none


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 syscall numbers")
def test_doctor_probes_the_real_worker_not_just_bwrap(cli_env, tmp_path: Path) -> None:
    # The probe ran `python -c pass` in a bwrap sandbox: on a host where bwrap runs but the
    # worker cannot restrict itself (here: a bwrap whose processes cannot install a seccomp
    # filter), doctor said "bwrap" and exit 0 while every code call failed.
    import json
    import shutil

    fake = tmp_path / "bin"
    fake.mkdir()
    # the interpreter itself, not the venv's link to it (the sandbox stages only that file)
    (fake / "bwrap").write_text(f"#!{os.path.realpath(sys.executable)} -I\n" + REFUSE_SECCOMP.replace(
        "argv = sys.argv[1:]", f"argv = [{shutil.which('bwrap')!r}, *sys.argv[1:]]"))
    (fake / "bwrap").chmod(0o755)
    env = {**cli_env, "PATH": f"{fake}:{cli_env['PATH']}", "JARVIS_SANDBOX": "bwrap"}
    done = jarvis_cli("doctor", "--json", env=env)
    assert done.returncode == 1, done.stdout
    info = json.loads(done.stdout)["sandbox"]
    assert info["mechanism"] is None and info["bwrap_works"] is False, info
    assert "cannot install the seccomp filter" in info["problem"], info["problem"]
    ran = jarvis_cli("tools", "run", "code_interpreter", '{"code": "print(1)"}', "--yes",
                     env=env)
    assert ran.returncode == 1 and "cannot install the seccomp filter" in ran.stderr, ran.stderr


@pytest.mark.same_for_every_uid
def test_doctor_names_a_code_tools_own_isolation(cli_env) -> None:
    # [tools.repl] isolation wins over [sandbox] for repl: doctor reported only [sandbox]
    # ("bwrap") while repl ran as a plain process that reads the home folder.
    import json

    config = Path(cli_env["JARVIS_HOME"]) / "config.toml"
    config.write_text('[tools.repl]\nisolation = "none"\n')
    text = jarvis_cli("doctor", "--no-connect", env=cli_env)  # no engine runs here
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("sandbox: bwrap (")
    assert "\nrepl (its own isolation = 'none'): none (isolation = \"none\"" in text.stdout
    info = json.loads(jarvis_cli("doctor", "--json", "--no-connect", env=cli_env).stdout)
    assert info["tools"]["repl"]["mechanism"] == "none" and "code_interpreter" not in info["tools"]
    # A tool whose own mechanism cannot work makes doctor fail, like [sandbox] would.
    config.write_text('[tools.code_interpreter]\nisolation = "bwrap"\n')
    env = {**cli_env, "PATH": str(Path(sys.executable).parent)}
    broken = jarvis_cli("doctor", "--no-connect", env=env)
    assert broken.returncode == 1, broken.stdout
    assert broken.stdout.startswith("sandbox: namespaces (")
    assert "\ncode_interpreter (its own isolation = 'bwrap'): code sandbox unavailable: " \
        "bubblewrap (bwrap) is not installed" in broken.stdout


def test_sandbox_config_is_validated_and_reaches_the_tools(tmp_path: Path,
                                                           jarvis_home: Path) -> None:
    from jarvis.core.config import load_config
    from jarvis.errors import ConfigError
    from jarvis.tools.catalog import build_tool

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("visible")
    out = tmp_path / "out"
    out.mkdir()
    give_to_sandbox(out)  # the sandbox's host uid writes there
    config_file = tmp_path / "config.toml"
    config_file.write_text('[sandbox]\nisolation = "namespaces"\nread_only_paths = ["shared"]\n'
                           'writable_paths = ["out"]\nmemory_mb = 300\ntimeout = 7\n'
                           '[tools.repl]\ntimeout = 3\nrequires_confirmation = false\n')
    config = load_config(config_file)
    assert config.sandbox.read_only_paths == [str(shared)]
    tool = build_tool("repl", {"config": config}, config.tools.settings["repl"])
    assert tool.policy.isolation == "namespaces" and tool.limits.memory_mb == 300
    assert tool.limits.timeout == 3  # the tool's own setting wins over [sandbox]
    ex = ToolExecutor([tool], run_id="config-paths")
    try:
        result = call(ex, "repl", f"open({str(out / 'w.txt')!r}, 'w').write('ok')\n"
                                  f"open({str(shared / 'data.txt')!r}).read()")
        assert result.success and result.content.strip() == "'visible'", result.content
        denied = call(ex, "repl", f"open({str(shared / 'x')!r}, 'w')")
        assert not denied.success and "Read-only file system" in denied.content
    finally:
        release_run("config-paths")
    assert (out / "w.txt").read_text() == "ok"
    missing = ReplTool(config=load_config(overrides={"sandbox.writable_paths": [
        str(tmp_path / "nowhere")]}), requires_confirmation=False)
    result = missing.execute(code="1")
    assert not result.success and "writable_paths" in result.content and "does not exist" in \
        result.content, result.content
    # A folder holding jarvis's secrets (JARVIS_HOME, the home folder) is refused, loudly.
    for wide in (str(jarvis_home.parent), "/"):
        too_wide = ReplTool(config=load_config(overrides={"sandbox.read_only_paths": [wide]}),
                            requires_confirmation=False)
        result = too_wide.execute(code="1")
        assert not result.success and "holds" in result.content, result.content
    # The [sandbox] defaults are the sandbox's own defaults (two places, one truth).
    from dataclasses import asdict

    from jarvis.core.config import SandboxConfig
    from jarvis.sandbox import SandboxLimits

    defaults = SandboxConfig().model_dump()
    assert {k: defaults[k] for k in asdict(SandboxLimits())} == asdict(SandboxLimits())
    config_file.write_text('[sandbox]\nisolation = "chroot"\n')
    with pytest.raises(ConfigError, match="sandbox.isolation"):
        load_config(config_file)
    config_file.write_text('[sandbox]\nnetwork = false\nbogus = 1\n')
    with pytest.raises(ConfigError, match=r"sandbox.bogus: unknown key; valid keys in \[sandbox\]"):
        load_config(config_file)


def test_the_sandbox_package_exports_what_it_names() -> None:
    import jarvis.sandbox as sandbox

    for name in sandbox.__all__:
        assert getattr(sandbox, name) is not None, name
    # Importing jarvis (or its tools) never starts a probe or loads the sandbox.
    done = subprocess.run([sys.executable, "-c", "import sys, jarvis, jarvis.tools\n"
                           "print(any(m.startswith('jarvis.sandbox') for m in sys.modules))"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_one_ors_call_cannot_kill_jarvis_serve() -> None:
    # The report: one ORS call killed `jarvis serve`. Here the server runs in this
    # process; the call tries every way it had, and the server answers the next call.
    from urllib.parse import urlparse

    from ors.client import ORS, Task
    from serve_support import running

    from jarvis.server import ServeSettings

    me = os.getpid()
    with running(ServeSettings(approve=True), tools=["code_interpreter", "repl"]) as server, \
            ORS(base_url=server.url, api_key=server.token) as client:
        port = urlparse(server.url).port
        attack = ("import ctypes, os, signal, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                  "limit = (ctypes.c_ulong * 2)(1, 1)\ninfo = ctypes.create_string_buffer(128)\n"
                  f"libc.syscall(302, {me}, 0, limit, None)\n"
                  f"libc.syscall(129, {me}, 9, info)\n"
                  "for pid in (" + str(me) + ", os.getppid(), -1):\n"
                  "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n"
                  "        pass\n"
                  "try:\n"
                  f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                  "    print('REACHED THE SERVER')\n"
                  "except OSError as e:\n    print(type(e).__name__)\n")
        with client.environment("jarvis").session(task=Task("jarvis", {})) as session:
            for tool in ("code_interpreter", "repl"):
                out = session.call_tool(tool, {"code": attack})
                assert "REACHED" not in out.blocks[0].text, out.blocks[0].text
            after = session.call_tool("code_interpreter", {"code": "6 * 7"})
            assert after.blocks[0].text.strip() == "42"
    assert pid_alive(me)
    assert resource.getrlimit(resource.RLIMIT_CPU) == JARVIS_CPU_LIMIT
