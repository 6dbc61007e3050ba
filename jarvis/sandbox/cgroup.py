"""Kernel memory a sandbox holds outside RLIMIT_AS, and how it is bounded here.

Socket buffers, pipes and tmpfs pages are kernel memory no process's RLIMIT_AS counts. Two
ways bound them, and `jarvis doctor` says which is in force:

  - "cgroup": the host delegates a cgroup v2 with the memory and pids controllers to jarvis
    (e.g. `systemd-run --user --scope -p Delegate=yes jarvis ...`). Each sandbox then gets a
    cgroup of its own with memory.max (memory_mb + tmp_mb + CGROUP_SLACK_MB: the kernel counts
    socket buffers, pipes and tmpfs pages there) and pids.max; jarvis moves itself into a leaf
    `jarvis` beside them the first time (cgroup v2 lets only leaves hold processes).
  - "buffers" otherwise: the worker's seccomp filter keeps every socket buffer at the host's
    default size (SO_SNDBUF/SO_RCVBUF refused), refuses descriptor passing (SCM_RIGHTS, via
    sendmsg) and TCP without the network, and F_SETPIPE_SZ; so each of the sandbox's
    max_open_files descriptors holds at most two default buffers.
The buffer rules hold in both modes.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

CGROUP_SLACK_MB = 64  # page tables, kernel stacks, the interpreter's page cache
_lock = threading.Lock()
_state: dict[str, Any] = {}
_counter = [0]


def _cgroup2_mount() -> str | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split(" ", 1)[0] == "cgroup2":
                    return left.split()[4]
    except OSError:
        return None
    return None


def _own_cgroup() -> str | None:
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        return None
    return None


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def delegation() -> tuple[str | None, str]:
    """(the cgroup v2 folder jarvis may place sandboxes under, "") or (None, why not). Looks
    only: nothing is created or moved (see `setup`)."""
    mount = _cgroup2_mount()
    own = _own_cgroup()
    if mount is None or own is None:
        return None, "no cgroup v2 hierarchy is mounted"
    if own.endswith("/jarvis") and _state.get("parent"):
        return _state["parent"], ""
    folder = os.path.normpath(mount + own)
    controllers = _read(os.path.join(folder, "cgroup.controllers")).split()
    missing = [c for c in ("memory", "pids") if c not in controllers]
    if missing:
        return None, (f"the cgroup v2 {' and '.join(missing)} controller"
                      f"{'s are' if len(missing) > 1 else ' is'} not available to jarvis's "
                      f"cgroup {folder}")
    if not all(os.access(os.path.join(folder, name), os.W_OK)
               for name in ("", "cgroup.procs", "cgroup.subtree_control")):
        return None, (f"jarvis's cgroup {folder} is not delegated to it; run jarvis in one "
                      f"that is, e.g. `systemd-run --user --scope -p Delegate=yes jarvis ...`")
    others = [p for p in _read(os.path.join(folder, "cgroup.procs")).split()
              if int(p) != os.getpid()]
    if others:
        return None, (f"jarvis's cgroup {folder} holds other processes too ({len(others)}); "
                      f"run jarvis in a cgroup of its own, e.g. `systemd-run --user --scope "
                      f"-p Delegate=yes jarvis ...`")
    return folder, ""


def setup() -> tuple[str | None, str]:
    """Once per process: move jarvis into `<cgroup>/jarvis` and enable the memory and pids
    controllers for the sandboxes' cgroups beside it. (folder, "") or (None, why not)."""
    with _lock:
        if "result" in _state:
            return _state["result"]
        folder, why = delegation()
        if folder is not None and not _state.get("parent"):
            try:
                leaf = os.path.join(folder, "jarvis")
                os.makedirs(leaf, exist_ok=True)
                with open(os.path.join(leaf, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
                with open(os.path.join(folder, "cgroup.subtree_control"), "w") as f:
                    f.write("+memory +pids")
                _state["parent"] = folder
            except OSError as exc:
                folder, why = None, f"cannot set up jarvis's cgroup {folder}: {exc}"
        _state["result"] = (folder, why)
        return folder, why


class SandboxCgroup:
    """One sandbox's cgroup: created before it starts, removed when it has ended."""

    def __init__(self, parent: str, memory_bytes: int, pids: int) -> None:
        with _lock:
            _counter[0] += 1
            name = f"sandbox-{os.getpid()}-{_counter[0]}"
        self.path = os.path.join(parent, name)
        os.mkdir(self.path)
        try:
            for key, value in (("memory.max", memory_bytes), ("pids.max", pids)):
                with open(os.path.join(self.path, key), "w") as f:
                    f.write(str(value))
            # opened here, written by the child between fork and exec: system calls only
            self.procs_fd = os.open(os.path.join(self.path, "cgroup.procs"),
                                    os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            os.rmdir(self.path)
            raise

    def join(self) -> None:
        """In the child, before exec: the process (and all it starts) moves in."""
        os.write(self.procs_fd, b"0")

    def remove(self) -> None:
        """Once the sandbox's processes are gone (cgroup.kill for any that are not)."""
        if self.procs_fd >= 0:
            os.close(self.procs_fd)
            self.procs_fd = -1
        try:
            os.rmdir(self.path)
        except OSError:
            try:
                with open(os.path.join(self.path, "cgroup.kill"), "w") as f:
                    f.write("1")
                os.rmdir(self.path)
            except OSError:
                pass


def for_sandbox(memory_mb: int, tmp_mb: int, max_threads: int) -> SandboxCgroup | None:
    """A cgroup for a new sandbox where the host delegates one, else None ("buffers" mode).
    Raises OSError when the delegated cgroup cannot take one more."""
    parent, _ = setup()
    if parent is None:
        return None
    return SandboxCgroup(parent, (memory_mb + tmp_mb + CGROUP_SLACK_MB) * 2 ** 20,
                         max_threads + 4)  # + bubblewrap's two processes, the launcher


@functools.lru_cache(maxsize=1)
def _net_sysctls() -> dict[str, int]:
    values = {}
    for key in ("core/rmem_default", "core/wmem_default"):
        values[key] = int(_read(f"/proc/sys/net/{key}").strip() or 212992)
    for key in ("ipv4/tcp_rmem", "ipv4/tcp_wmem"):
        fields = _read(f"/proc/sys/net/{key}").split()
        values[key] = int(fields[2]) if len(fields) == 3 else 6 * 2 ** 20
    return values


def kernel_memory(max_open_files: int = 256, network: bool = False, memory_mb: int = 512,
                  tmp_mb: int = 64, max_threads: int = 64) -> dict[str, Any]:
    """How the kernel memory a sandbox holds outside memory_mb is bounded on this host (what
    `jarvis doctor` reports)."""
    parent, why = delegation() if not _state.get("result") else _state["result"]
    if parent is not None:
        return {"mode": "cgroup", "cgroup": parent,
                "memory_max_bytes": (memory_mb + tmp_mb + CGROUP_SLACK_MB) * 2 ** 20,
                "pids_max": max_threads + 4, "descriptor_passing": network}
    net = _net_sysctls()
    per_buffer = max(net["core/rmem_default"], net["core/wmem_default"])
    if network:  # TCP's buffers grow by themselves up to tcp_[rw]mem's maximum
        per_buffer = max(per_buffer, net["ipv4/tcp_rmem"], net["ipv4/tcp_wmem"])
    return {"mode": "buffers", "why_no_cgroup": why, "buffer_bytes": per_buffer,
            "bound_bytes": max_open_files * 2 * per_buffer, "descriptor_passing": network}


def describe_memory(info: dict[str, Any]) -> str:
    """One line for `jarvis doctor`."""
    passing = ("descriptor passing allowed (network = true)" if info["descriptor_passing"]
               else "no descriptor passing")
    if info["mode"] == "cgroup":
        return (f"cgroup v2 under {info['cgroup']} (memory.max "
                f"{info['memory_max_bytes'] // 2 ** 20} MB, pids.max {info['pids_max']} per "
                f"sandbox; socket buffers at their defaults, {passing})")
    return (f"bounded buffers: socket buffers at the host's default "
            f"({info['buffer_bytes']} bytes), pipes at 64 KiB, {passing}: at most "
            f"{info['bound_bytes'] // 2 ** 20} MB per sandbox beyond memory_mb "
            f"(no cgroup: {info['why_no_cgroup']})")
