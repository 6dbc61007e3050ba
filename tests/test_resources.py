"""Resource pools and run-scoped leases (jarvis.resources) with real threads."""

from __future__ import annotations

import threading
import time

import pytest

from jarvis.core.types import ToolCall
from jarvis.resources import ResourceBusyError, ResourceManager, ResourceSpec
from jarvis.tools.base import tool
from jarvis.tools.context import ToolContext
from jarvis.tools.executor import ToolExecutor


class Counter:
    """A tiny stateful resource that records its life."""

    built: list[Counter] = []

    def __init__(self) -> None:
        self.value = 0
        self.closed = False
        self.resets = 0
        Counter.built.append(self)

    @property
    def alive(self) -> bool:
        return not self.closed

    def reset(self) -> None:
        self.value = 0
        self.resets += 1

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def manager():
    Counter.built = []
    m = ResourceManager(default_timeout=5.0)
    yield m
    m.close()


def spec(max_size: int = 2, reusable: bool = False, kind: str = "counter") -> ResourceSpec:
    return ResourceSpec(kind=kind, factory=Counter, max_size=max_size, reusable=reusable)


def test_same_run_shares_a_resource_and_runs_are_isolated(manager: ResourceManager) -> None:
    s = spec()
    a1 = manager.acquire(s, owner="run-a")
    a1.value = 7
    assert manager.acquire(s, owner="run-a") is a1
    b = manager.acquire(s, owner="run-b")
    assert b is not a1 and b.value == 0
    assert manager.release_run("run-a") == 1
    assert a1.closed  # not reusable: closed when the run ends
    assert not b.closed
    again = manager.acquire(s, owner="run-a")
    assert again is not a1 and again.value == 0


def test_reusable_spec_reuses_after_reset(manager: ResourceManager) -> None:
    s = spec(reusable=True)
    first = manager.acquire(s, owner="r1")
    first.value = 5
    manager.release_run("r1")
    assert not first.closed
    second = manager.acquire(s, owner="r2")
    assert second is first and second.value == 0 and second.resets == 1
    assert manager.pool(s).stats()["created"] == 1
    assert manager.pool(s).stats()["reused"] == 1


def test_full_pool_makes_the_next_caller_wait_then_serves_it(manager: ResourceManager) -> None:
    s = spec(max_size=1)
    held = manager.acquire(s, owner="holder")
    got: list[object] = []
    waiting = threading.Event()

    def second() -> None:
        waiting.set()
        got.append(manager.acquire(s, owner="waiter", timeout=10))

    t = threading.Thread(target=second)
    t.start()
    waiting.wait(5)
    # Observable state: the waiter is blocked in the pool, not building a second resource.
    deadline = time.monotonic() + 5
    while manager.pool(s).stats()["waits"] == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert manager.pool(s).stats()["waits"] == 1
    assert not got and len(Counter.built) == 1
    manager.release_run("holder")
    t.join(5)
    assert len(got) == 1 and got[0] is not held
    assert manager.pool(s).live == 1  # never grew past its maximum
    assert len(Counter.built) == 2


def test_full_pool_times_out_with_a_clear_error(manager: ResourceManager) -> None:
    s = spec(max_size=1)
    manager.acquire(s, owner="holder")
    start = time.monotonic()
    with pytest.raises(ResourceBusyError, match="all 1 counter resources are in use"):
        manager.acquire(s, owner="other", timeout=0.2)
    assert time.monotonic() - start >= 0.2
    assert len(Counter.built) == 1


def test_global_scope_is_shared_by_all_runs(manager: ResourceManager) -> None:
    s = spec()
    g1 = manager.acquire(s, scope="global")
    assert manager.acquire(s, scope="global", owner="someone") is g1
    manager.release_run("someone")
    assert not g1.closed
    manager.close()
    assert g1.closed


def test_dead_resource_is_replaced(manager: ResourceManager) -> None:
    s = spec(max_size=1)
    first = manager.acquire(s, owner="r")
    first.close()  # e.g. a killed process
    second = manager.acquire(s, owner="r", timeout=1)
    assert second is not first and manager.pool(s).live == 1


def test_racing_calls_of_one_run_build_one_resource(manager: ResourceManager) -> None:
    slow = ResourceSpec(kind="slow", factory=lambda: (time.sleep(0.05), Counter())[1], max_size=4)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(manager.acquire(slow, owner="r")))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in results}) == 1 and len(Counter.built) == 1


def test_bad_scope_and_missing_owner_are_errors(manager: ResourceManager) -> None:
    with pytest.raises(ValueError, match="unknown resource scope"):
        manager.acquire(spec(), scope="planet", owner="r")
    with pytest.raises(ValueError, match="needs the run id"):
        manager.acquire(spec(), owner=None)
    with pytest.raises(ValueError, match="max_size"):
        ResourceSpec(kind="x", factory=Counter, max_size=0)


def test_tool_context_acquire_is_scoped_by_run(manager: ResourceManager) -> None:
    s = spec()

    @tool(register=False)
    def bump(by: int, context: ToolContext) -> str:
        """Add to a counter kept for the run.

        Args:
            by: how much to add.
        """
        counter = context.acquire(s)
        counter.value += by
        return str(counter.value)

    assert "context" not in bump.spec.parameters["properties"]
    ctx = ToolContext(run_id="run-a", tool_name="bump", resources=manager)
    assert bump.invoke({"by": 2}, ctx) == "2"
    assert bump.invoke({"by": 3}, ToolContext(run_id="run-a", resources=manager)) == "5"
    assert bump.invoke({"by": 1}, ToolContext(run_id="run-b", resources=manager)) == "1"
    manager.release_run("run-a")
    assert bump.invoke({"by": 1}, ToolContext(run_id="run-a", resources=manager)) == "1"


def test_executor_runs_share_state_through_default_manager() -> None:
    from jarvis.resources import default_manager, release_run

    Counter.built = []
    s = spec(kind="counter-default")

    @tool(register=False)
    def bump2(by: int, context: ToolContext) -> str:
        """Add to a counter kept for the run.

        Args:
            by: how much to add.
        """
        counter = context.acquire(s)
        counter.value += by
        return str(counter.value)

    run_a = ToolExecutor([bump2], run_id="exec-run-a")
    run_b = ToolExecutor([bump2], run_id="exec-run-b")
    try:
        assert run_a.execute(ToolCall(id="1", name="bump2", arguments={"by": 2})).content == "2"
        assert run_a.execute(ToolCall(id="2", name="bump2", arguments={"by": 3})).content == "5"
        assert run_b.execute(ToolCall(id="3", name="bump2", arguments={"by": 1})).content == "1"
    finally:
        release_run("exec-run-a")
        release_run("exec-run-b")
    assert all(c.closed for c in Counter.built)
    assert "exec-run-a" not in default_manager().owners()


def test_async_tools_acquire_the_agentfly_way() -> None:
    from jarvis.resources import release_run

    Counter.built = []
    s = spec(kind="counter-async")

    @tool(register=False)
    async def tally(context: ToolContext) -> str:
        """Count this rollout's calls."""
        counter = await context.acquire_resource(spec=s, scope="rollout", backend="local")
        counter.value += 1
        return str(counter.value)

    ex = ToolExecutor([tally], run_id="rollout-1")
    try:
        assert [ex.execute(ToolCall(id=str(i), name="tally", arguments={})).content
                for i in range(3)] == ["1", "2", "3"]
    finally:
        release_run("rollout-1")
    assert len(Counter.built) == 1 and Counter.built[0].closed
