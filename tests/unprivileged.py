"""A throwaway unprivileged user with a Python environment of its own, made and run from root.

Most people run jarvis as themselves, not root: the sandbox's host uid is then their own, and a
quota or a file the sandbox reaches is theirs. When the suite (or a benchmark) runs as root,
`ThrowawayUser` creates such a user (useradd), gives it a venv in its home (the interpreter the
suite runs on, with a copy of the suite's site-packages: every package the project's install
put there, owned by the user, the checkout itself read-only), runs commands as it, and removes
it. The interpreter may sit under a folder the user cannot pass through (pyenv's under /root,
mode 0700): each command then runs in a private mount namespace where such folders are covered
by a tmpfs holding only what the user needs, as the sandbox stages them for its uid
(jarvis/sandbox/unshare_launcher.py).
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class ThrowawayUser:
    """An unprivileged user with a home and a venv of its own; root only. A context manager:
    the user, its home and its temporary files are removed at the end."""

    def __init__(self, prefix: str = "jarvis-t") -> None:
        if os.geteuid() != 0:
            raise RuntimeError("only root can make a throwaway user")
        self.name = f"{prefix}{secrets.token_hex(4)}"
        subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/sh",
                        self.name], check=True, capture_output=True, text=True, timeout=60)
        entry = pwd.getpwnam(self.name)
        self.uid, self.gid, self.home = entry.pw_uid, entry.pw_gid, Path(entry.pw_dir)
        self.venv = self.home / "venv"
        self.python = self.venv / "bin" / "python"

    def __enter__(self) -> ThrowawayUser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def env(self, **extra: str) -> dict[str, str]:
        """A login-like environment of the user's own (none of root's variables)."""
        return {"HOME": str(self.home), "USER": self.name, "LOGNAME": self.name,
                "PATH": f"{self.venv}/bin:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                "PYTHONDONTWRITEBYTECODE": "1", **extra}

    def _preexec(self):
        """Between fork and exec: stage the folders the user cannot pass through, then drop
        to the user (decided here beforehand: system calls only in the child)."""
        from jarvis.sandbox import unshare_launcher

        base = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
        paths = sysconfig.get_paths(vars={"base": sys.base_prefix,
                                          "platbase": sys.base_exec_prefix})
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        needed = [base, os.path.realpath(paths["stdlib"]), os.path.realpath(paths["platstdlib"]),
                  *(str(p) for p in Path(libdir).glob("libpython*.so*")),
                  *site.getsitepackages(), str(REPO)]
        blocked = unshare_launcher.blocked_folders(needed, self.uid, self.gid)
        uid, gid = self.uid, self.gid

        def preexec() -> None:
            if blocked:
                unshare_launcher.stage(blocked)
            unshare_launcher.drop(uid, gid)

        return preexec

    def run(self, argv: list[str], *, timeout: float, cwd: str | Path | None = None,
            env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
        """Run `argv` as the user (its own environment unless `env`), output captured."""
        return subprocess.run(argv, cwd=str(cwd or self.home), env=env or self.env(),
                              preexec_fn=self._preexec(), capture_output=True, text=True,
                              timeout=timeout, **kwargs)

    def make_venv(self) -> None:
        """A venv in the user's home on the suite's interpreter, holding the suite's
        site-packages (jarvis itself stays an editable install of the checkout): its folders
        are the user's; its files are hard links to the suite's (read-only to the user, as
        installed packages are) on the same file system, else copies the user owns."""
        base = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
        done = self.run([base, "-m", "venv", "--without-pip", str(self.venv)], timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"cannot make the user's venv: {done.stderr.strip()}")
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        target = self.venv / "lib" / version / "site-packages"
        for source in site.getsitepackages():
            if os.stat(source).st_dev == os.stat(target).st_dev:  # as root: links, then the
                copied = subprocess.run(["cp", "-al", f"{source}/.", str(target)],  # folders
                                        capture_output=True, text=True, timeout=600)
                for folder, _, _ in os.walk(target):
                    os.chown(folder, self.uid, self.gid)
            else:
                copied = self.run(["cp", "-a", f"{source}/.", str(target)], timeout=600)
            if copied.returncode != 0:
                raise RuntimeError(f"cannot copy {source}: {copied.stderr.strip()}")
        for name in ("uv", "uvx"):  # binaries, not scripts: they run from any venv's bin
            binary = Path(sysconfig.get_path("scripts")) / name
            if binary.is_file():
                shutil.copy2(binary, self.venv / "bin" / name)
                os.chown(self.venv / "bin" / name, self.uid, self.gid)

    def remove(self) -> None:
        """The user's home (hard links: the suite's files stay), its temporary files, and the
        user (userdel's own removal of a big home outlasted any sane timeout under load)."""
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(f"/tmp/pytest-of-{self.name}", ignore_errors=True)
        subprocess.run(["userdel", self.name], capture_output=True, timeout=120)
