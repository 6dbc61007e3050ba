"""OpenAI-compatible chat API over jarvis agents: `POST /v1/chat/completions`, `GET /v1/models`.

The request's "model" names a jarvis agent (simple, react, orchestrator, or a workspace agent
from agents/*.toml); the answer comes from `Jarvis.ask_full` on the configured engine, with
the agent's own tools. The conversation's last message must be the user's question; earlier
user/assistant messages are the history and system messages the system prompt. Client-side
function tools are refused: the agent runs its jarvis tools on the server.

A client that goes away (closes the connection) before its answer cancels its run, streamed or
not: the run's cancel event is set, so it stops at its next engine or tool boundary (the
engine or tool call under way finishes) and the run log records it as "cancelled". Nobody is
left to read the answer, and the engine would be paid for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from jarvis.core.text import find_problem
from jarvis.server.http import ApiError, JSONAnswer, dumps, read_json, require_object

log = logging.getLogger("jarvis.server")

_ROLES = ("system", "developer", "user", "assistant")
_IGNORED = {"n", "stream_options", "user", "top_p", "presence_penalty", "frequency_penalty",
            "seed", "stop", "logprobs", "top_logprobs", "metadata", "store", "tool_choice",
            "parallel_tool_calls", "response_format", "max_completion_tokens", "logit_bias",
            "service_tier", "reasoning_effort", "modalities", "prediction", "audio"}
_KNOWN = {"model", "messages", "stream", "temperature", "max_tokens", "tools"} | _IGNORED

MAX_TOKENS = 1_000_000  # longest reply a client may ask for (no model writes more)


def _text(content: Any, where: str) -> str:
    """Message content as text: a string or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ApiError(400, f"{where}: only text content parts are supported, got {kind!r}")
        return "".join(parts)
    raise ApiError(400, f"{where}: content must be a string or a list of text parts")


