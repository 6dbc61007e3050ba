"""The README's examples run as written (so the front page cannot drift from the code)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

from jarvis.testing import FakeOpenAIServer, reply, tool_call

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def _block_with(lang: str, marker: str) -> str:
    (block,) = [b for b in _blocks(lang) if marker in b]
    return block


def _env(cli_env: dict[str, str]) -> dict[str, str]:
    env = dict(cli_env)
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_offline_ask_demo(tmp_path: Path, cli_env: dict[str, str]) -> None:
    script = _block_with("bash", "jarvis.testing serve").replace("8811", str(_free_port()))
    script = script.replace("python ", f"{sys.executable} ")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env=_env(cli_env), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # The answer is the last line (the server writes its URL to server.url).
    assert proc.stdout.strip().splitlines()[-1] == "15% of 340 is 51."
    assert "[tool] calculator" in proc.stderr


def test_tools_tour(tmp_path: Path, cli_env: dict[str, str]) -> None:
    block = _block_with("bash", "jarvis tools list")
    for line in block.strip().splitlines():
        command = line.split("   #")[0]
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              env=_env(cli_env), cwd=tmp_path, timeout=60)
        if "9**9**9" in line:
            assert proc.returncode == 1 and "too large" in proc.stderr
            assert "Traceback" not in proc.stderr
        else:
            assert proc.returncode == 0, (line, proc.stderr)
            assert proc.stdout


def test_sdk_example_against_loopback_engine(tmp_path: Path, cli_env: dict[str, str]) -> None:
    code = _block_with("python", "from jarvis import Jarvis")
    script = [reply(tool_calls=[tool_call("calculator", {"expression": "pi * 7**2"})]),
              "About 153.94."]
    with FakeOpenAIServer(script) as server:
        env = _env(cli_env) | {"JARVIS_ENGINE": "vllm", "VLLM_HOST": server.url,
                               "JARVIS_MODEL": "m"}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "calculator: 153.93804002589985 (success=True)" in proc.stdout
    assert "About 153.94." in proc.stdout


def test_workspace_tool_example(tmp_path: Path, cli_env: dict[str, str]) -> None:
    (tmp_path / "config.toml").write_text("")
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "greet.py").write_text(_block_with("python", "def greet"))
    proc = subprocess.run([sys.executable, "-m", "jarvis.cli", "tools", "run", "greet",
                           '{"name": "Ada", "excited": true}'], capture_output=True, text=True,
                          env=_env(cli_env), cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Hello, Ada!"


def test_setup_command_works_with_and_without_sudo(tmp_path: Path) -> None:
    """The quickstart's one command: `sudo` where there is one, nothing where there is none
    (a container running as root has no sudo). Its apt-get part is run with apt-get replaced
    by echo, with and without a sudo on PATH."""
    import os
    import re

    line = next(x for x in _block_with("bash", "apt-get install").splitlines() if "apt-get" in x)
    apt_part = line.split(" && python3 -m venv")[0]
    assert "sudo apt-get" not in re.sub(r"\$\(command -v sudo\) ", "", apt_part)
    command = apt_part.replace("apt-get", "echo apt-get")
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("echo", "bash"):
        os.symlink(f"/bin/{tool}" if os.path.exists(f"/bin/{tool}") else f"/usr/bin/{tool}",
                   bare / tool)
    without = subprocess.run(["/bin/bash", "-c", command], capture_output=True, text=True,
                             env={"PATH": str(bare)}, timeout=30)
    assert without.returncode == 0, without.stderr
    assert without.stdout.splitlines() == ["apt-get update",
                                           "apt-get install -y bubblewrap dovecot-imapd",
                                           "apt-get install -y nodejs npm"]  # no npm here
    (bare / "sudo").write_text('#!/bin/bash\necho "as root: $*"\n')
    (bare / "sudo").chmod(0o755)
    with_sudo = subprocess.run(["/bin/bash", "-c", command], capture_output=True, text=True,
                               env={"PATH": str(bare)}, timeout=30)
    assert with_sudo.stdout.splitlines() == ["as root: echo apt-get update",
                                             "as root: echo apt-get install -y bubblewrap dovecot-imapd",
                                             "as root: echo apt-get install -y nodejs npm"]
