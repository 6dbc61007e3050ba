"""Thread and fork bombs against the code sandbox: the host's pids stay bounded.

jarvis runs as root here (and in CI). The kernel never applies RLIMIT_NPROC to host root, so a
sandbox mapped onto root could start threads until the host ran out of pids. The sandbox runs
as an unprivileged host uid ([sandbox] uid) instead, and RLIMIT_NPROC ([sandbox] max_threads)
bounds its threads and processes together. Each bomb runs through the ToolExecutor exactly as a
model's call would, on both namespace mechanisms, while this test counts the sandbox's tasks on
the host. Run as a normal user (tests/test_sandbox_unprivileged.py), the sandbox's host uid is
that user's own and the bound holds the same way; the tests of a root jarvis's uid switching are
`root_only`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from sandbox_support import (
    SANDBOX_HOST_UID,
    call,
    descendants,
    give_to_sandbox,
    new_descendants,
    parents,
    wait_until_gone,
)

from jarvis.resources import release_run
from jarvis.tools.code_interpreter import CodeInterpreterTool
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.repl import ReplTool

pytestmark = [pytest.mark.usefixtures("nothing_left_behind"),
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")]

LIMITS = {"timeout": 20.0, "cpu_seconds": 10, "memory_mb": 512,
          "requires_confirmation": False, "acquire_timeout": 10.0}
MAX_THREADS = 64  # [sandbox] max_threads default
HOST_UID = 65534  # [sandbox] uid default: the sandbox's host uid under a root jarvis

# Small stacks (memory_mb alone allowed ~8 000 threads of 64 KiB), and it keeps trying for
# a while after the first refusal, so the count below sees the bomb at its largest.
THREAD_BOMB = ("import threading, time\nthreading.stack_size(65536)\n"
               "started = refused = 0\nend = time.monotonic() + 1.5\n"
               "while time.monotonic() < end:\n"
               "    try:\n"
               "        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
               "        started += 1\n"
               "    except (RuntimeError, MemoryError):\n"
               "        refused += 1\n"
               "raise RuntimeError(f'bomb: {started} started, {refused} refused')")
FORK_BOMB = ("import os, time\nforked = refused = 0\nend = time.monotonic() + 1.5\n"
             "while time.monotonic() < end:\n"
             "    try:\n"
             "        if os.fork() == 0:\n"
             "            time.sleep(60)\n"
             "            os._exit(0)\n"
             "        forked += 1\n"
             "    except OSError:\n"
             "        refused += 1\n"
             "raise RuntimeError(f'bomb: {forked} started, {refused} refused')")




def tasks_of(pids: set[int]) -> tuple[int, set[int]]:
    """Threads of `pids` on the host, all together, and the host uids the interpreters that
    run the code have (those under the worker's seccomp filter)."""
    count, uids = 0, set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                status = dict(line.split(":", 1) for line in f.read().splitlines())
        except (OSError, ValueError):
            continue
        count += int(status["Threads"])
        if status["Seccomp"].strip() == "2":
            uids.add(int(status["Uid"].split()[0]))
    return count, uids


def watch(run_call, before: set[int]) -> tuple[object, int, set[int]]:
    """Run `run_call` on a thread; meanwhile count the host tasks of the sandboxes this
    process started (the launcher or bwrap, the sandbox's init, the worker and its threads)."""
    box: dict = {}
    worker = threading.Thread(target=lambda: box.setdefault("result", run_call()))
    worker.start()
    most, uids = 0, set()
    while worker.is_alive():
        count, seen = tasks_of(new_descendants(before))
        most, uids = max(most, count), uids | seen
        time.sleep(0.02)
    worker.join()
    return box["result"], most, uids


def bomb_numbers(content: str) -> tuple[int, int]:
    words = content.split("bomb: ", 1)[1].split()
    return int(words[0]), int(words[2])


@pytest.mark.parametrize("bomb", ["threads", "forks"])
def test_a_bomb_stays_within_max_threads_and_jarvis_goes_on(mechanism: str, bomb: str) -> None:
    code = THREAD_BOMB if bomb == "threads" else FORK_BOMB
    repl = ReplTool(isolation=mechanism, **LIMITS)
    once = CodeInterpreterTool(isolation=mechanism, **LIMITS)
    run_id = f"bomb-{mechanism}-{bomb}"
    executor = ToolExecutor([repl, once], run_id=run_id)
    jarvis_only = descendants()  # whatever this test process ran before: no sandbox
    try:
        assert call(executor, "repl", "keep = 'state'").success
        for name in ("code_interpreter", "repl"):
            before = descendants()
            result, most, uids = watch(lambda n=name: call(executor, n, code), jarvis_only)
            # A clear failure: the code saw each refusal, and reports what it got.
            assert not result.success and result.metadata["error_kind"] == "exception", (
                result.content)
            started, refused = bomb_numbers(result.content)
            assert refused > 0, result.content
            if bomb == "threads":
                # It did try: before the bound it started 507 here (memory_mb stopped it),
                # and with more memory, thousands (the host's pids ran out).
                assert MAX_THREADS - 8 <= started < MAX_THREADS, result.content
            else:
                assert started == 0, result.content  # seccomp: no new processes at all
            # The launcher or bwrap outside the sandbox's namespaces, plus the bound inside,
            # plus the repl's sandbox (its interpreter frozen between calls), when idle.
            idle = 0 if name == "repl" else 3
            assert MAX_THREADS - 8 <= most <= MAX_THREADS + 1 + idle or bomb == "forks", (
                most, result.content)
            assert most <= MAX_THREADS + 1 + idle, (most, result.content)
            assert uids == {SANDBOX_HOST_UID}, uids  # never the host's root
            if name == "code_interpreter":  # the call ended its whole sandbox
                assert not wait_until_gone(new_descendants(before), timeout=10)
        # jarvis keeps working: the repl's state survived its bomb, and a fresh call runs.
        kept = call(executor, "repl", "keep")
        assert kept.success and kept.content.strip() == "'state'", kept.content
        again = call(executor, "code_interpreter", "6 * 7")
        assert again.success and again.content.strip() == "42", again.content
        # Every jarvis thread still has jarvis's own ids (without CAP_SYS_RESOURCE, as here,
        # jarvis's sandbox thread takes the sandbox's effective uid for the moment of a prlimit).
        for task, ids in ids_of_every_thread().items():  # (threads that end meanwhile: gone)
            assert ids[:2] == [[str(os.getuid())] * 4, [str(os.getgid())] * 4], (task, ids)
    finally:
        release_run(run_id)


def test_a_repl_sessions_threads_are_gone_when_it_ends(mechanism: str) -> None:
    # Threads at the bound, left sleeping between calls: the session's end kills them all.
    repl = ReplTool(isolation=mechanism, **LIMITS)
    executor = ToolExecutor([repl], run_id=f"bound-end-{mechanism}")
    before = descendants()
    try:
        result = call(executor, "repl", THREAD_BOMB.rsplit("\nraise", 1)[0] + "\nstarted")
        assert result.success and MAX_THREADS - 8 <= int(result.content) < MAX_THREADS
        assert tasks_of(new_descendants(before))[0] >= MAX_THREADS - 8
    finally:
        release_run(f"bound-end-{mechanism}")
    assert not wait_until_gone(new_descendants(before), timeout=10)


@pytest.mark.root_only
def test_the_sandbox_refuses_to_start_where_threads_would_not_be_bounded(
        mechanism: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The sandbox as it was: mapped onto the host's root, which RLIMIT_NPROC does not bind.
    # The worker finds out by trying, and jarvis refuses to run code there, loudly.
    from jarvis.sandbox import SandboxedPython, SandboxError, SandboxPolicy, launch

    assert os.geteuid() == 0, "the test needs root (like CI): only root is exempt"
    monkeypatch.setattr(launch, "host_identity", lambda policy: None)
    with pytest.raises(SandboxError) as refused:
        SandboxedPython(SandboxPolicy(isolation=mechanism))
    message = str(refused.value)
    assert "threads and processes cannot be bounded" in message
    assert "[sandbox] uid" in message and "unprivileged user" in message


@pytest.mark.root_only
def test_a_writable_path_the_sandbox_uid_cannot_write_is_refused(tmp_path) -> None:
    from jarvis.sandbox import SandboxedPython, SandboxError, SandboxPolicy

    out = tmp_path / "out"
    out.mkdir(mode=0o755)
    with pytest.raises(SandboxError, match=f"not writable by the sandbox's host uid {HOST_UID}"
                       f".*chown it to {HOST_UID}"):
        SandboxedPython(SandboxPolicy(isolation="bwrap", writable_paths=(str(out),)))
    os.chown(out, HOST_UID, HOST_UID)
    proc = SandboxedPython(SandboxPolicy(isolation="bwrap", writable_paths=(str(out),)))
    try:
        result = proc.run(f"open({str(out / 'w.txt')!r}, 'w').write('ok')")
        assert result.ok, result.error
    finally:
        proc.close()
    assert (out / "w.txt").read_text() == "ok" and (out / "w.txt").stat().st_uid == HOST_UID


def test_doctor_says_threads_are_bounded_and_as_which_uid(cli_env) -> None:
    def doctor(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jarvis.cli", "doctor", *args],
                              env=cli_env, capture_output=True, text=True, timeout=60)

    info = json.loads(doctor("--json").stdout)["sandbox"]
    assert {k: v for k, v in info["threads"].items() if k != "shared_with"} == {
        "max": MAX_THREADS, "host_uid": SANDBOX_HOST_UID}, info
    text = doctor().stdout
    assert f"at most {MAX_THREADS} threads as host uid {SANDBOX_HOST_UID})" in text.splitlines()[0]
    assert (f"  threads and processes: at most {MAX_THREADS} per sandbox (RLIMIT_NPROC, "
            f"host uid {SANDBOX_HOST_UID})") in text


def _uids(pid: int) -> set[int]:
    with open(f"/proc/{pid}/status") as f:
        return {int(x) for x in next(ln for ln in f if ln.startswith("Uid:")).split()[1:4]}


@pytest.mark.root_only
def test_doctor_warns_of_other_processes_running_as_the_sandbox_uid(cli_env) -> None:
    # Any process of the sandbox's host uid owns the sandboxes' user namespaces (it can read
    # and write their memory): doctor names such processes, but not bubblewrap's own monitor
    # of a sandbox that is running, nor the sandbox's code (in a user namespace of its own).
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    # A uid of this test's own: tests running alongside run PostgreSQL as 65534 ("nobody"),
    # which would crowd the sleeper below out of the five processes doctor names.
    uid = 64_917
    config = Path(cli_env["JARVIS_HOME"]) / "doctor-uid.toml"
    config.write_text(f"[sandbox]\nuid = {uid}\n")
    env = dict(cli_env, JARVIS_CONFIG=str(config))

    def doctor(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "jarvis.cli", "doctor", *args],
                              env=env, capture_output=True, text=True, timeout=60)

    other = subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[])
    sandbox = SandboxedPython(SandboxPolicy(isolation="bwrap", uid=uid))
    try:
        assert sandbox.run("x = 1").ok
        # bubblewrap's monitor (the host uid, in jarvis's user namespace) up to the worker
        table, top = parents(), sandbox.pid
        while table.get(top, os.getpid()) != os.getpid():
            top = table[top]
        sandbox_pids = {top} | descendants(top)
        assert any(_uids(pid) == {uid} for pid in sandbox_pids), sandbox_pids
        shared = json.loads(doctor("--json").stdout)["sandbox"]["threads"]["shared_with"]
        pids = {entry["pid"] for entry in shared}
        assert {"pid": other.pid, "name": "sleep"} in shared, shared
        assert not pids & sandbox_pids, (shared, sandbox_pids)
        line = next(x for x in doctor().stdout.splitlines() if "threads and processes" in x)
        assert f"WARNING: other processes run as host uid {uid} (" in line, line
        assert f"{other.pid} sleep" in line and "set [sandbox] uid" in line, line
    finally:
        sandbox.close()
        other.kill()
        other.wait()
    shared = json.loads(doctor("--json").stdout)["sandbox"]["threads"]["shared_with"]
    assert other.pid not in {entry["pid"] for entry in shared}, shared


