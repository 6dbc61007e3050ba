"""What jarvis answers when an MCP server asks the client something: roots, sampling, elicitation.

Declaring a capability makes servers offer the tools that need it, so each is declared only
when jarvis can really answer:

- roots (on unless `roots = false`): the workspace folder and the folders the file tools may
  read (`allowed_dirs` of any [tools.NAME] table), as file:// URIs.
- sampling (off unless `sampling = true` for that server: a server could otherwise spend the
  user's model budget): the request is answered by the active engine (`set_sampling_engine`,
  done by the Jarvis SDK when it builds an engine), bounded to MAX_SAMPLING_TOKENS.
- elicitation (on unless `elicitation = false`): the question is asked on the terminal when
  stdin and stderr are terminals, one at a time; otherwise it is declined, never guessed.

The callbacks run on the MCP background loop; blocking work (the engine call, the terminal)
runs in a worker thread. While a person is being asked, the call's own timeout is paused.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_SAMPLING_TOKENS = 4096
MAX_SAMPLING_MESSAGES = 100
MAX_SAMPLING_CHARS = 200_000  # text over the whole request, system prompt included
MAX_SAMPLING_IMAGES = 8
MAX_SAMPLING_PER_MINUTE = 30  # sampling requests answered per server and minute
MAX_ELICIT_FIELDS = 20
MAX_ELICIT_CHOICES = 100
MAX_QUESTION_CHARS = 2000  # of a server's question shown on the terminal
MAX_LABEL_CHARS = 200
MAX_ANSWER_SECONDS = 600.0  # how long a call waits for the person answering a question

_engine: Any = None
_model: str = ""
_ask_lock = threading.Lock()


def set_sampling_engine(engine: Any, model: str = "") -> None:
    """The engine (and model) that answers servers' sampling requests (None: refuse them)."""
    global _engine, _model
    _engine, _model = engine, model or ""


def sampling_engine() -> tuple[Any, str]:
    return _engine, _model


def roots_of(config: Any) -> list[Path]:
    """The workspace folder and every `allowed_dirs` folder of the [tools.NAME] tables."""
    base: Path = config.base_dir
    roots = [base.resolve()]
    for settings in (config.tools.settings or {}).values():
        if not isinstance(settings, dict):
            continue
        dirs = settings.get("allowed_dirs") or ()
        for value in [dirs] if isinstance(dirs, str) else dirs:
            path = (base / str(value)).resolve()
            if path not in roots:
                roots.append(path)
    return roots


def interactive() -> bool:
    """Whether a person can be asked on this terminal."""
    try:
        return sys.stdin.isatty() and sys.stderr.isatty() and not os.environ.get("CI")
    except (AttributeError, ValueError):
        return False