class ChatAPI:
    """Answers chat completions with jarvis agents through one shared Jarvis."""

    def __init__(self, jarvis: Any, *, approver: Any = None, max_body_bytes: int = 1_048_576,
                 max_concurrent: int = 8, default_tools: list[str] | None = None) -> None:
        self.jarvis = jarvis
        # Built-in agents that use tools get the served tools unless config.toml gives
        # [agent] tools; workspace agents always use the tools their file names.
        self.default_tools = list(default_tools or [])
        self.approver = approver
        self.max_body_bytes = max_body_bytes
        self._gate = asyncio.Semaphore(max_concurrent)
        self._engine_lock = threading.Lock()

    # --- models ------------------------------------------------------------------------------
    def agent_names(self) -> list[str]:
        from jarvis.agents import BUILTIN_AGENTS
        from jarvis.core.registry import AgentRegistry

        names = list(BUILTIN_AGENTS) + [n for n in AgentRegistry.keys() if n not in BUILTIN_AGENTS]
        try:
            from jarvis.workspace.agents import load_agents
        except ImportError:
            return names
        scan = load_agents(self.jarvis.config)
        for error in scan.errors:  # a broken agent file hides only itself
            log.warning("agent file skipped: %s", error.message)
        names += sorted(s.name for s in scan.agents if s.name not in names)
        return names

    async def models(self, request: Request) -> Response:
        names = await asyncio.to_thread(self.agent_names)
        return JSONAnswer({"object": "list", "data": [
            {"id": n, "object": "model", "created": 0, "owned_by": "jarvis"} for n in names]})

    async def model(self, request: Request) -> Response:
        name = request.path_params["model"]
        names = await asyncio.to_thread(self.agent_names)
        if name not in names:
            raise ApiError(404, f"unknown model {name!r}: models are jarvis agents; available: "
                           f"{', '.join(names)}", code="model_not_found")
        return JSONAnswer({"id": name, "object": "model", "created": 0, "owned_by": "jarvis"})

    # --- chat ----------------------------------------------------------------------------------
    def _parse(self, body: dict[str, Any]) -> dict[str, Any]:
        from jarvis.agents import agent_class
        from jarvis.core.types import Message

        unknown = sorted(set(body) - _KNOWN)
        if unknown:
            raise ApiError(400, f"unsupported field(s): {', '.join(unknown)}")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise ApiError(400, "\"model\" is required: the name of a jarvis agent (GET /v1/models "
                           "lists them)")
        if body.get("tools"):
            raise ApiError(400, "client-side tools are not supported: the agent runs its own "
                           "jarvis tools on the server; leave \"tools\" out")
        if body.get("n") not in (None, 1):
            raise ApiError(400, "only n=1 is supported")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "\"messages\" must be a non-empty list")
        system: list[str] = []
        history: list[Any] = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict):
                raise ApiError(400, f"messages[{i}] must be an object")
            role = msg.get("role")
            if role not in _ROLES:
                raise ApiError(400, f"messages[{i}].role {role!r} is not supported; use "
                               f"{', '.join(_ROLES)}")
            text = _text(msg.get("content"), f"messages[{i}]")
            if role in ("system", "developer"):
                system.append(text)
            else:
                history.append(Message(role=role, content=text))
        if not history or history[-1].role != "user" or not (history[-1].content or "").strip():
            raise ApiError(400, "the last non-system message must be a non-empty user message")
        query = history.pop().content
        options: dict[str, Any] = {"agent": model, "history": history or None,
                                   "tools": self._tools_for(model),
                                   "system": "\n\n".join(system) if system else None,
                                   "approver": self.approver, "source": "serve"}
        from jarvis.approvals.served import parks

        if parks(self.jarvis.config):  # a call needing the person waits for them (docs/approvals.md)
            options["on_approval"] = "defer"
        temperature = body.get("temperature")
        if temperature is not None:
            if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
                raise ApiError(400, "temperature must be a number from 0 to 2")
            options["temperature"] = float(temperature)
        max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
        if max_tokens is not None:
            # Bounded here: a 4,000-digit number is valid JSON and was handed to the engine.
            if (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                    or not 1 <= max_tokens <= MAX_TOKENS):
                raise ApiError(400, f"max_tokens must be a whole number from 1 to {MAX_TOKENS}")
            options["max_tokens"] = max_tokens
        stream_options = body.get("stream_options")
        if stream_options is not None and not isinstance(stream_options, dict):
            raise ApiError(400, "stream_options must be an object, e.g. {\"include_usage\": true}")
        if isinstance(temperature, bool):
            raise ApiError(400, "temperature must be a number from 0 to 2")
        if agent_class(model) is None and model not in self.agent_names():
            raise ApiError(404, f"unknown model {model!r}: models are jarvis agents; available: "
                           f"{', '.join(self.agent_names())}", code="model_not_found")
        return {"query": query, "model": model, "options": options,
                "stream": bool(body.get("stream")),
                "include_usage": bool((stream_options or {}).get("include_usage"))}

    def _tools_for(self, model: str) -> list[str] | None:
        from jarvis.agents import agent_class

        cls = agent_class(model)
        if (self.default_tools and cls is not None and getattr(cls, "uses_tools", True)
                and not self.jarvis.config.agent.tools):
            return self.default_tools
        return None

    def _ask_watching(self, query: str, options: dict[str, Any],
                      on_tool: Any) -> dict[str, Any]:
        """`_ask`, with each tool call of this run (and no other) reported to `on_tool` as it
        starts and ends: {"event": "start"|"end", "tool", "call_id", "success", "latency"}."""
        from jarvis.core.events import EventType

        me = threading.get_ident()
        runs: set[str] = set()

        def watch(event: Any) -> None:
            data = event.data
            if event.type is EventType.RUN_START:
                if threading.get_ident() == me and data.get("id"):
                    runs.add(str(data["id"]))
                return
            if data.get("run_id") not in runs:
                return
            activity = {"event": "start" if event.type is EventType.TOOL_CALL_START else "end",
                        "tool": data.get("tool_name"), "call_id": data.get("call_id")}
            if event.type is EventType.TOOL_CALL_END:
                activity.update(success=bool(data.get("success")),
                                latency_seconds=data.get("latency"))
            on_tool(activity)

        bus = self.jarvis.bus
        kinds = (EventType.RUN_START, EventType.TOOL_CALL_START, EventType.TOOL_CALL_END)
        for kind in kinds:
            bus.subscribe(kind, watch)
        try:
            return self._ask(query, options)
        finally:
            for kind in kinds:
                bus.unsubscribe(kind, watch)

    def _ask(self, query: str, options: dict[str, Any]) -> dict[str, Any]:
        with self._engine_lock:  # build (or discover) the engine once, not per racing request
            self.jarvis.engine  # noqa: B018 - the property builds it
        out = self.jarvis.ask_full(query, **options)
        if out.get("status") == "parked":
            from jarvis.approvals.served import parked_reply

            out["content"] = parked_reply(out, self.jarvis.config)
        return out

    async def completions(self, request: Request) -> Response:
        body = require_object(await read_json(request, self.max_body_bytes))
        if _registered_agent(body.get("model")):
            parsed = self._parse(body)  # nothing to read from disk: no thread hop
        else:  # a workspace agent is looked for in agents/*.toml
            parsed = await asyncio.to_thread(self._parse, body)
        cid = "chatcmpl-" + uuid.uuid4().hex[:24]
        created = int(time.time())
        cancel = threading.Event()
        parsed["options"]["cancel"] = cancel
        if parsed["stream"] and find_problem(body.get("messages"), "messages"):
            # Text that is not valid Unicode: the SDK records the run and refuses it before
            # any engine call; asked without streaming, that is a 400 rather than an error
            # event inside a 200 stream.
            await self._run(parsed["query"], parsed["options"])
        if parsed["stream"]:
            return StreamingResponse(self._stream(request, parsed, cid, created),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        async with self._gate:
            watcher = asyncio.create_task(_cancel_on_disconnect(request, cancel))
            try:
                out = await self._run(parsed["query"], parsed["options"])
            except asyncio.CancelledError:  # the server is stopping: the run stops too
                cancel.set()
                raise
            finally:
                watcher.cancel()
        return JSONAnswer({
            "id": cid, "object": "chat.completion", "created": created, "model": parsed["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": out["content"]},
                         "finish_reason": _finish_reason(out), "logprobs": None}],
            "usage": _usage(out),
            "jarvis": _summary(out),
        })

    async def _run(self, query: str, options: dict[str, Any]) -> dict[str, Any]:
        try:
            return await asyncio.to_thread(self._ask, query, options)
        except Exception as exc:
            raise _as_api_error(exc) from None

    async def _stream(self, request: Request, parsed: dict[str, Any], cid: str,
                      created: int) -> Any:
        cancel: threading.Event = parsed["options"]["cancel"]
        watcher = asyncio.create_task(_cancel_on_disconnect(request, cancel))
        job: asyncio.Future[Any] | None = None
        inner = self._stream_run(parsed, cid, created)
        try:
            async for piece in inner:
                if isinstance(piece, asyncio.Future):
                    job = piece
                    continue
                yield piece
        finally:
            # Left before the end (the client went away: the response task was cancelled or
            # the generator closed): the run is not read by anyone, so it stops too.
            watcher.cancel()
            if job is None or not job.done():
                if not cancel.is_set():
                    log.info("a streaming client went away before its answer: its run is "
                             "cancelled at the next engine or tool boundary")
                cancel.set()
            await inner.aclose()  # now, not when collected: it holds a slot of the gate

    async def _stream_run(self, parsed: dict[str, Any], cid: str, created: int) -> Any:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        model = parsed["model"]

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [{"index": 0, "delta": delta,
                                                  "finish_reason": finish, "logprobs": None}],
                    **extra}
            return f"data: {dumps(data)}\n\n"

        def on_token(piece: str) -> None:
            if piece:
                loop.call_soon_threadsafe(queue.put_nowait, piece)

        def on_tool(activity: dict[str, Any]) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, activity)

        def shown(item: Any) -> str:
            # Tool activity rides in a `jarvis` field beside an empty delta: a client shows it
            # or ignores it, and never mistakes it for a tool call it should make itself.
            if isinstance(item, dict):
                return chunk({}, jarvis={"tool_activity": item})
            return chunk({"content": item})

        options = dict(parsed["options"], on_token=on_token)
        yield chunk({"role": "assistant", "content": ""})
        async with self._gate:
            job = asyncio.ensure_future(asyncio.to_thread(self._ask_watching, parsed["query"],
                                                          options, on_tool))
            yield job  # for _stream: whether the run ended
            streamed = False
            while True:
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, job}, return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    item = getter.result()
                    streamed = streamed or isinstance(item, str)
                    yield shown(item)
                    continue
                getter.cancel()
                break
            while not queue.empty():
                item = queue.get_nowait()
                streamed = streamed or isinstance(item, str)
                yield shown(item)
        error = job.exception()
        if error is not None:
            api_error = _as_api_error(error)
            body = {"error": {"message": api_error.message, "type": api_error.kind,
                              "code": api_error.code}}
            yield f"data: {dumps(body)}\n\n"
            return
        out = job.result()
        if out["content"] and (not streamed or out.get("status") == "parked"):
            yield chunk({"content": out["content"]})
        yield chunk({}, _finish_reason(out), jarvis=_summary(out))
        if parsed["include_usage"]:
            data = {"id": cid, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": [], "usage": _usage(out)}
            yield f"data: {json.dumps(data)}\n\n"
        yield "data: [DONE]\n\n"


def _registered_agent(model: Any) -> bool:
    from jarvis.agents import agent_class

    return isinstance(model, str) and agent_class(model) is not None


async def _cancel_on_disconnect(request: Request, cancel: threading.Event) -> None:
    """Set `cancel` when the client closes the connection (ASGI http.disconnect). The body was
    read already, so the next message the server hands the app is the disconnect."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            if not cancel.is_set():
                log.info("a client went away before its answer: its run is cancelled at the "
                         "next engine or tool boundary")
                cancel.set()
            return
        await asyncio.sleep(0.05)  # not a disconnect (nothing else is expected): do not spin


def _usage(out: dict[str, Any]) -> dict[str, int]:
    usage = out.get("usage") or {}
    prompt = int(usage.get("prompt_tokens", 0) or 0)
    completion = int(usage.get("completion_tokens", 0) or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": int(usage.get("total_tokens", prompt + completion) or 0)}


def _finish_reason(out: dict[str, Any]) -> str:
    """"stop" for an answer; "length" for a run that stopped on a limit without one (max_turns,
    the loop guard): its content is empty, and `jarvis.stop_reason` says which limit."""
    return "length" if out.get("status") == "incomplete" else "stop"


def _summary(out: dict[str, Any]) -> dict[str, Any]:
    """jarvis extras next to the OpenAI fields (clients ignore unknown keys)."""
    summary = {"agent": out.get("agent"), "engine": out.get("engine"), "turns": out.get("turns"),
               "run_id": out.get("run_id"),
               "tool_results": [{k: r.get(k) for k in ("tool_name", "success", "content",
                                                        "latency_seconds", "error_type")}
                                for r in out.get("tool_results", [])]}
    if out.get("status") == "incomplete":  # no answer: which limit stopped the run
        summary.update(status="incomplete", stop_reason=out.get("stop_reason"),
                       stop_message=out.get("stop_message"))
    if out.get("status") == "parked":  # waiting for the person: which requests
        summary["status"] = "parked"
        summary["pending_approvals"] = out.get("pending_approvals")
    return summary


def _as_api_error(exc: BaseException) -> ApiError:
    from jarvis.errors import ConfigError, EngineError, RunCancelled, UnknownNameError, UserError

    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, RunCancelled):  # its client went away: this answer reaches nobody
        return ApiError(499, "the client closed the request; its run was cancelled",
                        kind="api_error", code="cancelled")
    if isinstance(exc, UnknownNameError):
        return ApiError(404 if exc.kind == "agent" else 400, str(exc), code="model_not_found"
                        if exc.kind == "agent" else None)
    if isinstance(exc, (UserError, ConfigError)):
        return ApiError(400, str(exc))
    if isinstance(exc, EngineError):
        return ApiError(502, f"the inference engine failed: {exc}", kind="api_error",
                        code="engine_error")
    log.exception("chat completion failed", exc_info=exc)
    return ApiError(500, f"internal error: {type(exc).__name__} (details are in the server log)",
                    kind="api_error")
