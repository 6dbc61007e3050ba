"""The suite fails when the real ~/.jarvis changes during a run (conftest.pytest_sessionfinish):
no test, and no process a test starts, may keep state in the real home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def run_inner(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_inner.py").write_text(body)
    fake_real_home = tmp_path / "real-home-jarvis"
    fake_real_home.mkdir()
    env = dict(os.environ, JARVIS_TEST_REAL_HOME=str(fake_real_home), PYTHONPATH=str(TESTS))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-n", "0", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(inner), str(inner)],
                          env=env, cwd=inner, capture_output=True, text=True, timeout=120)


def test_a_run_that_writes_the_real_home_fails(tmp_path: Path) -> None:
    out = run_inner(tmp_path, "import os, pathlib\n\ndef test_writes():\n"
                              "    home = pathlib.Path(os.environ['JARVIS_TEST_REAL_HOME'])\n"
                              "    (home / 'runs.db').write_text('x')\n")
    assert out.returncode == 1, out.stdout
    assert "1 passed" in out.stdout  # the test itself passed: the session judged the home
    assert "the test run changed the real" in out.stdout and "runs.db" in out.stdout


def test_a_run_that_keeps_to_its_jarvis_home_passes(tmp_path: Path) -> None:
    out = run_inner(tmp_path, "import os, pathlib\n\ndef test_writes():\n"
                              "    home = pathlib.Path(os.environ['JARVIS_HOME'])\n"
                              "    (home / 'runs.db').write_text('x')\n")
    assert out.returncode == 0, out.stdout + out.stderr
