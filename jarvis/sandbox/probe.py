"""Which isolation mechanism this host supports, and the one a policy gets.

`resolve(policy)` returns the mechanism in force ("bwrap", "namespaces" or "none") or raises
SandboxUnavailable with one line saying why and how to fix it: model-written code never runs
with less isolation than the config asked for. Probes start a tiny sandbox once per process
(cached), so `import jarvis` and `jarvis --help` never pay for them.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

from jarvis.errors import JarvisError

PROBE_TIMEOUT = 10.0
FIX = ("install bubblewrap (e.g. `apt-get install bubblewrap`), enable unprivileged user "
       "namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces > 0), "
       "or opt out with [sandbox] isolation = \"none\" in config.toml")


# The worker found that RLIMIT_NPROC does not bind it: its threads would be bounded only by
# the host's pids (a thread bomb starved the whole machine).
UNBOUNDED = ("threads and processes cannot be bounded in the sandbox: the kernel does not apply "
             "RLIMIT_NPROC to its host uid (root, or a uid with CAP_SYS_RESOURCE); set "
             "[sandbox] uid to an unprivileged uid (now {uid}) or run jarvis as an unprivileged "
             "user")


class SandboxUnavailable(JarvisError):
    """The configured isolation cannot work on this host (the message says why and the fix)."""


def find_bwrap() -> str | None:
    """bubblewrap on PATH. Looked up once per PATH (every warm repl call asks: shutil.which
    stats each PATH folder), checked to still be there."""
    found = _which_bwrap(os.environ.get("PATH"))
    if found is not None and not os.access(found, os.X_OK):
        _which_bwrap.cache_clear()
        found = _which_bwrap(os.environ.get("PATH"))
    return found


@functools.lru_cache(maxsize=8)
def _which_bwrap(path: str | None) -> str | None:
    return shutil.which("bwrap", path=path)


@functools.lru_cache(maxsize=8)
def _bwrap_probe(bwrap: str) -> str | None:
    """None when bwrap builds a sandbox here exactly as a real one is built, else why not."""
    return _run_probe("bwrap", bwrap)


@functools.lru_cache(maxsize=1)
def _namespaces_probe() -> str | None:
    """None when jarvis's launcher builds a sandbox here (user, pid, mount, net, ipc and uts
    namespaces, a new /proc, pivot_root), else why not."""
    return _run_probe("namespaces", None)


def _run_probe(mechanism: str, bwrap: str | None) -> str | None:
    from jarvis.sandbox.launch import bwrap_preexec, probe_command
    from jarvis.sandbox.policy import SandboxPolicy

    what = "bwrap" if mechanism == "bwrap" else "unshare"
    info_r, info_w = os.pipe()  # the launcher reports on it; a reader must exist
    try:
        argv = probe_command(mechanism, bwrap, info_w)
        preexec = (bwrap_preexec(SandboxPolicy(), bwrap or "bwrap") if mechanism == "bwrap"
                   else None)
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=PROBE_TIMEOUT, pass_fds=(info_w,), env={}, cwd="/",
                              preexec_fn=preexec)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{what} cannot run: {exc}"
    finally:
        os.close(info_w)
        os.close(info_r)
    hello = _hello(done.stdout)
    if done.returncode != 0 and not hello:
        stderr = done.stderr.decode("utf-8", "replace")
        lines = [line.strip() for line in stderr.splitlines() if line.strip()]
        detail = lines[-1] if lines else f"exit code {done.returncode}"
        return f"{what} failed: {detail}"
    if not hello.get("ready"):
        return f"{what} started, but the sandbox did not: {hello.get('error') or 'no answer'}"
    if not hello.get("max_threads"):
        return UNBOUNDED.format(uid=SandboxPolicy().uid)
    return None


def _hello(stdout: bytes) -> dict:
    """The worker's first frame (4-byte length + JSON), or {}."""
    import json
    import struct

    if len(stdout) < 4:
        return {}
    size = struct.unpack(">I", stdout[:4])[0]
    try:
        hello = json.loads(stdout[4:4 + size].decode("utf-8", "replace"))
    except ValueError:
        return {}
    return hello if isinstance(hello, dict) else {}


def bwrap_problem() -> str | None:
    if not sys.platform.startswith("linux"):
        return "bubblewrap needs Linux"
    bwrap = find_bwrap()
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    return _bwrap_probe(bwrap)


def namespaces_problem() -> str | None:
    if not sys.platform.startswith("linux"):
        return "user namespaces need Linux"
    return _namespaces_probe()


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none)."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(abi), 0)


def seccomp_supported() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")


