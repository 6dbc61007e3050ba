"""`jarvis ask`: answer one question. The answer streams to stdout; tool calls and their
results go to stderr as they happen; `--json` prints the whole ask_full dict instead.

Exit codes: 0 answered; 1 failed (engine, run); 2 misuse (unknown tool, bad option);
3 stopped without an answer (max_turns reached, the loop guard stopped a repeating model, or
the budget ran out); 4 parked: without a terminal and with `[approvals] notify` set, a call
that needs the person waits for them (docs/approvals.md); stderr says how to answer.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click

from jarvis.commands._common import (
    echo_json,
    show_progress,
    shown_data,
    terminal_approver,
    terminal_egress_approver,
)
from jarvis.core.terminal import paint, visible

PREVIEW_CHARS = 200
STOPPED_EXIT_CODE = 3  # max_turns, the loop guard or the budget ended the run without an answer
PARKED_EXIT_CODE = 4  # no terminal: the run waits for the person's approval (docs/approvals.md)
MAX_STDIN_CHARS = 1_000_000


class _Status:
    """A one-line status on stderr while the model is working ("… waiting for m  3s"), its
    elapsed time redrawn every second; only on a terminal (a pipe or a log file gets nothing),
    erased before any other output."""

    def __init__(self) -> None:
        import threading

        self.enabled = _isatty(sys.stderr)
        self.shown = False
        self._text = ""
        self._drawn = ""
        self._since = 0.0
        self._lock = threading.RLock()
        self._ticker: Any = None
        self._stop = threading.Event()

    def show(self, text: str, *, since: float | None = None) -> None:
        """Show `text`, followed by the seconds since `since` (default: now), kept up to date."""
        import time

        if not self.enabled:
            return
        with self._lock:
            self._text = text
            self._since = time.monotonic() if since is None else since
            self._draw()
            if self._ticker is None:
                import threading

                self._stop.clear()
                self._ticker = threading.Thread(target=self._tick, daemon=True,
                                                name="jarvis-ask-status")
                self._ticker.start()

    def _draw(self) -> None:
        import time

        line = f"{self._text}  {int(time.monotonic() - self._since)}s"
        if line != self._drawn or not self.shown:
            sys.stderr.write("\r\033[K" + paint(line, "dim"))
            sys.stderr.flush()
            self._drawn = line
        self.shown = True

    def _tick(self) -> None:
        while not self._stop.wait(0.2):  # the seconds change on time, drawn only then
            with self._lock:
                if self.shown:
                    self._draw()

    def clear(self) -> None:
        with self._lock:
            if self.shown:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
                self.shown = False

    def close(self) -> None:
        self._stop.set()
        self.clear()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _read_query(query: tuple[str, ...]) -> str:
    """The question: the arguments, or stdin for `-` or none (`echo q | jarvis ask`)."""
    if query and query != ("-",):
        return " ".join(query)
    if not query and _isatty(sys.stdin):
        raise click.UsageError("give a QUERY, or pipe one in: echo 'question' | jarvis ask")
    text = sys.stdin.read(MAX_STDIN_CHARS + 1)
    if len(text) > MAX_STDIN_CHARS:
        raise click.UsageError(f"the question on stdin is longer than {MAX_STDIN_CHARS} "
                               f"characters")
    if not text.strip():
        raise click.UsageError("the question on stdin is empty")
    return text.strip()


def _preview(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    text = text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."
    return visible(text, PREVIEW_CHARS + 40, one_line=True)  # a model's or a tool's text


class _Lines:
    """stderr lines that start on a line of their own: on a terminal, an answer streamed to
    stdout may have left the line open ("Let me check."), and a tool line or a warning was
    glued to it. stdout gets nothing but the answer; the line is ended on stderr."""

    def __init__(self, status: _Status, stdout: _Stdout) -> None:
        self.status = status
        self.stdout = stdout

    def echo(self, text: str) -> None:
        self.status.clear()
        if self.stdout.open and _isatty(sys.stdout) and _isatty(sys.stderr):
            sys.stderr.write("\n")
            self.stdout.last = "\n"  # the terminal's line is ended (stdout's own stays exact)
        click.echo(text, err=True)


class _LogLines(logging.Handler):
    """jarvis's warnings during an ask, through _Lines (never glued to the answer)."""

    def __init__(self, lines: _Lines) -> None:
        super().__init__(logging.WARNING)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.echo(paint(self.format(record), "yellow"))
        except Exception:  # noqa: BLE001 - logging must not break the ask
            self.handleError(record)


