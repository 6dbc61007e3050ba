"""The sandbox tests, and every entry point with the starter config, as an unprivileged user
with a Python environment of its own.

Most people run jarvis as themselves: the sandbox's host uid is then their own uid, its
per-uid quotas theirs, its venv and interpreter under their home. The suite covers both:

  - run as root (CI, `.ci/run`), this test makes a throwaway user with a venv of its own
    (tests/unprivileged.py) and runs every sandbox test module as that user; a failure, or a
    test skipped there, fails this test;
  - run as a normal user (`python -m pytest` without sudo), the suite already is that case:
    the sandbox modules run as the user, and this test checks that the sandbox's host uid is
    the user's own.

Tests of jarvis running as root (the [sandbox] uid, its staging and uid switches) or that need
root to set up are marked `root_only`; as a normal user they are deselected, not skipped.
Tests whose outcome cannot depend on the host uid (they start no sandbox) are marked
`same_for_every_uid` and run once, as root; every test that starts a sandbox runs as both.

The run as the other user is the suite's longest test (2-3 minutes): conftest.py puts it
first, so that it runs beside the rest of the suite instead of after it.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")

MODULES = ("tests/test_sandbox.py", "tests/test_sandbox_limits.py",
           "tests/test_sandbox_redteam3.py", "tests/test_sandbox_host_resources.py",
           "tests/test_repl.py", "tests/test_code_interpreter.py", "tests/test_mcp_sandbox.py",
           "tests/test_mcp_network.py",
           # Every entry point (tools run, ask, the SDK, serve, the scheduler, mcp serve) with
           # the starter config, and the newcomer's first commands: as the person, not root.
           "tests/test_every_tool_everywhere.py", "tests/test_cli_newcomer.py")


def test_the_sandbox_tests_pass_as_an_unprivileged_user() -> None:
    if os.geteuid() != 0:
        # Already the unprivileged case: the sandbox runs as this user's own uid.
        from jarvis.sandbox import SandboxedPython, SandboxPolicy

        proc = SandboxedPython(SandboxPolicy(isolation="bwrap"))
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
            assert uids == [str(os.getuid())] * 4, uids
            assert proc.run("6 * 7").output == "42\n"
        finally:
            proc.close()
        return
    from unprivileged import REPO, ThrowawayUser

    with ThrowawayUser() as user:
        user.make_venv()
        done = user.run([str(user.python), "-m", "pytest", "-p", "no:cacheprovider", "-q",
                         "-n", "2", "-m", "not same_for_every_uid", *MODULES], cwd=REPO,
                        timeout=1800)
        tail = "\n".join(done.stdout.splitlines()[-40:]) + done.stderr[-2000:]
        summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
        assert done.returncode == 0, f"as {user.name} (uid {user.uid}):\n{tail}"
        assert re.search(r"\d+ passed", summary), tail
        assert not re.search(r"skipped|xfail|xpass|error", summary), f"not all ran:\n{tail}"
