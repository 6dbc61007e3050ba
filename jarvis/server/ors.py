"""ORS (Open Reward Standard) endpoints: jarvis tools as one ORS environment.

Routes and payloads match the published `ors-sdk` client:

    POST /create_session            SSE: `task_id` event with a new session id, then `end`
    POST /create                    X-Session-ID + {task_spec | split+index}: start the session
    POST /ping                      keep the session alive
    POST /delete, /delete_session   end the session (its run-scoped resources are released)
    GET  /{env}/tools               {"tools": [{name, description, input_schema}]}
    GET  /{env}/task_tools          the session's tools (a task_spec may narrow them)
    GET  /{env}/prompt              text blocks describing the session's tools
    GET  /{env}/splits, POST /{env}/tasks|num_tasks|task|task_range   one "default" task
    POST /{env}/call                X-Session-ID + {name, input}: SSE `task_id`, then
                                    `chunk`* / `end` events carrying {"ok": true, "output":
                                    ToolOutput}; with the `task_id` of an earlier call
                                    (the client reconnecting) the same answer again, the tool
                                    is not run twice

One session is one run: its tool calls share run-scoped resources (one `repl` interpreter per
session) and the session's end releases them. A failed tool call is a normal ToolOutput whose
metadata has `error_type`; the model reads the error text in its blocks.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from jarvis.core.text import replace
from jarvis.core.types import ToolCall, ToolResult
from jarvis.server.http import ApiError, read_json, require_object
from jarvis.tools.base import BaseTool
from jarvis.tools.executor import ToolExecutor

SSE_CHUNK = 4096  # the ors client reads events line by line; long lines must be split
KEEPALIVE_SECONDS = 10.0
_SID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DEFAULT_SPLIT = "default"
RECENT_CALLS = 32  # per session, kept so a reconnecting client gets its answer, not a re-run


@dataclass(slots=True)
class Session:
    """One ORS session = one jarvis run with its own executor (run_id = session id)."""

    sid: str
    executor: ToolExecutor
    tool_names: list[str]
    task_spec: dict[str, Any]
    last_seen: float = field(default_factory=time.monotonic)
    calls: int = 0
    tasks: dict[str, Any] = field(default_factory=dict)  # task_id -> running task or result

    def remember(self, task_id: str, task: Any) -> None:
        """Keep a call's task (or result) for a reconnecting client; only the last few."""
        self.tasks[task_id] = task
        if len(self.tasks) > RECENT_CALLS:
            del self.tasks[next(iter(self.tasks))]


def sse_event(event: str, data: str) -> str:
    lines = data.split("\n") if data else [""]
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"


def sse_payload(payload: str) -> str:
    """`payload` as `chunk` events and a final `end` event, as the ors client expects. No
    chunk starts with white space: the client strips it from each event's data."""
    parts = []
    start = 0
    while start < len(payload):
        end = start + SSE_CHUNK
        while end < len(payload) and payload[end].isspace():
            end += 1  # the white space stays at the end of this chunk
        parts.append(payload[start:end])
        start = end
    parts = parts or [""]
    out = [sse_event("chunk", p) for p in parts[:-1]]
    out.append(sse_event("end", parts[-1]))
    return "".join(out)


def tool_output(result: ToolResult, trust: Any = None) -> dict[str, Any]:
    """A ToolResult as the ORS RunToolOutput success form (JSON-safe). Once the session has
    read untrusted content (`trust`, its RunTrust), Markdown and HTML images in text blocks
    are neutralized (a client that renders them would fetch them; docs/trust.md); URLs stay,
    as a client model follows links."""
    output = result.to_tool_output()
    if trust is not None and trust.tainted:
        from jarvis.trust.markdown import AnswerGuard, neutralize

        allowed = AnswerGuard(trust).allowed()
        output["blocks"] = [dict(b, text=neutralize(b["text"], allowed, images_only=True))
                            if b.get("type") == "text" else b for b in output["blocks"]]
    if output["metadata"] is not None:
        output["metadata"] = json.loads(json.dumps(output["metadata"], default=str))
    return {"ok": True, "output": output}