def _show_events(bus: Any, status: _Status, system: Any, lines: _Lines) -> None:
    from jarvis.core.events import EventType

    def start(event: Any) -> None:
        data = event.data
        name = visible(data['tool_name'], 100, one_line=True)  # the model's, maybe unknown
        lines.echo(f"{paint('[tool]', 'cyan')} {name} "
                   f"{_preview(data.get('arguments') or {})}")

    def end(event: Any) -> None:
        data = event.data
        result = data.get("result")
        mark = "->" if data.get("success") else paint("-> FAILED", "red")
        content = _preview(result.content) if result is not None else ""
        latency = data.get("latency") or 0.0
        name = visible(data['tool_name'], 100, one_line=True)
        lines.echo(f"{paint('[tool]', 'cyan')} {name} {mark} {content} "
                   f"({latency * 1000:.1f} ms)")

    def run_start(event: Any) -> None:
        sources = event.data.get("context_sources") or []
        if sources:  # before the answer, so the reader knows what it draws on
            shown = visible(", ".join(sources), 600, one_line=True)  # paths a model may choose
            lines.echo(f"{paint('[memory]', 'magenta')} context from: {shown}")

    def trust(event: Any) -> None:
        data = event.data
        what = ("read untrusted content" if data.get("change") == "tainted"
                else "holds private data")
        reason = visible(str(data.get("reason")), 300, one_line=True)
        lines.echo(f"{paint('[trust]', 'yellow')} the run {what}: {reason}")

    def waiting(event: Any) -> None:
        model = event.data.get("model") or "the model"
        status.show(f"… waiting for {model}")
        if status.enabled and not hooked:
            hooked.append(True)
            _show_retries(system.engine, status)  # built by now: this is its first request

    hooked: list[bool] = []

    bus.subscribe(EventType.RUN_START, run_start)
    bus.subscribe(EventType.TRUST_CHANGED, trust)
    bus.subscribe(EventType.TOOL_CALL_START, start)
    bus.subscribe(EventType.TOOL_CALL_END, end)
    bus.subscribe(EventType.INFERENCE_START, waiting)
    bus.subscribe(EventType.INFERENCE_END, lambda event: status.clear())
    show_progress(bus)


def _show_retries(engine: Any, status: _Status) -> None:
    """Retries of a slow or failing engine show on the status line (engines that offer an
    `on_retry` hook, as the built-in OpenAI-compatible one does)."""
    if hasattr(engine, "on_retry"):
        def retrying(attempt: int, retries: int, delay: float, reason: str) -> None:
            status.show(f"… {reason} from {engine.engine_id}; retry {attempt} of {retries} in "
                        f"{delay:.1f} s", since=status._since)

        engine.on_retry = retrying


class _Stdout:
    """Writes streamed answer text to stdout and remembers whether a newline is owed."""

    def __init__(self, status: _Status | None = None) -> None:
        self.wrote = False
        self.last = "\n"
        self.status = status

    @property
    def open(self) -> bool:
        """Whether the answer left its line unended."""
        return self.wrote and self.last != "\n"

    def __call__(self, text: str) -> None:
        if self.status is not None:
            self.status.clear()
        # Per delta is enough: every unsafe character is escaped on its own, so a sequence
        # split across deltas is escaped in both halves.
        sys.stdout.write(shown_data(text))
        sys.stdout.flush()
        self.wrote = True
        self.last = text[-1:] or self.last

    def finish(self) -> None:
        if self.wrote and self.last != "\n":
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.last = "\n"


@click.command()
@click.argument("query", nargs=-1)
@click.option("-a", "--agent", help="simple, react, orchestrator or a workspace agent "
              "(default: orchestrator with --tools, else simple).")
@click.option("--tools", "tools", help="Comma-separated tool names, e.g. calculator,think.")
@click.option("-m", "--model", help="Model name (default: JARVIS_MODEL, config, or the "
              "engine's first model).")
@click.option("-e", "--engine", help="ollama, vllm, llamacpp, lmstudio, sglang or openai "
              "(default: JARVIS_ENGINE, config, or the first local engine that answers).")
@click.option("--host", help="The engine's address (overrides OLLAMA_HOST etc. and config).")
@click.option("-s", "--system", help="System prompt.")
@click.option("--max-turns", type=click.IntRange(1, 100), help="Engine calls allowed (default: "
              "config, 10).")
@click.option("-y", "--yes", is_flag=True, help="Approve tools that require confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print the full result (content, usage, "
              "tool results, run id, ...) as JSON.")
@click.option("--no-stream", is_flag=True, help="Print the answer when it is complete.")
@click.option("--no-context", is_flag=True, help="Do not add relevant memory to the prompt.")
@click.option("--schema", "schema_file", type=click.Path(dir_okay=False),
              help="A JSON schema file: the answer must be JSON that matches it; it is "
                   "printed as JSON (exit code 3 when no answer matched).")
@click.option("--allow-egress", "allow_egress", multiple=True, metavar="DEST",
              help="Let this ask send to DEST even after it read untrusted content and holds "
                   "private data: HOST, channel:NAME or mcp:SERVER (repeatable; see "
                   "docs/trust.md). --yes does not cover such calls.")
