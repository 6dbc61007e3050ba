"""The command line that starts a sandboxed interpreter, for each mechanism.

One mount plan (what the sandbox sees) serves both namespace mechanisms: bubblewrap gets it as
arguments, jarvis's own launcher (`unshare_launcher.py`) as JSON. The same paths become the
worker's Landlock rules, so a path is reachable only if both the mount and Landlock allow it.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from jarvis.sandbox.policy import SYSTEM_DIRS, SandboxPolicy, python_paths

HERE = Path(__file__).parent
# The scripts that run inside a sandbox (and jarvis's launcher, which builds one), as bytecode
# in one folder (bytecode_folder), shown read-only at SANDBOX_DIR.
SCRIPTS = ("worker", "confine", "exec_shim", "unshare_launcher")
SANDBOX_DIR = "/.jarvis"
SANDBOX_WORKER = f"{SANDBOX_DIR}/worker.pyc"
WORK_DIR = "/tmp"
# The unprivileged user the code runs as inside its user namespace (on the host it is jarvis's
# own uid, or SandboxPolicy.uid when jarvis runs as root: see host_identity).
SANDBOX_UID = SANDBOX_GID = 65534
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/localtime")
# tmpfs bounds its bytes by `size` but its files only by `nr_inodes`, whose default is half
# the host's RAM pages: 300 000 empty files took 300 MB of kernel memory in 3 s. One file per
# 4 KiB of tmp_mb (16 384 for the default 64 MB) bounds that to about 16 MB: jarvis's own
# launcher mounts /tmp with that nr_inodes; bubblewrap's --tmpfs has no such option (and its
# child may hold no capability to mount one, e.g. under Ubuntu's AppArmor profile), so there
# jarvis counts the files from outside (SandboxedPython) and ends a sandbox past the limit.
TMP_BYTES_PER_FILE = 4096
# MALLOC_ARENA_MAX: glibc reserves 64 MB of address space per thread's malloc arena (up to 8
# per core), so max_threads threads took RLIMIT_AS (memory_mb) nearly whole and the next
# call died of MemoryError; two arenas serve Python's threads as well.
SANDBOX_ENV = {"HOME": WORK_DIR, "TMPDIR": WORK_DIR, "PATH": "/usr/bin:/bin",
               "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONDONTWRITEBYTECODE": "1",
               "MALLOC_ARENA_MAX": "2"}


@functools.lru_cache(maxsize=1)
def bytecode_folder() -> str:
    """A folder of this process's (mode 0755, files 0644: a root jarvis's sandbox uid reads
    them, nobody else writes them) holding worker.pyc, confine.pyc and exec_shim.pyc, compiled
    from the sources beside this module once per process. A script run from source is
    compiled at every start: 8-20 ms of every cold call. Removed when this process exits."""
    import atexit
    import importlib.util
    import marshal
    import tempfile

    folder = tempfile.mkdtemp(prefix="jarvis-sandbox-code-")
    for name in SCRIPTS:
        source = (HERE / f"{name}.py").read_bytes()
        code = compile(source, f"{SANDBOX_DIR}/{name}.py", "exec", dont_inherit=True)
        header = importlib.util.MAGIC_NUMBER + bytes(4) + bytes(4) + (
            len(source) & 0xFFFFFFFF).to_bytes(4, "little")
        path = os.path.join(folder, f"{name}.pyc")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as f:
            f.write(header + marshal.dumps(code))
        os.chmod(path, 0o644)
    os.chmod(folder, 0o755)
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))
    return folder


def launcher() -> str:
    """jarvis's own launcher, as bytecode (unshare_launcher.py, run as a script)."""
    return os.path.join(bytecode_folder(), "unshare_launcher.pyc")


class PathProblem(ValueError):
    """A configured sandbox path that is missing or would expose jarvis's secrets."""


@dataclass(slots=True)
class MountPlan:
    """What a sandbox sees. ops: ("ro"|"rw", src, dst), ("symlink", target, dst),
    ("tmpfs", dst, bytes), ("hide", dst, 0) (an empty read-only tmpfs over dst)."""

    ops: list[tuple[str, str, int | str]] = field(default_factory=list)
    read_paths: list[str] = field(default_factory=list)   # Landlock: read + execute
    write_paths: list[str] = field(default_factory=list)  # Landlock: everything
    site_dirs: list[str] = field(default_factory=list)
    python: str = ""