def test_sandboxes_sharing_the_host_uid_each_get_their_own_count() -> None:
    # RLIMIT_NPROC counts per user namespace: three sandboxes, all host uid 65534 at once,
    # each reach max_threads (a count per host uid would have stopped them at 64 together).
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    code = THREAD_BOMB.replace("1.5", "0.3")
    procs = [SandboxedPython(SandboxPolicy(isolation=m)) for m in ("bwrap", "bwrap",
                                                                    "namespaces")]
    try:
        for proc in procs:
            result = proc.run(code)
            assert result.error_kind == "exception", result.error
            assert MAX_THREADS - 8 <= bomb_numbers(result.error)[0] < MAX_THREADS, result.error
        held = [tasks_of({proc.pid}) for proc in procs]
        assert all(count >= MAX_THREADS - 8 and uids == {SANDBOX_HOST_UID}
                   for count, uids in held), held
    finally:
        for proc in procs:
            proc.close()


# --- jarvis's own threads while it sets a sandbox's CPU limit --------------------------------
# Root without CAP_SYS_RESOURCE (as here) sets a sandbox's RLIMIT_CPU by taking, on one thread
# and for a moment, the sandbox's host uid. The kernel lets a process signal another whose
# *real* (or saved) uid is its own: with the real uid switched, any process of uid 65534 on the
# host (another daemon run as "nobody", bubblewrap's outer process) could SIGKILL jarvis then.
SIGNAL_PROBE = r"""
import ctypes, os, sys, time
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
libc = ctypes.CDLL(None, use_errno=True)
pid, seconds, tids = int(sys.argv[1]), float(sys.argv[2]), [int(t) for t in sys.argv[3:]]
hits = tries = 0
print("ready", flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end or (tries <= 2_000 and time.monotonic() < end + 60):
    for _ in range(200):
        for tid in tids:
            tries += 1
            hits += libc.syscall(234, pid, tid, 0) == 0   # tgkill(pid, tid, 0): may I?
        tries += 1
        hits += libc.kill(pid, 0) == 0
print(hits, tries, flush=True)
"""


