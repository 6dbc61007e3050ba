"""The `repl` tool: a real sandboxed child process per run, through the real ToolExecutor."""

from __future__ import annotations

import os
import resource
import sys
import time

import pytest
from sandbox_support import descendants, new_descendants, wait_until_gone

from jarvis.core.types import ToolCall
from jarvis.errors import ConfigError
from jarvis.resources import default_manager, release_run
from jarvis.tools.catalog import build_tool
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.repl import ReplTool

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")


@pytest.fixture(scope="module")
def repl() -> ReplTool:
    return ReplTool(timeout=2.0, cpu_seconds=1, memory_mb=256, max_output_chars=2_000,
                    requires_confirmation=False, acquire_timeout=5.0)


def call(executor: ToolExecutor, code: str):
    return executor.execute(ToolCall(id="", name="repl", arguments={"code": code}))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie that was not reaped yet is dead for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_state_survives_within_a_run_and_is_gone_after(repl: ReplTool) -> None:
    ex = ToolExecutor([repl], run_id="repl-run-1")
    try:
        first = call(ex, "import math\nx = 40\ndef twice(v):\n    return 2 * v")
        assert first.success and first.metadata["fresh_interpreter"] is True
        second = call(ex, "x + 2")
        assert second.success and second.content.strip() == "42"
        assert second.metadata["fresh_interpreter"] is False
        assert call(ex, "print(twice(math.floor(10.5)))").content.strip() == "20"
        assert call(ex, "open('/tmp/note.txt', 'w').write('kept')").success
        assert call(ex, "open('/tmp/note.txt').read()").content.strip() == "'kept'"
        proc = default_manager().leased("repl-run-1", repl.resource_spec())
        assert proc is not None and pid_alive(proc.pid) and pid_alive(proc.init_pid)
    finally:
        release_run("repl-run-1")
    # The whole sandbox is gone, and with it the run's private work folder (a tmpfs).
    assert not pid_alive(proc.pid) and not pid_alive(proc.init_pid)
    again = call(ToolExecutor([repl], run_id="repl-run-1"), "x")
    release_run("repl-run-1")
    assert not again.success and "NameError" in again.content


def test_runs_are_isolated(repl: ReplTool) -> None:
    a = ToolExecutor([repl], run_id="iso-a")
    b = ToolExecutor([repl], run_id="iso-b")
    try:
        assert call(a, "secret = 'a-only'\nopen('note.txt', 'w').write('hi')").success
        seen = call(b, "print(globals().get('secret'))\nimport os\nprint(os.path.exists('note.txt'))")
        assert seen.success and seen.content.split() == ["None", "False"]
        assert call(a, "secret").content.strip() == "'a-only'"
    finally:
        release_run("iso-a")
        release_run("iso-b")


@pytest.mark.parametrize(("code", "kind", "needle"), [
    ("n = 0\nwhile True:\n    n += 1", "cpu", "CPU time limit exceeded"),
    ("import os\nwhile True:\n    os.fork()", "exception", "BlockingIOError"),
    ("import subprocess\nsubprocess.run(['echo', 'hi'])", "exception", "BlockingIOError"),
    ("print('x' * 10_000_000)", "output", "output limit exceeded"),
    ("hog = bytearray(2 * 1024 ** 3)", "memory", "MemoryError"),
    ("import time\ntime.sleep(60)", "timeout", "wall-clock timeout"),
])
def test_hostile_code_is_stopped_with_a_clear_failure(repl: ReplTool, code: str, kind: str,
                                                       needle: str) -> None:
    ex = ToolExecutor([repl], run_id=f"hostile-{kind}")
    before = resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_CPU)
    try:
        assert call(ex, "keep = 'still here'").success
        start = time.monotonic()
        result = call(ex, code)
        assert not result.success
        # Under heavy load the wall clock may stop a runaway loop before its CPU limit does.
        allowed = {"cpu", "timeout"} if kind == "cpu" else {kind}
        assert result.metadata["error_kind"] in allowed, result.content
        assert needle in result.content or result.metadata["error_kind"] == "timeout"
        assert time.monotonic() - start < 8
        if kind == "output":
            assert len(result.content) < 2_000 + 500  # the kept output is cut at the limit
        # The interpreter (and its state) survives all of these.
        assert call(ex, "keep").content.strip() == "'still here'"
    finally:
        release_run(f"hostile-{kind}")
    # The jarvis process is unaffected: its own limits are unchanged and it still works.
    assert (resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_CPU)) == before
    assert len(bytearray(64 * 1024 * 1024)) == 64 * 1024 * 1024


