"""`jarvis ask`: answer one question. The answer streams to stdout; tool calls and their
results go to stderr as they happen; `--json` prints the whole ask_full dict instead."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from jarvis.commands._common import echo_json, terminal_approver

PREVIEW_CHARS = 200


def _preview(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."


def _show_tool_events(bus: Any) -> None:
    from jarvis.core.events import EventType

    def start(event: Any) -> None:
        data = event.data
        click.echo(f"[tool] {data['tool_name']} {_preview(data.get('arguments') or {})}", err=True)

    def end(event: Any) -> None:
        data = event.data
        result = data.get("result")
        mark = "->" if data.get("success") else "-> FAILED"
        content = _preview(result.content) if result is not None else ""
        latency = data.get("latency") or 0.0
        click.echo(f"[tool] {data['tool_name']} {mark} {content} ({latency * 1000:.1f} ms)", err=True)

    bus.subscribe(EventType.TOOL_CALL_START, start)
    bus.subscribe(EventType.TOOL_CALL_END, end)


class _Stdout:
    """Writes streamed answer text to stdout and remembers whether a newline is owed."""

    def __init__(self) -> None:
        self.wrote = False
        self.last = "\n"

    def __call__(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        self.wrote = True
        self.last = text[-1:] or self.last

    def finish(self) -> None:
        if self.wrote and self.last != "\n":
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.last = "\n"


@click.command()
@click.argument("query", nargs=-1, required=True)
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
@click.pass_context
def ask(ctx: click.Context, query: tuple[str, ...], agent: str | None, tools: str | None,
        model: str | None, engine: str | None, host: str | None, system: str | None,
        max_turns: int | None, yes: bool, as_json: bool, no_stream: bool,
        no_context: bool) -> None:
    """Ask QUERY; the answer goes to stdout, tool activity to stderr.

    \b
    Examples:
      jarvis ask "What is the capital of France?"
      jarvis ask --tools calculator "What is 15% of 340?"
      jarvis ask -a react --tools calculator,think "Solve: 2x + 5 = 13"
    """
    from jarvis.sdk import Jarvis

    config_path = (ctx.obj or {}).get("config_path")
    stdout = _Stdout()
    streaming = not (as_json or no_stream)
    # The built-in HTTP client: importing the openai package would triple start-up time.
    try:
        with Jarvis(config_path=config_path, engine=engine, model=model, host=host,
                    default_client="http") as j:
            _show_tool_events(j.bus)
            result = j.ask_full(" ".join(query), agent=agent, tools=tools, system=system,
                                max_turns=max_turns, approver=terminal_approver(yes),
                                context=False if no_context else None, source="cli",
                                on_token=stdout if streaming else None)
    finally:
        stdout.finish()  # text streamed before a failure still ends its line
    if as_json:
        echo_json(result)
        return
    sources = result.get("context_sources") or []
    if sources:
        click.echo(f"[memory] context from: {', '.join(sources)}", err=True)
    if streaming and stdout.wrote:
        stdout.finish()
    else:
        click.echo(result["content"])
    meta = result.get("metadata") or {}
    if meta.get("max_turns_exceeded"):
        click.echo(f"warning: stopped at max_turns ({result['turns']} turns) before a final "
                   f"answer; raise it with --max-turns", err=True)
    if meta.get("loop_detected"):
        click.echo("warning: stopped because the model kept repeating the same tool call",
                   err=True)
