"""`jarvis serve` and `jarvis mcp serve --http` as real processes on a loopback port, for
tests that go through the command line."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def owner_headers(env: dict[str, str]) -> dict[str, str]:
    """What the owner's clients send: the token the server made in env's JARVIS_HOME."""
    token = (Path(env["JARVIS_HOME"]) / "serve.token").read_text().strip()
    return {"Authorization": f"Bearer {token}"}


@contextmanager
def jarvis_serve(env: dict[str, str], folder: Path, *args: str,
                 config: str = "") -> Iterator[str]:
    """`jarvis serve --port 0 ARGS` in `folder` (with `config` as its config.toml); yields
    its URL once it listens. Stopped (and waited for) on exit."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(config)
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "serve", "--port", "0", *args],
                            env=env, cwd=folder, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    drain = None
    try:
        first = proc.stderr.readline()
        assert first.startswith("jarvis serve: listening on http://"), (
            first + proc.stderr.read() if proc.poll() is not None else first)
        # The rest of stderr is read as it comes (a full pipe would stall the server).
        drain = threading.Thread(target=proc.stderr.read, daemon=True)
        drain.start()
        yield first.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        if drain is not None:
            drain.join(timeout=15)
        proc.stderr.close()


@contextmanager
def mcp_serve_http(env: dict[str, str], folder: Path, *args: str,
                   config: str = "") -> Iterator[str]:
    """`jarvis mcp serve ARGS --http 127.0.0.1:0` in `folder`; yields its base URL (without
    /mcp) once it listens. Stopped (and waited for) on exit."""
    import re

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(config)
    proc = subprocess.Popen([sys.executable, "-m", "jarvis.cli", "mcp", "serve", *args,
                             "--http", "127.0.0.1:0"], env=env, cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    drain = None
    try:
        seen = ""
        for line in proc.stderr:
            seen += line
            found = re.search(r"over (http://127\.0\.0\.1:\d+)/mcp", line)
            if found:
                break
        else:
            raise AssertionError(f"jarvis mcp serve did not start: {seen}")
        drain = threading.Thread(target=proc.stderr.read, daemon=True)
        drain.start()
        yield found.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        if drain is not None:
            drain.join(timeout=15)
        proc.stderr.close()