@pytest.mark.root_only
def test_no_process_of_the_sandbox_uid_can_signal_jarvis_while_it_sets_a_cpu_limit(
        mechanism: str) -> None:
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    assert os.geteuid() == 0, "the test needs root (like CI)"
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism))
    go, probed, done = threading.Event(), threading.Event(), {}

    def set_limits() -> None:
        # Switches for as long as the probe tries (2.5 s), however many that is on a loaded
        # machine (thousands alone, hundreds under a full test run).
        go.wait(10)
        count = 0
        while not probed.is_set() or count < 100:
            assert proc._set_cpu_budget(force=True) is None
            count += 1
        done["calls"] = count

    caller = threading.Thread(target=set_limits)
    caller.start()
    try:
        tids = os.listdir("/proc/self/task")  # the caller and the sandbox starter among them
        probe = subprocess.Popen([sys.executable, "-I", "-S", "-c", SIGNAL_PROBE,
                                  str(os.getpid()), "2.5", *tids], stdout=subprocess.PIPE,
                                 text=True)
        try:
            assert probe.stdout.readline().strip() == "ready"
            go.set()
            hits, tries = map(int, probe.communicate(timeout=90)[0].split())
        finally:
            probed.set()
            probe.kill()
            probe.wait()
    finally:
        go.set()
        probed.set()
        caller.join(30)
        proc.close()
    # It really went through the switch, many times, while the probe kept trying.
    assert proc._owner_prlimit and done["calls"] >= 100, done
    assert tries > 2_000 and hits == 0, (hits, tries)


