"""The stateless `code_interpreter` tool: one fresh sandboxed process per call."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from jarvis.core.types import ToolCall
from jarvis.resources import ResourceManager
from jarvis.tools.catalog import build_tool
from jarvis.tools.code_interpreter import CodeInterpreterTool
from jarvis.tools.context import ToolContext
from jarvis.tools.executor import ToolExecutor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux sandbox")


@pytest.fixture(scope="module")
def tool() -> CodeInterpreterTool:
    return CodeInterpreterTool(timeout=2.0, cpu_seconds=1, memory_mb=256, max_output_chars=1_000,
                               requires_confirmation=False)


def run(tool: CodeInterpreterTool, code: str, run_id: str = "ci-run"):
    return ToolExecutor([tool], run_id=run_id).execute(
        ToolCall(id="", name="code_interpreter", arguments={"code": code}))


def test_runs_code_and_keeps_no_state(tool: CodeInterpreterTool) -> None:
    first = run(tool, "x = 6 * 7\nprint('answer', x)\nx")
    assert first.success and first.content == "answer 42\n42\n"
    second = run(tool, "x")  # same run id: still a fresh process
    assert not second.success and "NameError: name 'x' is not defined" in second.content


@pytest.mark.parametrize(("code", "kind"), [
    ("while True:\n    pass", "cpu"),
    ("import os\nos.fork()", "exception"),
    ("print('y' * 5_000)", "output"),
    ("a = [0] * (10 ** 9)", "memory"),
])
def test_limits_apply(tool: CodeInterpreterTool, code: str, kind: str) -> None:
    result = run(tool, code)
    # A runaway loop hits its CPU limit first, unless the machine is so loaded that the
    # wall-clock limit comes first; either way it is stopped with a clear failure.
    allowed = {"cpu", "timeout"} if kind == "cpu" else {kind}
    assert not result.success and result.metadata["error_kind"] in allowed, result.content


@pytest.mark.same_for_every_uid
def test_requires_confirmation_unless_configured() -> None:
    assert build_tool("code_interpreter").spec.requires_confirmation
    assert not build_tool("code_interpreter",
                          settings={"requires_confirmation": False}).spec.requires_confirmation


def test_pool_limits_concurrent_interpreters() -> None:
    tool = CodeInterpreterTool(timeout=30.0, max_processes=1, acquire_timeout=0.3,
                               requires_confirmation=False)
    manager = ResourceManager()
    started = threading.Event()
    results: dict[str, object] = {}

    def slow() -> None:
        started.set()
        results["slow"] = tool.invoke({"code": "import time\ntime.sleep(1.5)\n'done'"},
                                      ToolContext(resources=manager))

    t = threading.Thread(target=slow)
    t.start()
    started.wait(5)
    pool = manager.pool(tool.resource_spec())
    deadline = time.monotonic() + 10
    while pool.live == 0 and time.monotonic() < deadline:  # the slow call holds the only one
        time.sleep(0.01)
    assert pool.live == 1
    busy = tool.invoke({"code": "1"}, ToolContext(resources=manager))
    t.join(40)
    manager.close()
    assert not busy.success and "in use" in busy.content
    assert results["slow"].success and results["slow"].content.strip() == "'done'"
    assert pool.stats()["created"] == 1


def test_code_cannot_signal_other_processes(tool: CodeInterpreterTool) -> None:
    # Sandboxed code running as our user could otherwise kill jarvis (its parent) or any other
    # process of ours; signals to itself keep working.
    import subprocess

    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for target in (victim.pid, "os.getppid()", f"-{victim.pid}"):
            result = run(tool, f"import os\nos.kill({target}, 9)")
            assert not result.success and "PermissionError" in result.content, result.content
        # nor read (or write) another process's memory: EPERM (1), not EFAULT or success
        peek = run(tool, "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                         "buf = ctypes.create_string_buffer(8)\n"
                         "class Iov(ctypes.Structure):\n"
                         "    _fields_ = [('base', ctypes.c_void_p), ('len', ctypes.c_size_t)]\n"
                         "mine, theirs = Iov(ctypes.addressof(buf), 8), Iov(0x400000, 8)\n"
                         f"r = libc.process_vm_readv({victim.pid}, ctypes.byref(mine), 1, "
                         "ctypes.byref(theirs), 1, 0)\nprint(r, ctypes.get_errno())")
        assert peek.success and peek.content == "-1 1\n", peek.content
        assert victim.poll() is None
        own = run(tool, "import os, signal\nsignal.signal(signal.SIGUSR1, lambda *a: print('got'))"
                        "\nos.kill(os.getpid(), signal.SIGUSR1)\nos.kill(0, 0)")
        assert own.success and own.content == "got\n", own.content
    finally:
        victim.kill()
        victim.wait()


def test_code_interrupting_itself_is_not_reported_as_a_timeout(tool: CodeInterpreterTool) -> None:
    result = run(tool, "raise KeyboardInterrupt('mine')")
    assert not result.success and result.metadata["error_kind"] == "exception", result.content
    assert "KeyboardInterrupt: mine" in result.content


# --- sandboxes started ahead ([tools.code_interpreter] prestart) -------------------------------
def test_a_prestarted_sandbox_serves_one_call_and_is_replaced(mechanism: str) -> None:
    # A spare is a fresh process that has run nothing: what one call leaves (variables,
    # files in /tmp) never reaches the next, which gets the replacement.
    from waiting import wait_for

    from jarvis.sandbox import spares

    tool = CodeInterpreterTool(isolation=mechanism, prestart=1, requires_confirmation=False)
    try:
        first = run(tool, "left = 1\nopen('/tmp/left', 'w').write('x')\nprint('first')")
        assert first.success and first.content == "first\n", first.content
        wait_for(lambda: spares.stats()[0]["ready"] == 1, timeout=30, what="a spare sandbox")
        for _ in range(2):
            second = run(tool, "import os\nprint(os.path.exists('/tmp/left'), 'left' in globals())")
            assert second.success and second.content == "False False\n", second.content
            wait_for(lambda: spares.stats()[0]["ready"] == 1, timeout=30, what="a replacement")
        assert spares.stats() == [{"ready": 1, "starting": 0, "handed": 2, "cold": 1}]
    finally:
        spares.close_all()


def test_a_prestarted_sandbox_dies_with_a_sigkilled_jarvis(mechanism: str) -> None:
    import subprocess

    from sandbox_support import descendants, wait_until_gone

    script = (
        "import sys, time\n"
        "from jarvis.core.types import ToolCall\n"
        "from jarvis.sandbox import spares\n"
        "from jarvis.tools.code_interpreter import CodeInterpreterTool\n"
        "from jarvis.tools.executor import ToolExecutor\n"
        f"tool = CodeInterpreterTool(requires_confirmation=False, isolation={mechanism!r},"
        " prestart=1)\n"
        "r = ToolExecutor([tool]).execute(ToolCall(id='c', name='code_interpreter',"
        " arguments={'code': '1'}))\n"
        "assert r.success, r.content\n"
        "deadline = time.monotonic() + 30\n"
        "while not spares.stats()[0]['ready'] and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print('ready' if spares.stats()[0]['ready'] else 'no spare', flush=True)\n"
        "sys.stdin.readline()\n")
    jarvis = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert jarvis.stdout.readline().strip() == "ready"
        spare = descendants(jarvis.pid)
        assert len(spare) >= 2  # bwrap or the launcher, and the interpreter
    finally:
        jarvis.kill()
        jarvis.wait(10)
        jarvis.stdin.close()
        jarvis.stdout.close()
    assert not wait_until_gone(spare, timeout=10)


@pytest.mark.same_for_every_uid
def test_prestart_is_checked() -> None:
    from jarvis.errors import ConfigError

    for bad in (-1, 9, 1.5, True, "1"):
        with pytest.raises(ConfigError, match="prestart"):
            build_tool("code_interpreter", settings={"prestart": bad})
    assert build_tool("code_interpreter", settings={"prestart": 1}).prestart == 1
