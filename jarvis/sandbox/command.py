"""A command in the sandbox (an MCP server), not model-written Python run by the worker.

The command gets the code sandbox's namespaces and mounts (the system folders, a private /tmp,
a minimal /dev, a read-only /proc, no network; never the home folder or JARVIS_HOME), plus
what it needs and nothing else: its runtime and its own package read-only (`runtime`, found by
the caller), the paths the person lists (read-only or writable) and an environment of only what
it is given. exec_shim.py then limits its processes and files, applies Landlock and execs it.
Under a root jarvis it runs as [sandbox] uid, as the code sandbox does.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field

from jarvis.sandbox.launch import (
    SANDBOX_DIR,
    WORK_DIR,
    bwrap_command,
    host_identity,
    launcher,
    mount_plan,
    namespaces_command,
)
from jarvis.sandbox.policy import SYSTEM_DIRS, SandboxLimits, SandboxPolicy

SANDBOX_SHIM = f"{SANDBOX_DIR}/exec_shim.pyc"
SANDBOX_EGRESS = "/.jarvis-egress.sock"


@dataclass(slots=True, frozen=True)
class CommandPolicy:
    """What a sandboxed command may see and use.

    Args:
        runtime: files and folders it needs to run (its interpreter, its package), read-only.
        read_only_paths / writable_paths: the paths the person lists for it.
        env: its whole environment (besides HOME, TMPDIR and PATH, which the sandbox sets).
        max_processes: processes and threads of the sandbox together (RLIMIT_NPROC).
        max_open_files: RLIMIT_NOFILE.
        uid: the host uid it runs as when jarvis is root (SandboxPolicy.uid).
        egress_socket: the hand-off socket of the command's network proxy (netproxy.py), or
            None: no network at all.
    """

    runtime: tuple[str, ...] = ()
    read_only_paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    max_processes: int = 256
    max_open_files: int = 1024
    tmp_mb: int = 64
    uid: int = 65534
    egress_socket: str | None = None


def command_argv(mechanism: str, argv: list[str], policy: CommandPolicy,
                 cwd: str | None = None) -> list[str]:
    """The command line that runs `argv` (its program an absolute path) in a sandbox built by
    `mechanism` ("bwrap" or "namespaces"). Raises launch.PathProblem for a listed path that
    is missing or would expose jarvis's secrets."""
    sandbox = SandboxPolicy(isolation=mechanism, site_packages=False, uid=policy.uid,
                            read_only_paths=tuple(dict.fromkeys(
                                [*policy.runtime, *policy.read_only_paths])),
                            writable_paths=policy.writable_paths,
                            limits=SandboxLimits(tmp_mb=policy.tmp_mb))
    plan = mount_plan(sandbox)
    for path in policy.runtime:  # reached through a symlink (a venv's bin/python): as named,
        logical = os.path.abspath(path)  # unless a folder shown whole holds it (/usr/lib/...)
        if os.path.islink(logical) and not any(
                logical.startswith(folder.rstrip("/") + "/") for folder in plan.read_paths):
            plan.ops.append(("symlink", os.path.realpath(logical), logical))
    # Its working folder, at its path, so relative paths in its arguments mean what they mean
    # outside; where the sandbox does not show it, an empty folder of the sandbox's own
    # (Landlock: read only), under which the listed paths inside it appear (the op goes
    # before their binds).
    workdir = os.path.realpath(cwd) if cwd else WORK_DIR
    shown = [p for p in (*plan.read_paths, *plan.write_paths) if p != WORK_DIR]  # own /tmp
    if workdir == "/" or any(d.startswith(workdir.rstrip("/") + "/") for d in (*SYSTEM_DIRS,
                                                                                  WORK_DIR)):
        workdir = WORK_DIR  # not over the system folders or the work folder
    elif not any(workdir == p or workdir.startswith(p.rstrip("/") + "/") for p in shown):
        first = next(i for i, op in enumerate(plan.ops) if op[0] == "tmpfs") + 1
        plan.ops.insert(first, ("tmpfs", workdir, 1024 * 1024))
        plan.read_paths.append(workdir)
    config: dict = {"max_processes": policy.max_processes,
                    "max_open_files": policy.max_open_files,
                    "landlock": {"read": [*plan.read_paths, "/proc"],
                                 "write": [*plan.write_paths], "dev": "/dev", "network": False}}
    env = {"HOME": WORK_DIR, "TMPDIR": WORK_DIR, "PATH": "/usr/local/bin:/usr/bin:/bin",
           "LANG": "C.UTF-8", **policy.env}
    if policy.egress_socket:
        from jarvis.sandbox.netproxy import PROXY_HOST, PROXY_PORT

        plan.ops.append(("ro", policy.egress_socket, SANDBOX_EGRESS))
        config["egress"] = {"socket": SANDBOX_EGRESS, "host": PROXY_HOST, "port": PROXY_PORT}
        config["landlock"]["connect_ports"] = [PROXY_PORT]
        proxy = f"http://{PROXY_HOST}:{PROXY_PORT}"
        # Both spellings (curl and Python read the lowercase ones first); Node.js >= 22.21
        # follows them for fetch and http only with NODE_USE_ENV_PROXY.
        env.update({name: proxy for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy",
                                             "http_proxy")}, NODE_USE_ENV_PROXY="1")
        for name in ("NO_PROXY", "no_proxy"):
            env.pop(name, None)
    shim = [plan.python, "-I", "-S", SANDBOX_SHIM, json.dumps(config), *argv]
    if mechanism == "namespaces":
        return namespaces_command(sandbox, sys.executable, None, shim, plan=plan, env=env,
                                  workdir=workdir)[0]
    from jarvis.sandbox.probe import find_bwrap

    bwrap = find_bwrap() or "bwrap"
    command = bwrap_command(sandbox, bwrap, None, shim, plan=plan, env=env, workdir=workdir)[0]
    identity = host_identity(sandbox)
    if identity is None:
        return command
    # As root: stage what the sandbox uid cannot reach and drop to it before bubblewrap runs
    # (launch.bwrap_preexec, done by jarvis's launcher here: the MCP client spawns through
    # anyio, which runs no code between fork and exec).
    sources = [str(src) for kind, src, _ in plan.ops if kind in ("ro", "rw")]
    spec = {"exec": command, "drop": identity,
            "sources": [*sources, os.path.realpath(shutil.which(bwrap) or bwrap)]}
    return [sys.executable, "-I", "-S", launcher(), json.dumps(spec)]
