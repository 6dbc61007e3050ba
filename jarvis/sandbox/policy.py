"""What a sandbox may see and use: the isolation mechanism, paths, network, and limits.

`SandboxPolicy.from_config(config)` reads the `[sandbox]` table; the code tools override the
limits with their own `[tools.repl]` / `[tools.code_interpreter]` settings. Both are frozen
and hashable, because a pool of interpreters is keyed by the policy it was built for.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from jarvis.sandbox.runtime import SYSTEM_DIRS  # noqa: F401 - the sandbox's system folders

ISOLATIONS = ("auto", "bwrap", "namespaces", "none")


@dataclass(slots=True, frozen=True)
class SandboxLimits:
    """Limits of one sandboxed interpreter.

    Args:
        timeout: wall-clock seconds per call; past it the code is interrupted, then killed.
        cpu_seconds: CPU seconds per call, all threads together (RLIMIT_CPU soft limit, moved
            by jarvis before each call; the interpreter is frozen between calls).
        session_cpu_seconds: CPU seconds for the interpreter's whole life (hard limit).
        memory_mb: address-space limit (RLIMIT_AS).
        max_output_chars: printed characters kept per call; more stops the code.
        max_file_mb: largest file the code may write (RLIMIT_FSIZE).
        max_open_files: RLIMIT_NOFILE.
        tmp_mb: size of the private work folder (a tmpfs at /tmp in the sandbox).
        max_threads: threads and processes of the sandbox together (RLIMIT_NPROC, counted
            per user namespace by the kernel; it binds only because the sandbox never runs
            as the host's root, see SandboxPolicy.uid).
    """

    timeout: float = 30.0
    cpu_seconds: int = 10
    session_cpu_seconds: int = 600
    memory_mb: int = 512
    max_output_chars: int = 20_000
    max_file_mb: int = 50
    max_open_files: int = 256
    tmp_mb: int = 64
    max_threads: int = 64

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"sandbox limit {name} must be positive, got {value!r}")


@dataclass(slots=True, frozen=True)
class SandboxPolicy:
    """Where model-written code runs and what it can reach.

    Args:
        isolation: "auto" (the strongest mechanism this host supports), "bwrap" (bubblewrap),
            "namespaces" (jarvis's own unshare/mount/pivot_root launcher) or "none" (a plain
            child process with rlimits and seccomp only: no isolation of files, network or
            processes).
        network: give the sandbox the host's network (default: none at all, not even
            loopback).
        read_only_paths: extra files/folders visible read-only, at the same path.
        writable_paths: extra folders visible read-write, at the same path.
        site_packages: make the jarvis environment's site-packages visible (read-only), so
            installed libraries (numpy, ...) can be imported.
        limits: resource limits (see SandboxLimits).
        uid: the host uid (and gid) the sandbox runs as when jarvis runs as root. The kernel
            never applies RLIMIT_NPROC to host root, so a sandbox mapped onto it could start
            threads until the host ran out of pids; an unprivileged uid makes max_threads
            bind, and a namespace escape yields only that uid. Default 65534 ("nobody"): it
            owns no files by convention, and sandboxes share it at no cost: the kernel (>= 5.14)
            counts RLIMIT_NPROC per user namespace (each sandbox has its own count), and one
            sandbox sees no process of another. But no *other* process on the host may run as
            it: the uid owns the sandboxes' user namespaces, so such a process has every
            capability in them (it read a sandbox's memory). A non-root jarvis keeps its own
            uid.
    """

    isolation: str = "auto"
    network: bool = False
    read_only_paths: tuple[str, ...] = ()
    writable_paths: tuple[str, ...] = ()
    site_packages: bool = True
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    uid: int = 65534

    def __post_init__(self) -> None:
        if isinstance(self.uid, bool) or not isinstance(self.uid, int) or self.uid <= 0:
            raise ValueError(f"sandbox uid must be a positive number (not root), got "
                             f"{self.uid!r}")
        if self.isolation not in ISOLATIONS:
            raise ValueError(f"sandbox isolation must be one of {', '.join(ISOLATIONS)}, got "
                             f"{self.isolation!r}")

    @classmethod
    def from_config(cls, config: Any = None, **limits: Any) -> SandboxPolicy:
        """The policy of a JarvisConfig's [sandbox] table (defaults without one); `limits`
        that are not None override the table's limits."""
        section = getattr(config, "sandbox", None)
        if section is None:
            base = cls()
        else:
            values = section.model_dump()
            base = cls(isolation=values["isolation"], network=values["network"],
                       read_only_paths=tuple(values["read_only_paths"]),
                       writable_paths=tuple(values["writable_paths"]),
                       site_packages=values["site_packages"], uid=values["uid"],
                       limits=SandboxLimits(**{k: values[k] for k in SandboxLimits.__slots__}))
        chosen = {k: v for k, v in limits.items() if v is not None}
        return replace(base, limits=replace(base.limits, **chosen)) if chosen else base

    def with_isolation(self, isolation: str) -> SandboxPolicy:
        return replace(self, isolation=isolation)


@functools.lru_cache(maxsize=2)
def python_paths(site_packages: bool) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """The interpreter to run in the sandbox, the paths of its installation it needs (the
    standard library, and the shared libraries it and the extension modules load from its
    prefix: see runtime.py), and the site-packages folders to add to its sys.path.

    The *base* interpreter runs (not a venv's wrapper), so the venv's pyvenv.cfg and anything
    else in the project folder stay out of sight; the venv's site-packages are added by path.
    Computed once per process (the libraries are found by reading ELF headers).
    """
    from jarvis.sandbox.runtime import interpreter_libraries

    base = getattr(sys, "_base_executable", "") or sys.executable
    executable = os.path.realpath(base)
    paths = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    stdlib = list(dict.fromkeys(paths[k] for k in ("stdlib", "platstdlib")))
    packages: list[str] = []
    if site_packages:
        for folder in site.getsitepackages():
            real = os.path.realpath(folder)
            if os.path.isdir(real) and real not in packages:
                packages.append(real)
    libraries = interpreter_libraries(executable, stdlib, packages,
                                      sysconfig.get_config_var("LIBDIR") or "")
    return executable, tuple(dict.fromkeys([*stdlib, *libraries])), tuple(packages)