def ids_of_every_thread() -> dict[str, list[list[str]]]:
    found = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/status") as f:
                found[task] = [line.split()[1:] for line in f
                               if line.startswith(("Uid:", "Gid:", "CapEff:"))]
        except OSError:
            continue  # a thread that just ended
    return found


class _Interrupt(Exception):
    pass


@pytest.mark.root_only
def test_an_exception_during_the_switch_never_leaves_a_jarvis_thread_with_other_ids() -> None:
    # Ctrl-C (KeyboardInterrupt) lands in the main thread between any two bytecodes: between
    # the switch and the switch back it would leave the thread with the sandbox's ids for good.
    import signal

    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    assert threading.current_thread() is threading.main_thread()
    from jarvis.sandbox.process import _prlimit_as_owner

    proc = SandboxedPython(SandboxPolicy(isolation="bwrap"))
    limits = (proc.limits.cpu_seconds, proc.limits.session_cpu_seconds)
    mine = ids_of_every_thread()[str(threading.get_native_id())]
    armed, stop = [False], threading.Event()

    def raise_now(signum, frame):
        if armed[0]:
            armed[0] = False
            raise _Interrupt

    def interrupter() -> None:
        while not stop.is_set():
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
            time.sleep(0.0001)

    old = signal.signal(signal.SIGUSR1, raise_now)
    sender = threading.Thread(target=interrupter, daemon=True)
    interrupted = calls = 0
    wrong: list = []
    try:
        sender.start()
        # At least 3 s, and on until enough interrupts landed (a loaded machine may give
        # these threads little CPU in 3 s), bounded at a minute more.
        end = time.monotonic() + 3
        while not wrong and (time.monotonic() < end or (
                (interrupted <= 100 or calls <= 1000) and time.monotonic() < end + 60)):
            calls += 1
            try:
                armed[0] = True
                _prlimit_as_owner(proc.pid, HOST_UID, limits)
                armed[0] = False
            except _Interrupt:
                interrupted += 1
            ids = os.getresuid() + os.getresgid()  # this thread's own (raw syscalls)
            if ids != (0,) * 6:
                wrong.append(ids)
    finally:
        stop.set()
        sender.join(10)
        signal.signal(signal.SIGUSR1, old)
        proc.close()
    assert not wrong, f"the main thread was left with the ids {wrong[0]}"
    assert interrupted > 100 and calls > 1000, (interrupted, calls)
    left = {t: ids for t, ids in ids_of_every_thread().items() if ids != mine}
    assert not left, f"threads left with other ids: {left} (jarvis: {mine})"


