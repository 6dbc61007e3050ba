"""Cancelling a run: a set `cancel` event, a cancelled `aask_full`/`aask_stream` task, or an
`ask_stream` left early stops the run at its next engine or tool boundary; the run log records
it as "cancelled"."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_for

from jarvis import Jarvis
from jarvis.core.registry import ToolRegistry
from jarvis.engine.base import GenerateResult, StreamChunk
from jarvis.errors import RunCancelled
from jarvis.runlog import RunLog
from jarvis.testing import ScriptedEngine, reply, tool_call
from jarvis.tools.base import tool


class GatedEngine:
    """Its first reply (a call of the `count` tool) waits for `gate`: in generate() before
    returning, in stream() after the first piece. `entered` says the test may cancel now."""

    engine_id = "gated"

    def __init__(self) -> None:
        self.entered, self.gate, self.stream_closed = (threading.Event(), threading.Event(),
                                                       threading.Event())
        self.calls = 0

    def _reply(self) -> GenerateResult:
        self.calls += 1
        if self.calls == 1:
            return reply("calling", tool_calls=[tool_call("count", {})])
        return reply("finished anyway")

    def generate(self, messages: Any, **kwargs: Any) -> GenerateResult:
        result = self._reply()
        self.entered.set()
        assert self.gate.wait(30)
        return result

    def stream(self, messages: Any, **kwargs: Any) -> Iterator[StreamChunk]:
        result = self._reply()
        try:
            yield StreamChunk(delta="first ")
            self.entered.set()
            assert self.gate.wait(30)
            yield StreamChunk(delta="second ")
            yield StreamChunk(result=result)
        finally:
            self.stream_closed.set()

    def list_models(self) -> list[str]:
        return ["m"]

    def health(self) -> bool:
        return True

    def close(self) -> None:
        pass


@pytest.fixture
def counted() -> list[int]:
    ran: list[int] = []

    @tool(name="count", register=False)
    def count() -> str:
        """Count a call."""
        ran.append(1)
        return "counted"

    ToolRegistry.register_value("count", count)
    return ran


def cancelled_run(home: Path) -> dict[str, Any]:
    """The run log's record of the one run, once it is recorded as cancelled."""
    def recorded() -> dict[str, Any] | None:
        if not (home / "runs.db").exists():
            return None
        runs = RunLog(home / "runs.db").list()
        return runs[0] if runs and runs[0]["status"] == "cancelled" else None

    return wait_for(recorded, timeout=30, what="the run recorded as cancelled")


@pytest.mark.parametrize("agent", ["orchestrator", "react"])
def test_cancelling_aask_full_stops_the_run_before_its_tools(jarvis_home, counted, agent):
    engine = GatedEngine()
    with Jarvis(engine=engine, model="m") as j:
        async def main() -> None:
            task = asyncio.create_task(j.aask_full("q", context=False, tools=["count"],
                                                   agent=agent))
            assert await asyncio.to_thread(engine.entered.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task  # at once, while the engine call is still under way
            engine.gate.set()  # that call finishes; nothing after it runs

        asyncio.run(main())
        run = cancelled_run(jarvis_home)
    assert run["error"] == "RunCancelled: the run was cancelled"
    assert counted == [] and engine.calls == 1


def test_cancelling_aask_stream_stops_the_stream_and_the_run(jarvis_home, counted):
    engine = GatedEngine()
    with Jarvis(engine=engine, model="m") as j:
        got: list[str] = []

        async def main() -> None:
            async def consume() -> None:
                async for piece in j.aask_stream("q", context=False, tools=["count"]):
                    got.append(piece)

            task = asyncio.create_task(consume())
            assert await asyncio.to_thread(engine.entered.wait, 30)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            engine.gate.set()

        asyncio.run(main())
        cancelled_run(jarvis_home)
        assert engine.stream_closed.wait(30)  # the engine's stream was closed, not drained
    assert counted == [] and engine.calls == 1
    assert "second" not in "".join(got)


def test_leaving_ask_stream_early_cancels_the_run(jarvis_home, counted):
    engine = GatedEngine()
    with Jarvis(engine=engine, model="m") as j:
        for piece in j.ask_stream("q", context=False, tools=["count"]):
            assert piece == "first "
            break
        engine.gate.set()
        cancelled_run(jarvis_home)
    assert counted == [] and engine.calls == 1


def test_a_set_cancel_event_stops_ask_full_before_the_engine(jarvis_home):
    engine = ScriptedEngine(["never"])
    cancel = threading.Event()
    cancel.set()
    with Jarvis(engine=engine, model="m") as j:
        with pytest.raises(RunCancelled, match="the run was cancelled"):
            j.ask_full("q", context=False, cancel=cancel)
    assert engine.calls == []
    assert cancelled_run(jarvis_home)["status"] == "cancelled"


def test_an_unset_cancel_event_changes_nothing():
    engine = ScriptedEngine([reply(tool_calls=[tool_call("calculator", {"expression": "2+2"})]),
                             "4"])
    with Jarvis(engine=engine, model="m") as j:
        result = j.ask_full("q", context=False, tools=["calculator"], cancel=threading.Event())
    assert result["content"] == "4" and result["tool_results"][0]["content"] == "4"
