"""Jarvis: the Python SDK. Builds engine, tools and agent from config.toml (+ env, + arguments)
and answers questions.

    from jarvis import Jarvis

    with Jarvis() as j:
        result = j.ask_full("What is 15% of 340?", agent="orchestrator", tools=["calculator"])
        print(result["content"])

Everything heavy is built on first use: the engine (discovery included) on the first ask, the
memory store only when a tool or the memory context needs it, the scheduler only when a
scheduler tool asks for it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jarvis.core.events import EventBus, EventType
from jarvis.core.types import Message
from jarvis.errors import JarvisError, UnknownNameError, UserError

if TYPE_CHECKING:
    from jarvis.stream import AnswerStream

Approver = Callable[[Any, dict[str, Any]], bool]

def _split_names(value: str | Sequence[str] | None) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise UserError(f"tools must be a list of tool names or a comma-separated string, "
                        f"not {type(value).__name__}")
    return [str(n).strip() for n in value if str(n).strip()]


class Jarvis:
    """The assistant: ask questions, with tools, through an agent, on an engine.

    Args:
        config_path: config.toml to use (default lookup: ./config.toml, $JARVIS_HOME/config.toml).
        engine / model: an InferenceEngine or a backend name (ollama, vllm, llamacpp, ...) and
            the model; default: JARVIS_ENGINE / JARVIS_MODEL, config, else discovery.
        bus: an EventBus for tool, inference and run events; host: the engine's host
            (overrides the environment and config); config: a loaded JarvisConfig.
        default_client: "openai", "http" or "auto" (the built-in client for a plain http://
            URL with no proxy, ~6x cheaper a request) when `[engine] client` is auto.
        engine_key: OpenJarvis's name for `engine` (a backend name).
    """

    def __init__(self, config_path: str | os.PathLike[str] | None = None, engine: Any = None,
                 model: str | None = None, bus: EventBus | None = None, *,
                 host: str | None = None, config: Any = None,
                 default_client: str = "auto", engine_key: str | None = None) -> None:
        from jarvis.core.config import load_config

        if engine_key is not None:
            if engine is not None and engine != engine_key:
                raise UserError("pass engine or engine_key (the same setting), not both")
            engine = engine_key

        if config is None:
            from jarvis.extensions import check_tool_tables

            check_tool_tables(config := load_config(config_path))  # typos found now
        self.config = config
        self.bus = bus if bus is not None else EventBus()
        self._engine: Any = None
        self._engine_name: str | None = None
        self._owns_engine = False
        if engine is not None and not isinstance(engine, str):
            self._engine = engine
        else:
            self._engine_name = engine
        self._host = host
        self._default_client = default_client
        self._model = model
        self._resolved_model: str | None = None
        self._memory: Any = None
        self._memory_file: Path | None = None
        self._runlog: Any = None
        self._extensions_loaded = False
        self._closed = False

    @property
    def version(self) -> str:
        """The installed jarvis version."""
        from jarvis._version import __version__

        return __version__

    def list_models(self) -> list[str]:
        """The models the engine offers (asks the engine)."""
        return list(self.engine.list_models())

    @staticmethod
    def list_engines() -> list[str]:
        """Engine names `engine=` accepts: the built-in backends and registered engines."""
        from jarvis.engine.discovery import engine_names

        return engine_names()

    # --- lazily built parts --------------------------------------------------------------------
    @property
    def engine(self) -> Any:
        """The InferenceEngine (built, or discovered, on first use)."""
        if self._engine is None:
            from jarvis.engine.discovery import get_engine

            self._engine = get_engine(self.config, self._engine_name, self._host, self._model,
                                      default_client=self._default_client)
            self._owns_engine = True
        return self._engine

    @property
    def model(self) -> str:
        """The model name used when an ask names none."""
        if self._resolved_model is None:
            model = self._model or self.config.engine.model
            if not model:
                engine = self.engine
                chooser = getattr(engine, "default_model", None)
                if callable(chooser):
                    model = chooser()
                else:
                    models = engine.list_models()
                    model = models[0] if models else ""
            self._resolved_model = model
        return self._resolved_model

    def _memory_path(self) -> Path:
        # Worked out once: every ask checks whether the file exists (a served request too).
        if self._memory_file is None:
            from jarvis.memory import memory_path
            self._memory_file = memory_path(self.config)
        return self._memory_file

    @property
    def memory(self) -> Any:
        """The memory store (SQLite FTS5) the config describes, opened on first use; also
        OpenJarvis's memory handle: `index(path)`, `search(query, top_k=)`, `stats()`."""
        if self._memory is None or getattr(self._memory, "_closed", False):
            # (reopened after `j.memory.close()`, as OpenJarvis's memory handle is)
            from jarvis.memory import open_memory

            self._memory = open_memory(self.config, bus=self.bus)
        return self._memory

    @property
    def scheduler(self) -> Any:
        """The TaskScheduler on [scheduler] db_path (opened on first use); the tasks it runs
        itself (`scheduler.start()`, `run_now`) go through this Jarvis's ask_full."""
        if getattr(self, "_scheduler", None) is None:
            from jarvis.scheduler.scheduler import TaskScheduler

            self._scheduler = TaskScheduler(system=self)
        return self._scheduler

    @property
    def runlog(self) -> Any:
        """The run log (None when `[runs] enabled = false` or JARVIS_RUN_LOG=0)."""
        from jarvis.runlog import RunLog, run_log_enabled, run_log_path

        if not run_log_enabled(self.config):
            return None
        if self._runlog is None:
            self._runlog = RunLog(run_log_path(self.config))
        return self._runlog

    def load_extensions(self) -> None:
        """Register workspace, plugin and MCP tools once (before tools are built by name)."""
        if not self._extensions_loaded:
            from jarvis.extensions import load_extensions

            self._extensions_loaded = True
            load_extensions(self.config)

    # --- names -> objects --------------------------------------------------------------------
    def resolve_agent(self, name: str | None, tools: list[str] | None) -> tuple[type, Any]:
        """The agent class and, for a workspace agent, its AgentSpec."""
        from jarvis.agents import BUILTIN_AGENTS, agent_class

        name = name or self.config.agent.default or ("orchestrator" if tools else "simple")
        cls = agent_class(name)
        if cls is not None:
            return cls, None
        spec = None
        workspace_names: list[str] = []
        try:
            from jarvis.workspace.agents import find_agent, load_agents
        except ImportError:  # the workspace module is optional in stripped-down installs
            find_agent = load_agents = None  # type: ignore[assignment]
        if find_agent is not None:
            spec = find_agent(self.config, name)
            if spec is None:
                # load_agents, not list_agents: an unrelated broken agent file must not hide
                # the real problem (this name is unknown).
                workspace_names = [s.name for s in load_agents(self.config).agents]
        if spec is None:
            from jarvis.core.registry import AgentRegistry
            from jarvis.workspace import describe_workspace

            raise UnknownNameError("agent", name, set(AgentRegistry.keys()) | set(BUILTIN_AGENTS)
                                   | set(workspace_names),
                                   hint="workspace agents live in agents/*.toml; "
                                   + describe_workspace(self.config))
        return BUILTIN_AGENTS[spec.base], spec

    def _check_tool_names(self, names: list[str]) -> None:
        from jarvis.core.registry import ToolRegistry

        enabled = self.config.tools.enabled
        for name in names:
            if not ToolRegistry.contains(name):
                from jarvis.workspace import describe_workspace

                ToolRegistry.check_available(name)  # e.g. its MCP server failed: say why
                raise UnknownNameError("tool", name, enabled if enabled is not None
                                       else ToolRegistry.keys(),
                                       hint="`jarvis tools list` shows them; "
                                       + describe_workspace(self.config))
            if enabled is not None and name not in enabled:
                raise UnknownNameError("tool", name, enabled,
                                       hint="it is not in [tools] enabled in config.toml")

    def build_tools(self, names: list[str], model: str | None = None) -> list[Any]:
        """Tool instances, each given the services its class declares in `needs` (engine,
        model, memory, scheduler, bus, config), built only when a requested tool needs them:
        asking with `calculator` never opens the memory or the scheduler database."""
        from jarvis.core.registry import ToolRegistry
        from jarvis.core.services import needed_services
        from jarvis.tools.catalog import build_tools

        self.load_extensions()
        self._check_tool_names(names)
        needed: set[str] = set()
        for name in names:
            needed |= needed_services(ToolRegistry.get(name))
        return build_tools(names, services=self.services(needed, model),
                           settings=self.config.tools.settings)

    def services(self, names: set[str] | Sequence[str], model: str | None = None) -> dict[str, Any]:
        """The jarvis services `names` (see jarvis.core.services) from this Jarvis, built on
        demand: engine, model (`model`, else the default one), memory, scheduler, bus, config."""
        makers: dict[str, Callable[[], Any]] = {
            "engine": lambda: self.engine,
            "model": lambda: model or self.model,
            "bus": lambda: self.bus,
            "config": lambda: self.config,
            "memory": lambda: self.memory,
            "scheduler": lambda: self.scheduler,
        }
        wanted = set(names)
        if "memory" in wanted and self._memory is None and not self._memory_path().exists():
            wanted.discard("memory")  # no database yet: memory tools open it on first use
        return {name: makers[name]() for name in makers if name in wanted}

    # --- asking ------------------------------------------------------------------------------
    def ask(self, query: str, **kwargs: Any) -> str:
        """Answer `query`; returns the answer text (see ask_full for the arguments). A run
        that ends without an answer (max_turns, the loop guard) raises RunIncomplete."""
        return _answer(self.ask_full(query, **kwargs))

    def ask_full(self, query: str, agent: str | None = None,
                 tools: str | Sequence[str] | None = None, system: str | None = None,
                 max_turns: int | None = None, model: str | None = None,
                 approver: Approver | None = None, approved_tools: Sequence[str] | None = None,
                 context: bool | None = None, source: str = "sdk",
                 on_token: Callable[[str], Any] | None = None,
                 history: Sequence[Message] | None = None, temperature: float | None = None,
                 max_tokens: int | None = None, run_metadata: dict[str, Any] | None = None,
                 cancel: Any = None, output_schema: Any = None, _resume: Any = None,
                 schema_retries: int | None = None, schema_mode: str = "auto",
                 trust: Any = None, allow_egress: Sequence[str] | None = None,
                 egress_approver: Callable[[Any], bool] | None = None, on_approval: str | None = None,
                 on_person_needed: Callable[[Any], Any] | None = None, fence: Any = None,
                 budget: Any = None, conversation: str | None = None) -> dict[str, Any]:
        """Answer `query` and report how.

        Args:
            agent: simple, react, orchestrator or a workspace agent (default: config, else
                orchestrator when tools are given, simple otherwise).
            tools: tool names (a list or "a,b"); default: the agent's or config's tools.
            system: the system prompt.
            approver: `approver(spec, arguments) -> bool` for confirmation-gated tools;
            approved_tools: names approved without asking. With neither, such calls are denied.
            context: False skips the memory context.
            source: recorded in the run log (sdk, cli, scheduler, ...).
            on_token: called with each piece of the answer as it streams.
            run_metadata: facts for its tools (ToolContext.metadata) and agent, kept in the
                result's metadata and the run log (the scheduler's `scheduled_run`).
            cancel: a threading.Event (anything with `is_set()`); once set, from any thread,
                the run stops at its next boundary (before an engine call, between streamed
                chunks, before the tool calls of a turn) and raises RunCancelled; the run log
                records it as "cancelled". An engine or tool call already under way is not
                interrupted: it finishes (bounded by its timeout) and its result is dropped.
            output_schema: a pydantic model class or a JSON schema: the answer must be JSON
                that matches it (jarvis.agents.structured); `parsed` holds the checked value
                (a model instance for a model), or None when no answer matched.
            schema_retries: retries with the validation error shown (default 2); schema_mode:
                auto, native or tool.
            trust / allow_egress / egress_approver / on_person_needed: docs/trust.md. The
                starting RunTrust (default: `query` and `history`'s user messages are the
                person's words); "HOST", "channel:NAME", "mcp:SERVER" allowed beside
                `[egress]`; `fn(ApprovalRequest) -> bool` for calls the guard holds (else
                denied, `approver` never answers them; on_approval="defer" parks them:
                docs/approvals.md); the hook every person-needed decision goes through (jarvis.tools.gate).
            fence: a scheduled run's RunFence (jarvis.tools.fence): lease checks, effect keys.
            budget: a Budget or {"usd", "seconds", "tool_calls"} (jarvis.tools.budget).
            conversation: a conversation id: answer as its next turn (jarvis.conversations).

        Returns a dict with content, usage (summed over turns), tool_results, turns, model,
        engine, agent, run_id, context_sources, trust (what the run read, when, by which
        call; its egress decisions), budget (spend and limits), metadata, and status: "ok",
        or "incomplete" for a run that ended without an answer (stop_reason "max_turns",
        "loop_guard", "budget", or "schema" when no answer matched `output_schema`;
        stop_message says so; content is then empty but for "schema"). The run log records it
        as incomplete. A tainted run's answer has its self-fetching Markdown neutralized.
        """
        if not isinstance(query, str) or not query.strip():
            raise UserError("the query is empty; pass a question to ask")
        if conversation is not None:
            options = {k: v for k, v in locals().items() if k not in ("self", "query", "conversation")}
            from jarvis.conversations import ask_in_conversation
            return ask_in_conversation(self, conversation, query, **options)
        if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int)
                                      or max_turns < 1):
            raise UserError(f"max_turns must be a whole number of at least 1, not {max_turns!r}")
        started = time.time()
        structured = None
        if output_schema is not None:
            from jarvis.agents.structured import DEFAULT_RETRIES, OutputSchema

            structured = OutputSchema.of(output_schema)  # a bad schema fails before any work
            schema_retries = DEFAULT_RETRIES if schema_retries is None else schema_retries
        tool_names = _split_names(tools)
        from jarvis.core.text import ask_problem

        invalid = ask_problem(query, system, history)
        if invalid is not None:
            # Refused before any engine call, yet in `jarvis runs list` like every ask.
            self._refuse(invalid, query=query, source=source, tools=tool_names, started=started)
        agent_cls, spec = self.resolve_agent(agent, tool_names)
        if tool_names is None:
            tool_names = list(spec.tools) if spec is not None else list(self.config.agent.tools)
        if tool_names:
            # Workspace, plugin and MCP tools are only looked for when tools are asked for.
            self.load_extensions()
            self._check_tool_names(tool_names)
        use_model = model or (spec.model if spec is not None and spec.model else None) or self.model
        built = self.build_tools(tool_names, use_model) if tool_names else []
        engine = self.engine
        if structured is not None:
            from jarvis.agents import structured_agent
            from jarvis.agents.structured import choose_mode

            schema_mode = choose_mode(engine, schema_mode)
            agent_cls = structured_agent(agent_cls, schema_mode)
        agent_name = spec.name if spec is not None else agent_cls.agent_id
        if self.config.mcp.servers:
            from jarvis.mcp.capabilities import set_sampling_engine

            # MCP servers allowed to sample (`sampling = true`) get this run's engine and model.
            set_sampling_engine(engine, use_model)

        from jarvis.approvals.parking import Parking
        from jarvis.tools.budget import meter_for
        from jarvis.tools.executor import ToolExecutor
        from jarvis.trust import AnswerGuard

        parking = Parking(self, query, history, trust, allow_egress, on_approval, approved_tools,
                          run_metadata, (on_person_needed, approver, egress_approver), _resume)
        run_id, run_trust = parking.check(structured), parking.trust
        tc = self.config.tools
        meter = meter_for(self.config, spec, budget, engine=engine, model=use_model, log=self.runlog)
        executor = ToolExecutor(built, bus=self.bus, approver=_approver(approver, approved_tools),
                                default_timeout=tc.default_timeout,
                                max_output_chars=tc.max_output_chars, run_id=run_id,
                                approved_tools=approved_tools or (),
                                max_abandoned_per_tool=tc.max_abandoned_per_tool,
                                max_abandoned=tc.max_abandoned_threads, fence=fence, budget=meter,
                                trusted_tools=self.config.egress.trusted_tools, **parking.options)
        system_prompt = system if system is not None else (
            spec.instructions if spec is not None and spec.instructions else self.config.agent.system)
        context_text, sources, writers = self._memory_context(query, context)
        if context_text:
            system_prompt = f"{system_prompt}\n\n{context_text}" if system_prompt else context_text
        answer = AnswerGuard(run_trust, on_token)
        turns = max_turns or (spec.max_turns if spec is not None else self.config.agent.max_turns)
        runner = agent_cls(engine, use_model, executor=executor, bus=self.bus,
                           system=system_prompt or None, max_turns=turns,
                           max_repeats=self.config.agent.max_repeats,
                           max_tool_calls_per_turn=self.config.agent.max_tool_calls_per_turn,
                           temperature=temperature if temperature is not None
                           else self.config.engine.temperature,
                           max_tokens=max_tokens if max_tokens is not None
                           else self.config.engine.max_tokens,
                           on_token=answer.token if on_token is not None else None, cancel=cancel)
        engine_name = getattr(engine, "engine_id", type(engine).__name__)
        record = {"id": run_id, "created_at": started, "source": source, "query": query,
                  "agent": agent_name, "model": use_model, "engine": engine_name,
                  "tools": tool_names}
        # context_sources rides on RUN_START so a front end can show it before the answer.
        self.bus.publish(EventType.RUN_START, dict(record, context_sources=list(sources)))
        if context_text:  # it counts before the first turn (TRUST_CHANGED after RUN_START)
            run_trust.count_memory_context(writers)
        outcome = None
        try:
            if structured is None:
                result = parking.run(runner, query, history)
            else:
                from jarvis.agents.structured import run as run_structured

                outcome = run_structured(runner, query, structured, schema_mode,
                                         history=history, retries=schema_retries)
                result = outcome.result
        except BaseException as exc:
            from jarvis.errors import RunCancelled

            status = ("interrupted" if isinstance(exc, KeyboardInterrupt) else
                      "cancelled" if isinstance(exc, RunCancelled) else "error")
            # A failed run keeps what its caller said about it (a scheduled run's ids), so
            # `jarvis runs show` can still link it to its scheduled run and delivery.
            self._record(dict(record, metadata=dict(run_metadata or {},
                                                    trust=run_trust.summary())),
                         status=status, error=f"{type(exc).__name__}: {exc}", started=started)
            raise
        finally:  # run-scoped tool resources (the repl's interpreter, ...) end with the run;
            if "jarvis.resources.manager" in sys.modules:  # (none if it was never imported)
                from jarvis.resources.manager import release_run  # waits out a half import
                release_run(run_id)
        from jarvis.agents.outcome import run_stop, tool_results_of

        tool_results = tool_results_of(result)
        metadata = {k: v for k, v in result.metadata.items() if k not in ("tool_calls", "model")}
        metadata.update(run_metadata or {})
        if outcome is not None:
            metadata["structured"] = outcome.metadata()
        metadata["budget"] = meter.report()
        stop_reason, stop_message = run_stop(result, outcome)
        status = "incomplete" if stop_reason else "ok"
        result.content = answer.finish(result.content)
        metadata["trust"] = run_trust.summary()
        out = {
            # max_turns / the loop guard: the agent's note is no answer (a schema's failure
            # keeps the model's last text, which the validation error speaks of)
            "content": "" if stop_reason in ("max_turns", "loop_guard", "budget") else result.content,
            "status": status,
            "stop_reason": stop_reason,
            "stop_message": stop_message,
            "usage": dict(result.usage),
            "tool_results": tool_results,
            "turns": result.turns,
            "model": result.metadata.get("model") or use_model,
            "engine": engine_name,
            "agent": agent_name,
            "run_id": None,
            "context_sources": sources,
            "trust": metadata["trust"],
            "budget": metadata["budget"],
            "metadata": metadata,
            "duration_seconds": time.time() - started,
        }
        if outcome is not None:
            out["parsed"] = outcome.parsed
        status = out["status"] = parking.settle(out, status, result, record, runner)
        try:
            out["run_id"] = self._record(record, status=status, error=stop_message,
                                         started=started, result=result,
                                         tool_results=tool_results, out=out)
        except JarvisError as exc:
            # The answer is paid for: keep it, and say the run was not recorded.
            import logging

            out["metadata"]["run_log_error"] = str(exc)
            logging.getLogger("jarvis").warning("jarvis: warning: the run was not recorded: %s",
                                                exc)
        self.bus.publish(EventType.RUN_END, {"run_id": run_id, "status": status,
                                             "usage": out["usage"], "turns": out["turns"]})
        return out

    from jarvis.approvals.parking import resume as resume  # Jarvis.resume(run_id, decisions)

    def _memory_context(self, query: str,
                        context: bool | None) -> tuple[str, list[str], list[str]]:
        """(text, sources, who wrote each passage) of the memory context for `query`."""
        mc = self.config.memory
        if context is False or not mc.enabled or not mc.context:
            return "", [], []
        if self._memory is None and not self._memory_path().exists():
            return "", [], []  # nothing stored yet: do not create an empty database for it
        try:
            from jarvis.memory.context import safe_memory_context
        except ImportError:
            return "", [], []
        found = safe_memory_context(lambda: self.memory, query, mc.context_top_k,
                                    mc.context_min_match)
        return found.text or "", list(found.sources or []), list(found.written_by)

    def _refuse(self, message: str, *, query: str, source: str, tools: Any,
                started: float) -> None:
        """Record a run refused before it started (status "error"), then raise UserError."""
        from jarvis.runlog import new_run_id

        record = {"id": new_run_id(), "created_at": started, "source": source, "query": query,
                  "tools": list(tools or [])}
        try:
            self._record(record, status="error", error=message, started=started)
        except JarvisError as exc:
            import logging

            logging.getLogger("jarvis").warning("jarvis: warning: the run was not recorded: %s",
                                                exc)
        raise UserError(message)

    def _record(self, record: dict[str, Any], *, status: str, started: float,
                error: str | None = None, result: Any = None,
                tool_results: list[dict[str, Any]] | None = None,
                out: dict[str, Any] | None = None) -> str | None:
        log = self.runlog
        if log is None:
            return None
        finished = time.time()
        run = dict(record, status=status, error=error, finished_at=finished,
                   duration_seconds=finished - started)
        calls: list[dict[str, Any]] = []
        if result is not None and out is not None:
            run.update(content=out["content"], turns=result.turns, usage=result.usage,
                       model=out["model"],
                       # Images as placeholders: the tool results keep their data already.
                       messages=[m.to_openai(images=False) for m in result.messages],
                       metadata=dict(out["metadata"], context_sources=out["context_sources"]))
            calls = tool_results or []
        return log.record(run, calls)

    def ask_stream(self, query: str, **kwargs: Any) -> AnswerStream:
        """Answer `query` piece by piece: `for piece in j.ask_stream(q)` or, in async code,
        `async for piece in j.ask_stream(q)` (see jarvis.stream.AnswerStream).

        Takes ask_full's arguments (not on_token). An error in the run is raised from the
        iteration, after the pieces that came before it; so is RunIncomplete, for a run that
        ended without an answer (max_turns, the loop guard). Stopping early (closing the
        iterator, or leaving the loop over it) cancels the run: it stops at its next engine
        or tool boundary in the background and is recorded as "cancelled".
        """
        from jarvis.stream import AnswerStream

        if "on_token" in kwargs:
            raise UserError("ask_stream yields the pieces itself; use ask_full(on_token=...) "
                            "to get a callback")
        return AnswerStream(lambda: self._stream_pieces(query, **kwargs),
                            lambda: self.aask_stream(query, **kwargs))

    def _stream_pieces(self, query: str, **kwargs: Any) -> Iterator[str]:
        """The answer's pieces, read on this thread while the run goes on in another."""
        import queue
        import threading

        cancel = kwargs.pop("cancel", None) or threading.Event()
        pieces: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()

        def run() -> None:
            try:
                _answer(self.ask_full(query, on_token=lambda piece: pieces.put(("piece", piece)),
                                      cancel=cancel, **kwargs))
            except BaseException as exc:  # noqa: BLE001  (re-raised in the caller's thread)
                pieces.put(("error", exc))
            else:
                pieces.put(("done", None))

        threading.Thread(target=run, name="jarvis-ask-stream", daemon=True).start()
        finished = False
        try:
            while True:
                kind, value = pieces.get()
                if kind == "piece":
                    yield value
                elif kind == "error":
                    finished = True
                    raise value
                else:
                    finished = True
                    return
        finally:
            if not finished:  # the caller stopped early: nobody wants the rest
                cancel.set()

    def conversation(self, conversation_id: str | None = None, **defaults: Any) -> Any:
        """`with j.conversation() as c: c.ask_full(...)`: turns that share history."""
        from jarvis.conversations import Conversation
        return Conversation(self, conversation_id, **defaults)

    async def aask_stream(self, query: str, **kwargs: Any) -> AsyncIterator[str]:
        """Async `ask_stream`: `async for piece in j.aask_stream(...)` (the loop stays free).

        Cancelling the task that iterates it (or closing the iterator early) cancels the
        run as `ask_full(cancel=...)` describes: it stops at its next engine or tool
        boundary, in the worker thread, after the cancellation has already returned.
        """
        import asyncio
        import threading

        cancel = kwargs.pop("cancel", None) or threading.Event()
        if "on_token" in kwargs:
            raise UserError("aask_stream yields the pieces itself; use ask_full(on_token=...) "
                            "to get a callback")
        stream = self._stream_pieces(query, cancel=cancel, **kwargs)
        done = object()
        try:
            while True:
                piece = await asyncio.to_thread(next, stream, done)
                if piece is done:
                    return
                yield piece
        except BaseException:
            # Cancelled, closed early (GeneratorExit), or the run's own error (then the run
            # is over and the event changes nothing).
            cancel.set()
            raise

    async def aask(self, query: str, **kwargs: Any) -> str:
        """Async `ask` (the run happens in a worker thread; cancelling works as in aask_full)."""
        return _answer(await self.aask_full(query, **kwargs))

    async def aask_full(self, query: str, **kwargs: Any) -> dict[str, Any]:
        """Async `ask_full` (the run happens in a worker thread, the loop stays free).

        Cancelling the awaiting task cancels the run: CancelledError is raised at once, and
        the run, in its worker thread, stops at its next engine or tool boundary (an engine
        or tool call under way finishes first, bounded by its timeout) and is recorded as
        "cancelled" (see ask_full's `cancel`).
        """
        import asyncio
        import threading

        cancel = kwargs.pop("cancel", None) or threading.Event()
        try:
            return await asyncio.to_thread(self.ask_full, query, cancel=cancel, **kwargs)
        except asyncio.CancelledError:
            cancel.set()
            raise

    # --- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Release the engine (if this Jarvis built it), the memory store, the scheduler (its
        background loop, if started, and its store) and the run log."""
        if self._closed:
            return
        self._closed = True
        scheduler = getattr(self, "_scheduler", None)
        if scheduler is not None:
            scheduler.stop(timeout=scheduler.shutdown_timeout)
            scheduler.store.close()
        if self._engine is not None and self.config.mcp.servers:
            from jarvis.mcp.capabilities import sampling_engine, set_sampling_engine

            if sampling_engine()[0] is self._engine:  # MCP sampling must not use a closed engine
                set_sampling_engine(None)
        if self._engine is not None and self._owns_engine:
            self._engine.close()
        if self._memory is not None and hasattr(self._memory, "close"):
            self._memory.close()
        if self._runlog is not None:
            self._runlog.close()

    def __enter__(self) -> Jarvis:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> Jarvis:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


def _approver(approver: Approver | None, approved_tools: Sequence[str] | None) -> Approver | None:
    approved = frozenset(approved_tools or ())
    if not approved:
        return approver
    from jarvis.tools.gate import NamedApprovals

    return NamedApprovals(approved, approver)


def _answer(out: dict[str, Any]) -> str:
    from jarvis.agents.outcome import answer_of  # lazily: `import jarvis` stays lean
    return answer_of(out)