def mount_plan(policy: SandboxPolicy) -> MountPlan:
    python, needed, packages = python_paths(policy.site_packages)
    plan = MountPlan(python=python, site_dirs=list(packages))

    def ro(path: str) -> None:
        if path not in [op[2] for op in plan.ops]:
            plan.ops.append(("ro", path, path))
            plan.read_paths.append(path)

    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            target = os.readlink(path)
            plan.ops.append(("symlink", target, path))
        elif os.path.isdir(path):
            ro(path)
    # The work folder first: paths the user lists under /tmp are mounted over it, not hidden.
    plan.ops.append(("tmpfs", WORK_DIR, policy.limits.tmp_mb * 1024 * 1024))
    plan.write_paths.append(WORK_DIR)
    for key, paths in (("read_only_paths", policy.read_only_paths),
                       ("writable_paths", policy.writable_paths)):
        for path in paths:
            if not os.path.exists(path):
                raise PathProblem(f"[sandbox] {key}: {path} does not exist")
            if key == "writable_paths":
                own = _holds_jarvis(path, [python, *needed], list(packages))
                if own:
                    raise PathProblem(f"[sandbox] writable_paths: {path} is or holds {own}, "
                                      f"which jarvis itself runs: the code could replace it; "
                                      f"list a folder elsewhere")
            identity = host_identity(policy)
            if key == "writable_paths" and identity and not _writable_by(path, *identity):
                raise PathProblem(f"[sandbox] writable_paths: {path} is not writable by the "
                                  f"sandbox's host uid {identity[0]} (jarvis runs as root, the "
                                  f"code as [sandbox] uid); chown it to {identity[0]}")
            problem = _exposes_secrets(path) or _replaceable(path, policy.writable_paths)
            if problem:
                raise PathProblem(f"[sandbox] {key}: {path} {problem}; list the folders the "
                                  f"code needs instead")
    # Of the interpreter's installation: itself, its standard library and the libraries it
    # loads from its prefix (policy.python_paths), never the whole prefix.
    for path in (python, *needed, *packages, *SYSTEM_FILES, *policy.read_only_paths):
        if os.path.exists(path) and not _covered(path, plan.read_paths):
            ro(os.path.realpath(path))
    for path in needed:  # reached through a symlink (a conda env's lib/pythonX.Y, a .so name)
        logical = os.path.abspath(path)
        shown = any(logical == f or logical.startswith(f.rstrip("/") + "/")
                    for f in plan.read_paths)
        if logical != os.path.realpath(path) and not shown:
            plan.ops.append(("symlink", os.path.realpath(path), logical))
    # The interpreter's own site-packages come with its prefix: hide them unless they are
    # the ones allowed (a venv's base interpreter, or site_packages = false).
    base = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    for key in ("purelib", "platlib"):
        folder = os.path.realpath(base[key])
        hidden = [op[1] for op in plan.ops if op[0] == "hide"]
        if (os.path.isdir(folder) and folder not in packages and folder not in hidden
                and _covered(folder, plan.read_paths)):
            plan.ops.append(("hide", folder, 0))
    _hide_secret_folders(plan)
    plan.ops.append(("ro", bytecode_folder(), SANDBOX_DIR))
    plan.read_paths.append(SANDBOX_DIR)
    for path in policy.writable_paths:
        real = os.path.realpath(path)
        plan.ops.append(("rw", real, real))
        plan.write_paths.append(real)
    return plan


def _writable_by(path: str, uid: int, gid: int) -> bool:
    st = os.stat(path)
    if st.st_uid == uid:
        return bool(st.st_mode & 0o200)
    return bool(st.st_mode & (0o020 if st.st_gid == gid else 0o002))


def secret_folders() -> list[tuple[str, str]]:
    from jarvis.core.paths import jarvis_home

    return [("your home folder", os.path.realpath(os.path.expanduser("~"))),
            ("JARVIS_HOME", os.path.realpath(str(jarvis_home())))]


def _hide_secret_folders(plan: MountPlan) -> None:
    """The home folder and JARVIS_HOME stay out of sight even when a folder the sandbox needs
    holds them (JARVIS_HOME under /usr/local, or in the venv's site-packages): an empty
    read-only tmpfs covers them. If the sandbox also needs something inside one (the
    interpreter under a home folder that /usr holds), that is refused, loudly."""
    for what, folder in secret_folders():
        if folder == "/" or not _covered(folder, plan.read_paths):
            continue
        needed = [p for p in plan.read_paths if p != folder and _covered(p, [folder])]
        if needed:
            raise PathProblem(f"{what} ({folder}) is inside a folder the sandbox shows, and "
                              f"holds {needed[0]}, which it needs; move one of them")
        plan.ops.append(("hide", folder, 0))


def _holds_jarvis(path: str, python: list[str], packages: list[str]) -> str | None:
    """What of jarvis's own code the folder `path` holds or is part of (its package, the
    interpreter and its prefixes, the standard library, site-packages), or None. Written by
    the code (as the sandbox uid), it would run as jarvis, root included, on its next start."""
    real = os.path.realpath(path)
    venv = [sys.prefix] if sys.prefix != sys.base_prefix else []  # not all of /usr
    code = [os.path.realpath(p) for p in (
        HERE.parent, *venv, sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["platstdlib"], *packages)]
    holds = [os.path.realpath(p) for p in (*code, *python)]
    return next((p for p in holds if _covered(p, [real])), None) or next(
        (p for p in code if _covered(real, [p])), None)