def test_code_that_ignores_interrupts_is_killed_and_the_next_call_starts_fresh() -> None:
    repl = ReplTool(timeout=1.0, cpu_seconds=30, requires_confirmation=False)
    ex = ToolExecutor([repl], run_id="stubborn")
    try:
        assert call(ex, "x = 1").success
        pid = default_manager().leased("stubborn", repl.resource_spec()).pid
        stubborn = ("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "while True:\n    time.sleep(0.01)")
        result = call(ex, stubborn)
        assert not result.success and result.metadata["error_kind"] == "timeout"
        assert "state is lost" in result.content
        assert not pid_alive(pid)
        fresh = call(ex, "x")
        assert not fresh.success and "NameError" in fresh.content
        assert fresh.metadata["fresh_interpreter"] is True
    finally:
        release_run("stubborn")


def test_output_written_to_the_real_stdout_cannot_break_the_protocol(repl: ReplTool) -> None:
    ex = ToolExecutor([repl], run_id="fd1")
    try:
        result = call(ex, "import os\nos.write(1, b'\\x00\\x00\\x00\\x05junk')\nos.write(2, b'x')\n7")
        assert result.success and result.content.strip() == "7"
    finally:
        release_run("fd1")


def test_secrets_in_the_environment_do_not_reach_the_child(repl: ReplTool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    ex = ToolExecutor([repl], run_id="env-leak")
    try:
        result = call(ex, "import os\nos.environ.get('OPENAI_API_KEY')")
        assert result.success and result.content.strip() == "(no output)"
    finally:
        release_run("env-leak")


@pytest.mark.same_for_every_uid
def test_requires_confirmation_by_default_and_can_be_configured() -> None:
    default = build_tool("repl")
    assert default.spec.requires_confirmation
    denied = ToolExecutor([default], run_id="confirm").execute(
        ToolCall(id="c", name="repl", arguments={"code": "1"}))
    assert not denied.success and denied.error_type.value == "denied"
    relaxed = build_tool("repl", settings={"requires_confirmation": False, "timeout": 3})
    assert not relaxed.spec.requires_confirmation and relaxed.limits.timeout == 3
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) bogus in \[tools.repl\]"):
        build_tool("repl", settings={"bogus": 1})
    with pytest.raises(ConfigError, match=r"\[tools.repl\] memory_mb must be a positive number, got 0"):
        build_tool("repl", settings={"memory_mb": 0})


def test_bad_arguments_are_failed_results(repl: ReplTool) -> None:
    ex = ToolExecutor([repl], run_id="bad-args")
    try:
        too_long = call(ex, "1" * 100_001)
        assert not too_long.success and too_long.error_type.value == "invalid_args"
        syntax = call(ex, "def (")
        assert not syntax.success and "SyntaxError" in syntax.content
        missing = ex.execute(ToolCall(id="m", name="repl", arguments={}))
        assert not missing.success and missing.error_type.value == "invalid_args"
    finally:
        release_run("bad-args")


def test_without_a_run_id_a_call_is_its_own_run(repl: ReplTool) -> None:
    before = set(default_manager().owners())
    result = repl.execute(code="y = 5\ny * 2")
    assert result.success and result.content.strip() == "10"
    assert set(default_manager().owners()) == before  # nothing left behind
    assert not repl.execute(code="y").success
    lone = ToolExecutor([repl])  # no run id: each call is its own run, released after it
    assert call(lone, "z = 1\nz").content.strip() == "1"
    assert set(default_manager().owners()) == before
    assert "NameError" in call(lone, "z").content


def test_sdk_ask_releases_the_runs_interpreter_when_it_ends() -> None:
    from jarvis.core.config import load_config
    from jarvis.sdk import Jarvis
    from jarvis.testing import ScriptedEngine, reply, tool_call

    before = descendants()  # e.g. a session's PostgreSQL server from an earlier test
    engine = ScriptedEngine([
        reply(tool_calls=[tool_call("repl", {"code": "import os\nx = os.getpid()"})]),
        reply(tool_calls=[tool_call("repl", {"code": "x"})]),
        "done",
    ])
    config = load_config(overrides={"runs.enabled": False, "memory.enabled": False,
                                    "tools.repl": {"timeout": 5}})
    with Jarvis(config=config, engine=engine, model="m") as j:
        out = j.ask_full("use the repl", agent="orchestrator", tools=["repl"],
                         approved_tools=["repl"])
    results = out["tool_results"]
    assert [r["success"] for r in results] == [True, True], results
    assert int(results[1]["content"]) > 0  # state survived between the two calls of the run
    run_id = results[0]["metadata"]["run_id"]
    assert run_id not in default_manager().owners()  # and the interpreter ended with the run
    assert not new_descendants(before)  # no sandbox process is left


@pytest.mark.parametrize("ending", ["exit", "sigkill"])
def test_interpreters_do_not_outlive_the_jarvis_process(ending: str) -> None:
    import subprocess

    script = (
        "import os, signal, sys\n"
        "from jarvis.core.types import ToolCall\n"
        "from jarvis.tools.executor import ToolExecutor\n"
        "from jarvis.tools.repl import ReplTool\n"
        "ex = ToolExecutor([ReplTool(requires_confirmation=False)], run_id='r')\n"
        "r = ex.execute(ToolCall(id='c', name='repl', arguments={'code': 'import os; os.getpid()'}))\n"
        "assert r.success, r.content\n"
        "print(os.getpid(), flush=True)\n"
        "sys.stdin.readline()\n"
        f"if {ending!r} == 'sigkill':\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    jarvis = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert int(jarvis.stdout.readline()) == jarvis.pid
        sandbox = descendants(jarvis.pid)
        assert sandbox  # bwrap, the namespace's init and the interpreter
        jarvis.stdin.write("go\n")
        jarvis.stdin.flush()
        jarvis.wait(30)
    finally:
        jarvis.kill()
        jarvis.stdin.close()
        jarvis.stdout.close()
    # At a normal exit the default manager closes it; after SIGKILL of jarvis the sandbox
    # dies with its parent (PR_SET_PDEATHSIG / bwrap --die-with-parent), frozen or not.
    assert not wait_until_gone(sandbox, timeout=10)