def resolve(isolation: str) -> str:
    """The mechanism for `isolation`, or SandboxUnavailable (one line: why, and the fix)."""
    if isolation == "none":
        return "none"
    if isolation == "bwrap":
        problem = bwrap_problem()
        if problem:
            raise SandboxUnavailable(f"code sandbox unavailable: {problem}; {FIX}")
        return "bwrap"
    if isolation == "namespaces":
        problem = namespaces_problem()
        if problem:
            raise SandboxUnavailable(f"code sandbox unavailable: {problem}; {FIX}")
        return "namespaces"
    problems = []
    for name, check in (("bwrap", bwrap_problem), ("namespaces", namespaces_problem)):
        problem = check()
        if problem is None:
            return name
        problems.append(problem)
    raise SandboxUnavailable(f"code sandbox unavailable: {' and '.join(problems)}; {FIX}")


def sharing_uid(uid: int, limit: int = 1000) -> list[dict[str, Any]]:
    """Other live processes of this user namespace running as host `uid` (real, effective or
    saved), at most `limit`: each owns what that uid owns, the sandboxes' user namespaces
    included, so it can read and write every sandbox's memory. bubblewrap's own monitor
    processes (jarvis starts them as that uid) are left out."""
    try:
        own_ns = os.stat("/proc/self/ns/user").st_ino
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    bwrap = os.path.realpath(find_bwrap() or "/nonexistent")
    found: list[dict[str, Any]] = []
    for pid in pids:
        if int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
            ids = [int(part) for part in fields.get("Uid", "").split()[:3]]
            if uid not in ids or fields.get("State", "").strip().startswith("Z"):
                continue
            if os.stat(f"/proc/{pid}/ns/user").st_ino != own_ns:
                continue  # inside a user namespace of its own (a sandbox): owns nothing here
            if os.path.realpath(f"/proc/{pid}/exe") == bwrap:
                continue
        except (OSError, ValueError):  # gone meanwhile, or not ours to look at
            continue
        found.append({"pid": int(pid), "name": fields.get("Name", "?").strip()})
        if len(found) >= limit:
            break
    return found


def status(isolation: str = "auto", network: bool = False, uid: int = 65534,
           max_threads: int = 64, max_open_files: int = 256, memory_mb: int = 512,
           tmp_mb: int = 64) -> dict[str, Any]:
    """What `jarvis doctor` and `jarvis tools show repl` report (uid, max_threads, ...: the
    [sandbox] settings of those names)."""
    from jarvis.sandbox.cgroup import kernel_memory

    try:
        mechanism, problem = resolve(isolation), None
    except SandboxUnavailable as exc:
        mechanism, problem = None, str(exc)
    bwrap = find_bwrap()
    abi = landlock_abi()
    layers = []
    if mechanism in ("bwrap", "namespaces"):
        layers.append("user, pid, mount, ipc, uts" + ("" if network else ", net") + " namespaces")
        if abi:
            layers.append(f"Landlock ABI {abi}")
    if mechanism is not None and seccomp_supported():
        layers.append("seccomp")
    if mechanism is not None:
        layers.append("rlimits")
    threads = None
    if mechanism in ("bwrap", "namespaces"):  # the probe checked that RLIMIT_NPROC binds
        threads = {"max": max_threads, "host_uid": uid if os.geteuid() == 0 else os.getuid()}
        # As root, the sandbox uid should be one no other process uses (see sharing_uid).
        threads["shared_with"] = sharing_uid(uid) if os.geteuid() == 0 else []
        layers.append(f"at most {max_threads} threads as host uid {threads['host_uid']}")
    return {
        "isolation": isolation,
        "mechanism": mechanism,
        "layers": layers,
        "problem": problem,
        "network": network,
        "threads": threads,
        # kernel memory outside memory_mb (socket buffers, pipes): see cgroup.py
        "memory": kernel_memory(max_open_files, network, memory_mb, tmp_mb, max_threads)
        if mechanism in ("bwrap", "namespaces") else None,
        "bwrap": bwrap,
        "bwrap_works": bwrap is not None and bwrap_problem() is None,
        "user_namespaces": namespaces_problem() is None,
        "landlock_abi": abi,
        "seccomp": seccomp_supported(),
        "python": sys.version.split()[0],
    }


def describe(info: dict[str, Any]) -> str:
    """One line: the mechanism in force and its layers, or the refusal."""
    if info["mechanism"] is None:
        return info["problem"]
    if info["mechanism"] == "none":
        return ("none (isolation = \"none\": code runs as a plain child process with "
                + ", ".join(info["layers"]) + "; it can read your files and use the network, "
                "and its threads are not bounded)")
    return f"{info['mechanism']} ({', '.join(info['layers'])})"