class ClientCallbacks:
    """The SDK callbacks of one server's connection (only the allowed ones are passed)."""

    def __init__(self, server: str, config: Any, roots: list[Path],
                 on_wait: Callable[[bool], None] | None = None) -> None:
        self.server = server
        self.config = config
        self.roots = roots
        self.on_wait = on_wait  # told True/False while a person is asked (pauses the timeout)
        self._sampled: list[float] = []  # monotonic times of recent sampling answers

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `mcp.Client`."""
        out: dict[str, Any] = {}
        if self.config.roots:
            out["list_roots_callback"] = self.list_roots
        if self.config.sampling:
            out["sampling_callback"] = self.sample
        if self.config.elicitation:
            out["elicitation_callback"] = self.elicit
        return out

    # --- roots ---------------------------------------------------------------------------
    async def list_roots(self, context: Any) -> Any:
        from mcp.types import ListRootsResult, Root

        return ListRootsResult(roots=[Root(uri=p.as_uri(), name=p.name or str(p))
                                      for p in self.roots])

    # --- sampling ------------------------------------------------------------------------
    async def sample(self, context: Any, params: Any) -> Any:
        from mcp.types import CreateMessageResult, ErrorData, TextContent

        engine, model = sampling_engine()
        if engine is None:
            return ErrorData(code=-32603, message="jarvis has no engine to answer sampling "
                             "requests right now (sampling works during `jarvis ask` and SDK runs)")
        # Each request is bounded, their number too: a server may ask again and again within
        # one tool call, and every answer is paid for by the user's engine.
        import time

        now = time.monotonic()
        self._sampled = [t for t in self._sampled if now - t < 60.0]
        if len(self._sampled) >= MAX_SAMPLING_PER_MINUTE:
            return ErrorData(code=-32603, message=f"refused: more than "
                             f"{MAX_SAMPLING_PER_MINUTE} sampling requests in a minute from "
                             f"server {self.server!r}")
        try:
            messages = _sampling_messages(params)
        except ValueError as exc:
            return ErrorData(code=-32602, message=str(exc))
        self._sampled.append(now)
        max_tokens = max(1, min(int(params.max_tokens or MAX_SAMPLING_TOKENS), MAX_SAMPLING_TOKENS))
        from jarvis.engine.base import generate_reply

        try:
            result = await asyncio.to_thread(
                generate_reply, engine, messages, model=model or None, max_tokens=max_tokens,
                temperature=params.temperature)
            # Built inside the try too: whatever the engine sent, the server gets an answer or
            # an error, and the session lives on.
            return CreateMessageResult(role="assistant",
                                       content=TextContent(type="text", text=result.content or ""),
                                       model=result.model or model or "jarvis",
                                       stop_reason="endTurn" if result.finish_reason == "stop"
                                       else result.finish_reason)
        except Exception as exc:  # noqa: BLE001 - the server gets the reason, jarvis goes on
            return ErrorData(code=-32603, message=f"the engine failed: {exc}"[:500])

    # --- elicitation ---------------------------------------------------------------------
    async def elicit(self, context: Any, params: Any) -> Any:
        from mcp.types import ElicitResult

        if getattr(params, "mode", "form") != "form" or not interactive():
            return ElicitResult(action="decline")
        schema = getattr(params, "requested_schema", None) or {}
        if self.on_wait is not None:
            self.on_wait(True)
        try:
            answer = await asyncio.to_thread(_ask_on_terminal, self.server, params.message, schema)
        finally:
            if self.on_wait is not None:
                self.on_wait(False)
        if answer is None:
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content=answer)


def _sampling_messages(params: Any) -> list[Any]:
    """The server's sampling request as jarvis Messages (text and images)."""
    from jarvis.core.images import image_or_problem
    from jarvis.core.types import ImageBlock, Message, TextBlock

    if len(params.messages) > MAX_SAMPLING_MESSAGES:
        raise ValueError(f"at most {MAX_SAMPLING_MESSAGES} messages per sampling request")
    out: list[Message] = []
    # What a server may make the engine read: bounded like the messages' count, so one
    # request cannot send megabytes to the engine (and bill them) on the user's account.
    chars = len(params.system_prompt or "")
    images = 0
    if chars > MAX_SAMPLING_CHARS:
        raise ValueError(f"the sampling system prompt has {chars} characters; the limit is "
                         f"{MAX_SAMPLING_CHARS}")
    if params.system_prompt:
        out.append(Message(role="system", content=str(params.system_prompt)))
    for message in params.messages:
        items = message.content if isinstance(message.content, list) else [message.content]
        parts: list[Any] = []
        for item in items:
            kind = getattr(item, "type", None)
            if kind == "text":
                chars += len(item.text)
                if chars > MAX_SAMPLING_CHARS:
                    raise ValueError(f"the sampling request has over {MAX_SAMPLING_CHARS} "
                                     f"characters of text; the limit is {MAX_SAMPLING_CHARS}")
                parts.append(TextBlock(item.text))
            elif kind == "image":
                images += 1
                problem, data, mime = image_or_problem(item.data, item.mime_type)
                if problem is not None:
                    raise ValueError(f"image {images} of the sampling request refused: {problem}")
                if images > MAX_SAMPLING_IMAGES:
                    raise ValueError(f"at most {MAX_SAMPLING_IMAGES} images per sampling request")
                parts.append(ImageBlock(data=data, mimeType=mime))
            else:
                raise ValueError(f"sampling content of type {kind!r} is not supported")
        role = "assistant" if message.role == "assistant" else "user"
        out.append(Message(role=role, parts=parts))
    return out


def _ask_on_terminal(server: str, message: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    """Ask each field of a flat elicitation schema on the terminal; None when declined."""
    import click

    props = schema.get("properties") or {}
    if len(props) > MAX_ELICIT_FIELDS:
        return None
    required = set(schema.get("required") or ())
    from jarvis.core.terminal import visible

    with _ask_lock:
        # The server wrote the question and the labels: their escape sequences are shown, not
        # run (they could rewrite what the person reads), and their length is bounded.
        click.echo(f"\nMCP server {server!r} asks: {visible(message, MAX_QUESTION_CHARS)}",
                   err=True)
        if not click.confirm("Answer?", default=True, err=True):
            return None
        answer: dict[str, Any] = {}
        for name, prop in props.items():
            prop = prop if isinstance(prop, dict) else {}
            label = visible(prop.get("title") or prop.get("description") or name,
                            MAX_LABEL_CHARS, one_line=True)
            kind = prop.get("type")
            if kind == "boolean":
                answer[name] = click.confirm(label, default=bool(prop.get("default", False)),
                                             err=True)
                continue
            click_type: Any = {"integer": int, "number": float}.get(str(kind), str)
            choices: dict[str, str] = {}
            if prop.get("enum"):
                choices = {visible(v, MAX_LABEL_CHARS, one_line=True): str(v)
                           for v in list(prop["enum"])[:MAX_ELICIT_CHOICES]}
                click_type = click.Choice(list(choices))
            default = prop.get("default")
            value = click.prompt(label, type=click_type, err=True,
                                 default=default if default is not None else
                                 (None if name in required else ""),
                                 show_default=(visible(default, MAX_LABEL_CHARS, one_line=True)
                                               if default is not None else False))
            if value == "" and name not in required:
                continue
            answer[name] = choices.get(value, value) if choices else value
        return answer