@click.option("-c", "--continue", "continue_last", is_flag=True, help="Continue the last "
              "conversation (its earlier questions and answers go with this one).")
@click.option("--conversation", "conversation_id", metavar="ID", help="Continue conversation "
              "ID (`jarvis conversations list`).")
@click.option("--budget-usd", type=float, metavar="USD", help="Dollars this ask may spend "
              "(engine tokens priced from [engine.prices], tools' cost); default: [agent].")
@click.option("--budget-seconds", type=float, metavar="S", help="Seconds this ask may take; "
              "default: [agent].")
@click.option("--max-tool-calls", type=int, metavar="N", help="Tool calls this ask may make; "
              "default: [agent].")
@click.pass_context
def ask(ctx: click.Context, query: tuple[str, ...], agent: str | None, tools: str | None,
        model: str | None, engine: str | None, host: str | None, system: str | None,
        max_turns: int | None, yes: bool, as_json: bool, no_stream: bool,
        no_context: bool, schema_file: str | None, allow_egress: tuple[str, ...],
        continue_last: bool, conversation_id: str | None, budget_usd: float | None,
        budget_seconds: float | None, max_tool_calls: int | None) -> None:
    """Ask QUERY (or `-`, or nothing: read it from stdin); the answer goes to stdout, tool
    activity to stderr. Exit code 3: stopped without an answer (max turns, loop guard or
    budget: a call that would overrun it is not made).

    \b
    Examples:
      jarvis ask "What is the capital of France?"
      jarvis ask --tools calculator "What is 15% of 340?"
      jarvis ask -a react --tools calculator,think "Solve: 2x + 5 = 13"
      echo "What is 2+2?" | jarvis ask
      jarvis ask -c "And in Celsius?"      # continue the last conversation
      jarvis ask --tools web_search --budget-seconds 30 --max-tool-calls 5 "news?"
    """
    from jarvis.commands.conversations import asker, chosen_conversation
    from jarvis.sdk import Jarvis
    from jarvis.tools.budget import Budget

    budget = Budget(budget_usd, budget_seconds, max_tool_calls)  # bad values: one line, exit 2

    question = _read_query(query)
    config_path = (ctx.obj or {}).get("config_path")
    status = _Status()
    stdout = _Stdout(status)
    lines = _Lines(status, stdout)
    output_schema = None
    if schema_file:
        output_schema = _load_schema_file(schema_file)  # a bad file: one line, exit 2
    # A structured answer is printed once it is checked, never streamed unchecked.
    streaming = not (as_json or no_stream or output_schema is not None)
    defer: str | None = None
    notify = False
    handler = _LogLines(lines)
    logging.getLogger("jarvis").addHandler(handler)
    # The built-in HTTP client: importing the openai package would triple start-up time.
    try:
        with Jarvis(config_path=config_path, engine=engine, model=model, host=host,
                    default_client="http") as j:
            _show_events(j.bus, status, j, lines)
            record = chosen_conversation(j.config, continue_last, conversation_id)
            answer = asker(j, record, source="cli", agent=agent, tools=tools)
            # No terminal (cron, a script) and a channel to ask on: a call that needs the
            # person parks instead of being refused (a structured answer is checked in one
            # go: it cannot park).
            notify = bool(j.config.approvals.notify)
            defer = "defer" if (not _isatty(sys.stdin) and output_schema is None
                                and notify) else None
            # Where it was asked: its continuation (`jarvis approvals approve`, maybe in
            # another folder) uses this workspace's tools and agents.
            where = ({"cli": {"workspace": str(j.config.source)}}
                     if defer and j.config.source is not None else None)
            result = answer(question, agent=agent, tools=tools, system=system,
                            on_approval=defer, run_metadata=where,
                            max_turns=max_turns, approver=terminal_approver(yes),
                            egress_approver=terminal_egress_approver(),
                            allow_egress=list(allow_egress),
                            context=False if no_context else None, source="cli",
                            on_token=stdout if streaming else None,
                            output_schema=output_schema, budget=budget)
    finally:
        status.close()
        logging.getLogger("jarvis").removeHandler(handler)
        stdout.finish()  # text streamed before a failure still ends its line
    if result.get("status") == "parked":
        parked_exit(ctx, result, as_json, stdout.wrote)
        return
    if defer is None and not _isatty(sys.stdin):
        _refusal_hint(result, notify and output_schema is not None)
    stopped = result.get("stop_reason") in ("max_turns", "loop_guard", "budget")
    if output_schema is not None and not stopped:
        _structured_exit(ctx, result, as_json)
        return
    if as_json:
        echo_json(result)
    elif streaming and stdout.wrote:
        stdout.finish()
    elif not stopped:  # a stop has no answer: stdout stays for answers
        click.echo(shown_data(result["content"]))
    error = paint("Error:", "red", "bold")
    if result.get("stop_reason") == "max_turns":
        click.echo(f"{error} stopped at max_turns ({result['turns']} turns) without a final "
                   f"answer; raise it with --max-turns (exit code {STOPPED_EXIT_CODE})", err=True)
    elif result.get("stop_reason") == "budget":
        from jarvis.tools.budget import spend_line

        why = visible(spend_line(result.get("budget") or {}), 600, one_line=True)
        click.echo(f"{error} stopped at the budget without a final answer: {why} (exit code "
                   f"{STOPPED_EXIT_CODE})", err=True)
    elif stopped:
        click.echo(f"{error} {result['stop_message']} (exit code {STOPPED_EXIT_CODE})", err=True)
    if stopped:
        ctx.exit(STOPPED_EXIT_CODE)