def _replaceable(path: str, writable: tuple[str, ...]) -> str | None:
    """Why `path` is a path the code itself could choose (None: it is not). Inside a
    writable path, one session replaced it with a symlink to a folder only root may pass
    through, and the next session's mounts followed it, as root (staging, see
    unshare_launcher.stage), to a world-readable secret there."""
    name = os.path.abspath(path)
    # The path as listed (its parents resolved, not itself: a symlink planted there) and
    # where it points now.
    listed = os.path.join(os.path.realpath(os.path.dirname(name)), os.path.basename(name))
    for folder in writable:
        real = os.path.realpath(folder)
        for candidate in {listed, os.path.realpath(path)}:
            if candidate.startswith(real.rstrip("/") + "/"):  # strictly inside, as it is
                return (f"is inside the writable path {folder}, where the code could replace "
                        f"it (with a symlink to anything)")
    return None


def _exposes_secrets(path: str) -> str | None:
    """Why mounting `path` would hand the code jarvis's secrets (None: it would not)."""
    real = os.path.realpath(path)
    for what, inner in secret_folders():
        if real == "/" or _covered(inner, [real]):
            return f"holds {what} ({inner})"
    return None


def _covered(path: str, folders: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == f or real.startswith(f.rstrip("/") + "/") for f in folders)


def tmp_files(policy: SandboxPolicy) -> int:
    """The most files (inodes) the work folder holds."""
    return max(1024, policy.limits.tmp_mb * 1024 * 1024 // TMP_BYTES_PER_FILE)


def worker_config(policy: SandboxPolicy, plan: MountPlan, *, isolated: bool) -> dict:
    """The settings the worker applies to itself before it runs any code."""
    limits = policy.limits
    return {"memory_mb": limits.memory_mb, "max_file_mb": limits.max_file_mb,
            "max_open_files": limits.max_open_files, "max_threads": limits.max_threads,
            "session_cpu_seconds":
            limits.session_cpu_seconds, "cpu_seconds": limits.cpu_seconds,
            "max_output_chars": limits.max_output_chars, "timeout": limits.timeout,
            # isolation "none" has the host's network whatever the policy says
            "network": policy.network or not isolated,
            "site_dirs": plan.site_dirs,
            # Landlock only where the namespaces made the view small: with isolation "none"
            # the code sees the host, and the policy says so.
            "landlock": {"read": [*plan.read_paths, "/proc"], "write": [*plan.write_paths],
                         "dev": "/dev", "network": policy.network} if isolated else None}


@functools.lru_cache(maxsize=4)
def bwrap_options(bwrap: str) -> frozenset[str]:
    """The options this bubblewrap knows (--disable-userns came in 0.8, --size in 0.5)."""
    import re
    import subprocess

    try:
        done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(re.findall(r"^\s+(--[a-z-]+)", done.stdout, flags=re.M))


def bwrap_command(policy: SandboxPolicy, bwrap: str, info_fd: int | None,
                  command: list[str] | None = None, *, plan: MountPlan | None = None,
                  env: dict[str, str] | None = None,
                  workdir: str = WORK_DIR) -> tuple[list[str], dict]:
    """bubblewrap's command line; `command` replaces the worker (the probe runs `pass`; a
    sandboxed command, command.py, its shim), `plan` and `env` the worker's."""
    plan = plan or mount_plan(policy)
    known = bwrap_options(bwrap)
    argv = [bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID),
            "--hostname", "sandbox", "--clearenv"]
    if info_fd is not None:
        argv += ["--info-fd", str(info_fd)]
    if "--disable-userns" in known:  # older: seccomp alone refuses nested namespaces
        argv.append("--disable-userns")
    if policy.network:
        argv.append("--share-net")
    # /proc read-only: the sandbox's uid is jarvis's on the host, so with jarvis as root and
    # no Landlock (a kernel without it) the code wrote host sysctls (kernel/core_pattern).
    argv += ["--proc", "/proc", "--remount-ro", "/proc"]
    argv += dev_args(known)
    for kind, src, dst in plan.ops:
        if kind == "symlink":
            argv += ["--symlink", str(src), str(dst)]
        elif kind == "tmpfs":  # older bwrap: RLIMIT_FSIZE bounds each file, not the total
            argv += (["--size", str(dst)] if "--size" in known else []) + ["--tmpfs", str(src)]
        elif kind == "hide":
            argv += ["--tmpfs", str(src), "--remount-ro", str(src)]
        else:
            argv += ["--ro-bind" if kind == "ro" else "--bind", str(src), str(dst)]
    for key, value in (SANDBOX_ENV if env is None else env).items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", workdir, "--", *(command or _worker_argv(policy, plan))]
    return argv, {}


