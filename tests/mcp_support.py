"""Helpers for the MCP tests: config files naming the SDK-written servers in tests/mcp_servers,
an HTTP server subprocess on a loopback port, and waiting for observable state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from waiting import wait_for

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
TOOLBOX = SERVERS / "toolbox.py"
FEATURES = SERVERS / "features.py"
NODISCOVER = SERVERS / "nodiscover.py"


def approve_all(spec: Any, arguments: dict[str, Any]) -> bool:
    """A person who approves every call. Every tool of an MCP server not marked trusted asks
    first (docs/trust.md); these tests are about what happens once a call is approved."""
    return True


def toml_value(value: Any) -> str:
    return json.dumps(value)


# Sandboxed (the default for stdio) a Python server starts through bubblewrap and the sandbox's
# shim: on a machine loaded by parallel test runs that went past the default 10 s at times.
STDIO_CONNECT = {"connect_timeout": 30}


def stdio_server(label: str, *extra: str, **options: Any) -> dict[str, Any]:
    """A [mcp.servers.X] table running the toolbox server over stdio."""
    return {"command": sys.executable, "args": [str(TOOLBOX), "--label", label, *extra],
            **STDIO_CONNECT, **options}


def write_config(folder: Path, servers: dict[str, dict[str, Any]], extra: str = "") -> Path:
    """Write folder/config.toml declaring `servers`."""
    lines = [extra] if extra else []
    for name, table in servers.items():
        lines.append(f"[mcp.servers.{name}]")
        for key, value in table.items():
            if isinstance(value, dict):
                inner = ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items())
                lines.append(f"{key} = {{ {inner} }}")
            else:
                lines.append(f"{key} = {toml_value(value)}")
        lines.append("")
    path = folder / "config.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def pid_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


class HttpToolbox:
    """The toolbox server on a free loopback port over streamable HTTP (a real subprocess)."""

    def __init__(self, folder: Path, label: str = "web") -> None:
        port_file = folder / f"{label}.port"
        self.proc = subprocess.Popen([sys.executable, str(TOOLBOX), "--label", label,
                                      "--http", str(port_file)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = wait_for(lambda: port_file.exists() and port_file.read_text().strip(), timeout=20)
        self.url = f"http://127.0.0.1:{int(port)}/mcp"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def features_server(*extra: str, **options: Any) -> dict[str, Any]:
    """A [mcp.servers.X] table running the features server over stdio."""
    return {"command": sys.executable, "args": [str(FEATURES), *extra], **STDIO_CONNECT,
            **options}


class HttpFeatures:
    """The features server on a free loopback port: streamable HTTP, or HTTP+SSE (`sse`),
    optionally requiring a bearer `token`."""

    def __init__(self, folder: Path, sse: bool = False, token: str | None = None,
                 port: int = 0) -> None:
        port_file = folder / f"features-{'sse' if sse else 'http'}-{token or 'open'}.port"
        port_file.unlink(missing_ok=True)  # a restart waits for the new server's own file
        args = [sys.executable, str(FEATURES), "--sse" if sse else "--http", str(port_file),
                "--port", str(port)]
        if token:
            args += ["--token", token]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port = wait_for(lambda: port_file.exists() and port_file.read_text().strip(), timeout=20)
        self.port = int(port)
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/sse" if sse else f"{self.base}/mcp"

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 60,
        **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run `jarvis ARGS` as a real subprocess."""
    env = {**env, "PYTHONUNBUFFERED": "1"}
    env.pop("JARVIS_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "jarvis.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, **kwargs)


def cli_in_process(args: list[str], env: dict[str, str], cwd: Path
                   ) -> subprocess.CompletedProcess[str]:
    """`jarvis ARGS` as `cli` runs it, but in this process (tests/cli_support.py): for tests of
    what a command says, not of the process (its exit, its children, the terminal)."""
    from cli_support import run_in_process

    env = dict(env)
    env.pop("JARVIS_CONFIG", None)
    return run_in_process(args, env=env, cwd=cwd)


__all__ = ["FEATURES", "NODISCOVER", "HttpFeatures", "HttpToolbox", "SERVERS", "TOOLBOX", "cli",
           "cli_in_process", "features_server", "os", "pid_alive", "stdio_server", "write_config"]