@pytest.mark.root_only
def test_other_jarvis_threads_keep_their_file_access_during_the_switch(tmp_path) -> None:
    # The switch is per thread (raw syscalls): glibc's setresuid would have switched every
    # thread, and a root-only file read on another thread would fail meanwhile.
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    secret = tmp_path / "root-only"
    secret.write_text("s")
    secret.chmod(0o600)
    tmp_path.chmod(0o700)
    proc = SandboxedPython(SandboxPolicy(isolation="namespaces"))
    stop, failures, reads = threading.Event(), [], [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                secret.read_text()
                reads[0] += 1
            except OSError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        end = time.monotonic() + 1.5  # and on until the readers read enough, bounded
        while time.monotonic() < end or (reads[0] <= 1000 and time.monotonic() < end + 60):
            assert proc._set_cpu_budget(force=True) is None
    finally:
        stop.set()
        for t in threads:
            t.join(10)
        proc.close()
    assert proc._owner_prlimit and reads[0] > 1000 and not failures, (reads, failures[:3])


# --- starting sandboxes from many threads at once (jarvis serve) ------------------------------
ROUNDS = 3  # 30 (480 sandboxes) ran here without a hang too


def test_sandboxes_started_from_many_threads_at_once_all_start(mechanism: str) -> None:
    # bubblewrap's child stages its mounts and drops to the sandbox uid between fork and exec
    # (preexec_fn) while jarvis's other threads run: one holding a lock there (the dynamic
    # loader's, malloc's, the import lock) at the fork would hang the child, and with it the
    # thread that starts every sandbox. Meanwhile other threads load libraries and import.
    import ctypes.util
    import importlib

    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    stop, errors, results = threading.Event(), [], []

    def churn() -> None:  # the loader's and the import machinery's locks, taken all the time
        while not stop.is_set():
            libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
            assert libm.cos  # dlsym
            importlib.invalidate_caches()
            importlib.import_module("json.decoder")

    def start_and_run(n: int) -> None:
        try:
            proc = SandboxedPython(SandboxPolicy(isolation=mechanism))
            try:
                for _ in range(20):  # each call moves the CPU limit: the switch, concurrently
                    out = proc.run(f"{n} * 2")
                    if not out.ok:
                        errors.append(repr(out))
                results.append(out.output.strip())
                # a root jarvis without CAP_SYS_RESOURCE switches its thread's uid each call
                assert proc._owner_prlimit or os.geteuid() != 0, "no switch happened"
            finally:
                proc.close()
        except Exception as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(repr(exc))

    churners = [threading.Thread(target=churn, daemon=True) for _ in range(2)]
    for t in churners:
        t.start()
    try:
        for round_ in range(ROUNDS):
            starters = [threading.Thread(target=start_and_run, args=(n,), daemon=True)
                        for n in range(8)]
            for t in starters:
                t.start()
            deadline = time.monotonic() + 90
            for t in starters:
                t.join(max(0.1, deadline - time.monotonic()))
            assert not any(t.is_alive() for t in starters), f"round {round_}: a start hung"
    finally:
        stop.set()
        for t in churners:
            t.join(10)
    assert not errors, errors[:3]
    own = [[str(os.getuid())] * 4, [str(os.getgid())] * 4]
    wrong = {t: ids for t, ids in ids_of_every_thread().items() if ids[:2] != own}
    assert not wrong, f"threads left with other ids: {wrong}"
    assert sorted(results, key=int) == sorted([str(2 * n) for n in range(8)] * ROUNDS, key=int)


# --- two sandboxes, one host uid ---------------------------------------------------------------
FIND_WRITABLE = r"""
import os
found = set()
tops = {line.split()[4] for line in open("/proc/self/mountinfo")}  # "/" itself: Landlock
for top in sorted(tops - {"/", "/proc"}):
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in ("/proc", "/sys")]
        try:
            with open(os.path.join(folder, MARKER), "w"):  # left there: the host looks for it
                pass
            found.add(folder)
        except OSError:
            pass
sorted(found)
"""
PEEK = r"""
import os
mine = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
seen = []
for folder in ("/tmp", "/dev/shm", "/dev"):
    try:
        seen += [n for n in os.listdir(folder) if "from-a" in n]
    except OSError:
        pass
signalled = []
for pid in set(range(1, 400)) - {os.getpid()}:
    try:
        os.kill(pid, 0)
        signalled.append(pid)
    except OSError:
        pass
(mine, seen, signalled)
"""


def test_sandboxes_of_one_host_uid_cannot_reach_each_other_or_write_the_host() -> None:
    # Every sandbox is host uid 65534: anything one could write on the host, or any process
    # of another it could see, would be shared. Each sees only its own processes, its own
    # /tmp and /dev, and can write only its own /tmp (nothing else of the whole tree it sees).
    import ast

    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    procs = {m: SandboxedPython(SandboxPolicy(isolation=m)) for m in ("bwrap", "namespaces")}
    try:
        for proc in procs.values():
            planted = proc.run("open('/tmp/from-a', 'w').write('x')\n"
                               "try:\n    open('/dev/shm/from-a', 'w').write('x')\n"
                               "except OSError:\n    pass")
            assert planted.ok, planted.error
        for name, proc in procs.items():
            marker = f".w-{uuid.uuid4().hex}"
            writable = proc.run(f"MARKER = {marker!r}\n" + FIND_WRITABLE)
            assert writable.ok, (name, writable.error)
            found = ast.literal_eval(writable.output)
            # Only its own /tmp (a tmpfs; with a venv or checkout under the host's /tmp, the
            # folders on the way to its read-only mounts are made in that tmpfs too), and
            # nothing it wrote there reached the host.
            assert "/tmp" in found and all(f == "/tmp" or f.startswith("/tmp/") for f in found), (
                name, found)
            leaked = [f for f in found if os.path.lexists(os.path.join(f, marker))]
            assert leaked == [], (name, leaked)
        # A fresh sandbox next to them: its own /tmp, /dev and processes only.
        for name in procs:
            other = SandboxedPython(SandboxPolicy(isolation=name))
            try:
                peek = other.run(PEEK)
                assert peek.ok, peek.error
                mine, seen, signalled = ast.literal_eval(peek.output)
                assert len(mine) <= 2 and seen == [] and signalled == [], (name, peek.output)
            finally:
                other.close()
    finally:
        for proc in procs.values():
            proc.close()


@pytest.mark.same_for_every_uid
def test_doctor_says_isolation_none_leaves_threads_unbounded(cli_env) -> None:
    # isolation = "none": a plain child of jarvis, as jarvis's uid (root here): RLIMIT_NPROC
    # does not bind it, and doctor must not let that pass for a bound.
    from pathlib import Path

    (Path(cli_env["JARVIS_HOME"]) / "config.toml").write_text(
        '[sandbox]\nisolation = "none"\n')
    done = subprocess.run([sys.executable, "-m", "jarvis.cli", "doctor"], env=cli_env,
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith("sandbox: none ("), done.stdout + done.stderr
    assert "its threads are not bounded)" in done.stdout.splitlines()[0]
    assert ('  threads and processes: not bounded (isolation "none": only the host\'s own '
            'limits; seccomp refuses new processes, not threads)') in done.stdout
    info = json.loads(subprocess.run(
        [sys.executable, "-m", "jarvis.cli", "doctor", "--json"], env=cli_env,
        capture_output=True, text=True, timeout=60).stdout)["sandbox"]
    assert info["mechanism"] == "none" and info["threads"] is None, info


def test_a_path_the_sandbox_can_replace_is_refused(tmp_path) -> None:
    # A read-only path inside a writable one: the code of one session replaced it with a
    # symlink, and the next session's mounts followed it, as root, to what it chose (here a
    # world-readable file in a folder only root may pass through).
    from jarvis.sandbox import SandboxedPython, SandboxError, SandboxPolicy

    private = tmp_path / "private"
    (private / "inner").mkdir(parents=True)
    (private / "inner" / "secret.txt").write_text("root's eyes only")
    (private / "inner" / "secret.txt").chmod(0o644)
    private.chmod(0o700)
    shared = tmp_path / "shared"
    (shared / "data").mkdir(parents=True)
    give_to_sandbox(shared, shared / "data")
    both = {"writable_paths": (str(shared),), "read_only_paths": (str(shared / "data"),)}
    # A session with the writable path alone, as an attacker would use it for the next one.
    first = SandboxedPython(SandboxPolicy(isolation="bwrap", writable_paths=(str(shared),)))
    try:
        done = first.run(f"import os, shutil\nshutil.rmtree({str(shared / 'data')!r})\n"
                         f"os.symlink({str(private / 'inner')!r}, {str(shared / 'data')!r})")
        assert done.ok, done.error
    finally:
        first.close()
    for mechanism in ("bwrap", "namespaces"):
        try:
            second = SandboxedPython(SandboxPolicy(isolation=mechanism, **both))
        except SandboxError as exc:
            assert f"read_only_paths: {shared / 'data'} is inside the writable path {shared}" \
                in str(exc), exc
            continue
        try:
            peek = second.run(f"open({str(private / 'inner' / 'secret.txt')!r}).read()")
        finally:
            second.close()
        raise AssertionError(f"{mechanism}: started, and the code read: {peek}")
    # Listed so before any swap, it is refused as well (the code could swap it any time).
    (shared / "data").unlink()
    (shared / "data").mkdir()
    with pytest.raises(SandboxError, match="is inside the writable path"):
        SandboxedPython(SandboxPolicy(isolation="bwrap", **both))


def test_removing_a_work_folder_never_follows_what_the_code_planted(tmp_path) -> None:
    # isolation "none" is the one mechanism whose work folder is on the host, removed by
    # jarvis (root) at the end: a symlink planted there must be removed, not followed.
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file").write_text("x")
    proc = SandboxedPython(SandboxPolicy(isolation="none"))
    try:
        done = proc.run(f"import os\nos.symlink({str(keep)!r}, 'link')\n"
                        f"os.symlink({str(keep / 'file')!r}, 'file-link')\n"
                        f"os.mkdir('d')\nos.symlink({str(keep)!r}, 'd/inner')\nos.getcwd()")
        assert done.ok, done.error
        workdir = done.output.strip().strip("'")
        assert workdir == proc.workdir and os.path.islink(os.path.join(workdir, "link"))
    finally:
        proc.close()
    assert not os.path.exists(workdir)
    assert (keep / "file").read_text() == "x"


def test_a_writable_path_holding_jarvis_itself_is_refused() -> None:
    # Writable by the sandbox uid (as it must be), a folder that holds jarvis's package or
    # interpreter let the code rewrite what jarvis runs, as root, at its next start.
    import jarvis
    from jarvis.sandbox import SandboxedPython, SandboxError, SandboxPolicy

    package = os.path.dirname(os.path.realpath(jarvis.__file__))
    for folder in (os.path.join(package, "sandbox"), os.path.dirname(package), sys.prefix):
        with pytest.raises(SandboxError, match=r"is or holds .*, which jarvis itself runs: "
                                               r"the code could replace it"):
            SandboxedPython(SandboxPolicy(isolation="bwrap", writable_paths=(folder,)))


CWD_PROBE = r"""
import os, sys
os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)
for pid in sys.argv[1:]:
    for link in ("cwd", "root"):
        try:
            print(pid, link, open(f"/proc/{pid}/{link}/.env").read())
        except OSError:
            pass
"""


@pytest.mark.root_only
def test_no_process_of_the_sandbox_uid_reaches_jarvis_folder_through_the_launcher(
        mechanism: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # bwrap (or jarvis's launcher) runs outside the sandbox as its host uid; it kept jarvis's
    # working folder, and any process of that uid on the host read the project's .env through
    # /proc/<pid>/cwd, past a parent folder only root may pass through.
    from jarvis.sandbox import SandboxedPython, SandboxPolicy

    project = tmp_path / "private" / "project"
    project.mkdir(parents=True)
    (project / ".env").write_text("API_KEY=sk-from-the-env-file")
    (project / ".env").chmod(0o644)
    (tmp_path / "private").chmod(0o700)
    monkeypatch.chdir(project)
    before = descendants()
    proc = SandboxedPython(SandboxPolicy(isolation=mechanism))
    try:
        pids = new_descendants(before)
        assert len(pids) >= 2, pids  # the launcher outside, the sandbox inside
        done = subprocess.run([sys.executable, "-I", "-S", "-c", CWD_PROBE, *map(str, pids)],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert "sk-from" not in done.stdout, done.stdout
    finally:
        proc.close()