class OrsEnvironment:
    """The tools exposed as environment `name`, and the live sessions."""

    def __init__(self, name: str, tools: list[BaseTool], *, approver: Any = None,
                 default_timeout: float = 30.0, max_output_chars: int = 100_000,
                 max_sessions: int = 256, max_body_bytes: int = 1_048_576,
                 session_idle_seconds: float = 900.0, max_concurrent_calls: int = 64,
                 max_abandoned_per_tool: int = 8, max_abandoned: int = 64,
                 rules: Any = None, trusted_tools: Any = (),
                 unavailable: dict[str, str] | None = None) -> None:
        self.name = name
        # The person's [egress] rules and trusted tools apply to every session (docs/trust.md);
        # `rules` may be a function giving them as they are when a session starts (its grants).
        self.rules = rules
        self.trusted_tools = tuple(trusted_tools or ())
        self.tools = {t.spec.name: t for t in tools}
        # Tools that could not be built here (name -> why): a call says why, not "unknown".
        self.unavailable = dict(unavailable or {})
        self.approver = approver
        self.default_timeout = default_timeout
        self.max_output_chars = max_output_chars
        self.abandoned_caps = {"max_abandoned_per_tool": max_abandoned_per_tool,
                               "max_abandoned": max_abandoned}
        self.max_sessions = max_sessions
        self.max_body_bytes = max_body_bytes
        self.session_idle_seconds = session_idle_seconds
        self.sessions: dict[str, Session] = {}
        # Each running (non-inline) call holds a thread: bound them, later calls queue.
        self._calls_gate = asyncio.Semaphore(max_concurrent_calls)
        from jarvis.resources import default_manager

        # The executor's ToolContexts acquire from the process-wide manager: release there.
        self.resources = default_manager()
        self._tool_list = {"tools": [self._describe(t) for t in self.tools.values()]}

    @staticmethod
    def _describe(tool: BaseTool) -> dict[str, Any]:
        spec = tool.spec
        return {"name": spec.name, "description": spec.description,
                "input_schema": spec.input_schema()}

    # --- helpers -------------------------------------------------------------------------
    def check_env(self, request: Request) -> None:
        env = request.path_params["env"]
        if env.lower() != self.name.lower():
            raise ApiError(404, f"unknown environment {env!r}; this server serves {self.name!r}")

    @staticmethod
    def sid_of(request: Request) -> str:
        sid = (request.headers.get("x-session-id") or "").strip()
        if not sid:
            raise ApiError(400, "the X-Session-ID header is required (get one from "
                           "POST /create_session)")
        if not _SID_RE.match(sid):
            raise ApiError(400, "X-Session-ID must be 1-128 letters, digits or ._:-")
        return sid

    def session_of(self, request: Request) -> Session:
        sid = self.sid_of(request)
        session = self.sessions.get(sid)
        if session is None:
            raise ApiError(404, f"unknown session {sid!r}: it was never created, was deleted, or "
                           f"expired after {self.session_idle_seconds:g} s without calls or pings; "
                           f"create one with POST /create_session then POST /create")
        session.last_seen = time.monotonic()
        return session

    def _task_tools(self, task_spec: dict[str, Any]) -> list[str]:
        wanted = task_spec.get("tools")
        if wanted is None:
            return list(self.tools)
        if not isinstance(wanted, list) or not all(isinstance(n, str) for n in wanted):
            raise ApiError(400, "task_spec.tools must be a list of tool names")
        unknown = [n for n in wanted if n not in self.tools]
        if unknown:
            raise ApiError(400, f"task_spec.tools names unknown tool(s) {', '.join(unknown)}; "
                           f"available: {', '.join(self.tools) or '(none)'}")
        return list(dict.fromkeys(wanted))

    async def end_session(self, sid: str) -> bool:
        session = self.sessions.pop(sid, None)
        if session is None:
            return False
        # Closing processes may block for a moment: keep it off the event loop.
        await asyncio.to_thread(self.resources.release_run, sid)
        return True

    async def reap(self) -> list[str]:
        """End sessions idle for longer than `session_idle_seconds`."""
        now = time.monotonic()
        stale = [s.sid for s in list(self.sessions.values())
                 if now - s.last_seen > self.session_idle_seconds]
        for sid in stale:
            await self.end_session(sid)
        return stale

    async def close(self) -> None:
        for sid in list(self.sessions):
            await self.end_session(sid)

    # --- session routes -------------------------------------------------------------------
    async def create_session(self, request: Request) -> Response:
        sid = str(uuid.uuid4())
        body = sse_event("task_id", sid) + sse_event("end", "")
        return Response(body, media_type="text/event-stream", headers=SSE_HEADERS)

    async def create(self, request: Request) -> Response:
        sid = self.sid_of(request)
        body = require_object(await read_json(request, self.max_body_bytes))
        unknown = sorted(set(body) - {"env_name", "task_spec", "split", "index", "secrets"})
        if unknown:
            raise ApiError(400, f"unknown field(s) {', '.join(unknown)} in the create request")
        env_name = body.get("env_name")
        if env_name is not None and str(env_name).lower() != self.name.lower():
            raise ApiError(404, f"unknown environment {env_name!r}; this server serves {self.name!r}")
        task_spec = body.get("task_spec")
        split, index = body.get("split"), body.get("index")
        if (task_spec is None) == (split is None or index is None):
            raise ApiError(400, "give either task_spec or both split and index")
        if task_spec is None:
            task_spec = self._task(split, index)
        task_spec = require_object(task_spec, "task_spec")
        if sid in self.sessions:
            raise ApiError(409, f"session {sid!r} already exists")
        if len(self.sessions) >= self.max_sessions:
            await self.reap()
            if len(self.sessions) >= self.max_sessions:
                raise ApiError(429, f"the server holds its maximum of {self.max_sessions} sessions; "
                               f"delete finished sessions (POST /delete) or try again later")
        names = self._task_tools(task_spec)
        from jarvis.approvals.records import IN_CALL
        from jarvis.trust.run import RunTrust

        rules = self.rules
        if callable(rules):  # reads the approvals store: not on the event loop's thread
            import anyio

            rules = await anyio.to_thread.run_sync(rules)
        executor = ToolExecutor([self.tools[n] for n in names], run_id=sid, approver=self.approver,
                                default_timeout=self.default_timeout,
                                max_output_chars=self.max_output_chars, **self.abandoned_caps,
                                trust=RunTrust(run_id=sid, rules=rules),
                                trusted_tools=self.trusted_tools,
                                no_person=IN_CALL.format(what="an ORS session"))
        self.sessions[sid] = Session(sid, executor, names, task_spec)
        return JSONResponse({"sid": sid})

    async def ping(self, request: Request) -> Response:
        self.session_of(request)
        return JSONResponse({"status": "ok"})

    async def delete(self, request: Request) -> Response:
        sid = self.sid_of(request)
        await self.end_session(sid)
        return JSONResponse({"sid": sid})

    # --- environment routes -----------------------------------------------------------------
    async def list_tools(self, request: Request) -> Response:
        self.check_env(request)
        return JSONResponse(self._tool_list)

    async def task_tools(self, request: Request) -> Response:
        self.check_env(request)
        session = self.session_of(request)
        return JSONResponse({"tools": [self._describe(self.tools[n]) for n in session.tool_names]})

    async def prompt(self, request: Request) -> Response:
        self.check_env(request)
        session = self.session_of(request)
        text = session.task_spec.get("prompt")
        if not isinstance(text, str):
            text = (f"You are in the jarvis tool environment {self.name!r}. Available tools: "
                    + ", ".join(session.tool_names) + ".")
        return JSONResponse([{"text": text, "detail": None, "type": "text"}])

    def _task(self, split: Any, index: Any) -> dict[str, Any]:
        if split != DEFAULT_SPLIT:
            raise ApiError(400, f"unknown split {split!r}; this environment has one split, "
                           f"{DEFAULT_SPLIT!r}")
        if index != 0:
            raise ApiError(400, f"split {DEFAULT_SPLIT!r} has one task, index 0; got {index!r}")
        return {}

    async def splits(self, request: Request) -> Response:
        self.check_env(request)
        return JSONResponse([{"name": DEFAULT_SPLIT, "type": "test"}])

    async def tasks(self, request: Request) -> Response:
        self.check_env(request)
        body = require_object(await read_json(request, self.max_body_bytes))
        op = request.url.path.rsplit("/", 1)[-1]
        split = body.get("split")
        if op in ("tasks", "num_tasks", "task_range"):
            self._task(split, 0)
        if op == "tasks":
            return JSONResponse({"tasks": [{}], "env_name": self.name})
        if op == "num_tasks":
            return JSONResponse({"num_tasks": 1})
        if op == "task":
            return JSONResponse({"task": self._task(split, body.get("index"))})
        start, stop = _bound(body, "start"), _bound(body, "stop")
        return JSONResponse({"tasks": [{}][slice(start, stop)]})

    # --- tool calls ----------------------------------------------------------------------
    async def call(self, request: Request) -> Response:
        self.check_env(request)
        session = self.session_of(request)
        body = require_object(await read_json(request, self.max_body_bytes))
        unknown = sorted(set(body) - {"name", "input", "task_id"})
        if unknown:
            raise ApiError(400, f"unknown field(s) {', '.join(unknown)} in the call; "
                           f"send {{\"name\": ..., \"input\": {{...}}}}")
        resumed = body.get("task_id")
        if resumed is not None:
            # The ors client lost the stream and reconnects: answer from the call already
            # running (or done); never run the tool a second time.
            task = session.tasks.get(resumed) if isinstance(resumed, str) else None
            if task is None:
                return Response(sse_event("error", f"unknown task_id {resumed!r}: results are "
                                          f"kept for the last {RECENT_CALLS} calls of a session"),
                                media_type="text/event-stream", headers=SSE_HEADERS)
            return StreamingResponse(self._stream(task, resumed, session.executor.trust),
                                     media_type="text/event-stream", headers=SSE_HEADERS)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "the call needs a tool \"name\" (a string)")
        arguments = body.get("input", {})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise ApiError(400, f"\"input\" must be a JSON object, got {type(arguments).__name__}")
        if name not in session.tool_names and name in self.unavailable:
            raise ApiError(404, f"tool {name!r} is not served here: {self.unavailable[name]}")
        if name not in session.tool_names:
            raise ApiError(404, f"unknown tool {name!r}; this session's tools: "
                           f"{', '.join(session.tool_names) or '(none)'}")
        session.calls += 1
        task_id = uuid.uuid4().hex
        tool_call = ToolCall(id=f"call_{task_id[:12]}", name=name, arguments=arguments)
        executor = session.executor
        tool = executor.get_tool(name)
        if tool is not None and tool.inline and not tool.is_async:
            # Bounded, non-blocking tools answer in one piece: no streaming machinery.
            result = await executor.aexecute(tool_call)
            session.remember(task_id, result)
            body_text = sse_event("task_id", task_id) + sse_payload(
                replace(json.dumps(tool_output(result, executor.trust), ensure_ascii=False)))
            return Response(body_text, media_type="text/event-stream", headers=SSE_HEADERS)
        task = asyncio.ensure_future(self._gated(executor, tool_call))
        session.remember(task_id, task)
        return StreamingResponse(self._stream(task, task_id, executor.trust),
                                 media_type="text/event-stream", headers=SSE_HEADERS)

    async def _gated(self, executor: ToolExecutor, tool_call: ToolCall) -> ToolResult:
        async with self._calls_gate:
            return await executor.aexecute(tool_call)

    async def _stream(self, task: Any, task_id: str, trust: Any = None) -> Any:
        yield sse_event("task_id", task_id)
        if isinstance(task, ToolResult):
            result: Any = task
        else:
            # Not cancelled when the client goes away: it may reconnect with the task_id.
            while True:
                done, _ = await asyncio.wait({task}, timeout=KEEPALIVE_SECONDS)
                if done:
                    break
                yield ": keepalive\n\n"  # comment lines keep the client's read timeout happy
            result = task.result()  # aexecute never raises for a tool's failure
        yield sse_payload(replace(json.dumps(tool_output(result, trust), ensure_ascii=False)))


def _bound(body: dict[str, Any], key: str) -> int | None:
    """An optional integer bound of a task range (a 400 for anything else, never a 500)."""
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > 2**53:
        raise ApiError(400, f"{key!r} must be an integer or null, got {value!r}"[:300])
    return value