def parked_exit(ctx: click.Context, result: dict[str, Any], as_json: bool,
                streamed: bool) -> None:
    """A run that parked: `--json` prints it (status "parked", run_id, pending_approvals);
    stderr says which run waits and the exact commands that answer it; exit code 4. The text
    the model wrote before the call (streamed already, or not) is no answer: stdout stays
    empty of it."""
    if as_json:
        echo_json(result)
    run_id = visible(str(result.get("run_id") or (result.get("pending_approvals") or [{}])[0]
                         .get("run_id")), 80, one_line=True)
    click.echo(f"{paint('parked:', 'yellow', 'bold')} run {run_id} waits for your approval "
               f"(no terminal to ask on; exit code {PARKED_EXIT_CODE})", err=True)
    for item in result.get("pending_approvals") or []:
        ident = visible(str(item.get("id")), 40, one_line=True)
        click.echo(visible(f"  {item.get('tool')} -> {item.get('where')}", 300, one_line=True),
                   err=True)
        click.echo(f"  approve: jarvis approvals approve {ident}", err=True)
        click.echo(f"  deny:    jarvis approvals deny {ident}", err=True)
    click.echo("The request was sent to your channel. `jarvis approvals approve|deny` continues "
               "the run, once, and prints its answer; answered elsewhere (the link, a reply), "
               "`jarvis approvals continue " + run_id + "` does.", err=True)
    ctx.exit(PARKED_EXIT_CODE)


def _refusal_hint(result: dict[str, Any], structured: bool) -> None:
    # structured: `notify` is set, but a --schema ask does not park.
    """No terminal, and calls were refused for want of a person: say how to be asked."""
    refused = [t for t in result.get("tool_results") or [] if t.get("error_type") == "denied"]
    if not refused:
        return
    how = ("a --schema ask cannot wait for an answer; ask without --schema" if structured else
           'set [approvals] notify = "CHANNEL" in config.toml and such runs wait for your '
           "answer on that channel instead (docs/approvals.md)")
    click.echo(f"note: {len(refused)} call(s) needed your approval and were refused (no "
               f"terminal to ask on): {how}", err=True)


def _load_schema_file(path: str) -> dict[str, Any]:
    """The JSON schema in the file a person named with --schema, bounded before it is parsed
    (SchemaProblem, a UserError, says what is wrong)."""
    from pathlib import Path

    from jarvis.agents.structured import MAX_SCHEMA_BYTES, SchemaProblem, check_schema

    file = Path(path)
    try:
        with file.open("rb") as fh:
            data = fh.read(MAX_SCHEMA_BYTES * 4 + 1)
    except OSError as exc:
        raise SchemaProblem(f"cannot read the schema file {file}: {exc.strerror or exc}") from None
    if len(data) > MAX_SCHEMA_BYTES * 4:
        raise SchemaProblem(f"the schema file {file} is larger than {MAX_SCHEMA_BYTES * 4} bytes")
    try:
        schema = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise SchemaProblem(f"the schema file {file} is not valid JSON: {exc}"[:300]) from None
    return check_schema(schema)


def _structured_exit(ctx: click.Context, result: dict[str, Any], as_json: bool) -> None:
    """Print a structured answer as JSON, or say why there is none (exit code 3)."""
    report = (result.get("metadata") or {}).get("structured") or {}
    if as_json:
        echo_json(result)
    elif result.get("status") == "ok":
        click.echo(shown_data(json.dumps(result["parsed"], ensure_ascii=False)))
    if result.get("status") != "ok":
        errors = report.get("errors") or ["no answer"]
        click.echo(f"Error: no answer matched the schema after {report.get('attempts', 0)} "
                   f"attempt(s); the last problem: {visible(errors[-1], 500, one_line=True)} "
                   f"(exit code {STOPPED_EXIT_CODE})", err=True)
        ctx.exit(STOPPED_EXIT_CODE)