def dev_args(known: frozenset[str]) -> list[str]:
    """bubblewrap's /dev, as jarvis's launcher builds it: the harmless devices and the fd
    links, nothing else. Its own --dev adds /dev/ptmx and /dev/pts: a terminal the code made
    its controlling one sent SIGCONT to the frozen interpreter when it hung up later (and
    every pty counts against the host's kernel.pty.max)."""
    from jarvis.sandbox.unshare_launcher import DEV_LINKS, DEVICES

    argv = (["--size", str(64 * 1024)] if "--size" in known else []) + ["--tmpfs", "/dev"]
    for name in DEVICES:
        argv += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    for name, target in DEV_LINKS:
        argv += ["--symlink", target, f"/dev/{name}"]
    return argv + ["--remount-ro", "/dev"]


def host_identity(policy: SandboxPolicy) -> tuple[int, int] | None:
    """The host uid/gid a sandbox runs as when jarvis is root (None: jarvis's own uid). The
    kernel exempts host root from RLIMIT_NPROC: mapped onto root, a sandbox's threads were
    bounded only by the host's pids."""
    return (policy.uid, policy.uid) if os.geteuid() == 0 else None


def bwrap_preexec(policy: SandboxPolicy, bwrap: str):
    """What the child jarvis forks does before it execs bubblewrap, or None (jarvis is not
    root). bwrap run as root would map the sandbox onto root; run as the unprivileged uid it
    cannot reach a source under a folder that uid cannot pass through (the interpreter in
    /root, mode 0700), so the child first stages those (unshare_launcher.stage), then drops.
    It runs between fork and exec: system calls only, decisions made here beforehand. A
    failure is written to the child's stderr and ends it (the start-up reports it)."""
    identity = host_identity(policy)
    if identity is None:
        return None
    from jarvis.sandbox import unshare_launcher

    plan = mount_plan(policy)
    sources = [str(src) for kind, src, _ in plan.ops if kind in ("ro", "rw")]
    blocked = unshare_launcher.blocked_folders(
        [*sources, os.path.realpath(shutil.which(bwrap) or bwrap)], *identity)

    def preexec() -> None:
        try:
            if blocked:
                unshare_launcher.stage(blocked)
            unshare_launcher.drop(*identity)
        except OSError as exc:
            os.write(2, f"sandbox setup failed: {exc}\n".encode())
            os._exit(127)

    return preexec


def _worker_argv(policy: SandboxPolicy, plan: MountPlan) -> list[str]:
    return [plan.python, "-I", "-S", SANDBOX_WORKER,
            json.dumps(worker_config(policy, plan, isolated=True))]


def namespaces_command(policy: SandboxPolicy, python: str, info_fd: int | None,
                       command: list[str] | None = None, *, plan: MountPlan | None = None,
                       env: dict[str, str] | None = None,
                       workdir: str = WORK_DIR) -> tuple[list[str], dict]:
    """jarvis's own launcher's command line; `command` replaces the worker (as for
    bwrap_command)."""
    plan = plan or mount_plan(policy)
    spec = {"ops": plan.ops, "tmp_files": tmp_files(policy), "uid": SANDBOX_UID,
            "gid": SANDBOX_GID, "network": policy.network, "drop": host_identity(policy),
            "info_fd": info_fd, "workdir": workdir,
            "env": SANDBOX_ENV if env is None else env,
            "argv": command or _worker_argv(policy, plan)}
    return [python, "-I", "-S", launcher(), json.dumps(spec)], {}


def probe_command(mechanism: str, bwrap: str | None, info_fd: int) -> list[str]:
    """A real sandbox with the real worker: it restricts itself (work folder, capabilities,
    Landlock, seccomp), says whether it is ready, and leaves at the end of its input. Only
    that says the mechanism works here: bwrap running `python -c pass` is not the same."""
    policy = SandboxPolicy()
    if mechanism == "bwrap":
        return bwrap_command(policy, bwrap or "bwrap", info_fd)[0]
    return namespaces_command(policy, sys.executable, info_fd)[0]


def plain_command(policy: SandboxPolicy, workdir: str) -> tuple[list[str], dict]:
    """isolation = "none": the worker as a plain child process (rlimits and seccomp only)."""
    plan = mount_plan(policy)
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")
           if k in os.environ}
    env.update(HOME=workdir, TMPDIR=workdir, PYTHONDONTWRITEBYTECODE="1",
               PYTHONIOENCODING="utf-8")
    config = {**worker_config(policy, plan, isolated=False), "parent": os.getpid()}
    return [plan.python, "-I", "-S", os.path.join(bytecode_folder(), "worker.pyc"),
            json.dumps(config)], env
