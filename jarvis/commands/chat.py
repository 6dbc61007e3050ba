"""`jarvis chat`: a conversation at the terminal.

Each line is the next turn of one conversation (kept like `jarvis ask`'s, so `jarvis ask -c`
and `jarvis conversations` see it). Answers stream to stdout, tool activity goes to stderr.
Line editing and the history of earlier lines (up arrow) come from readline on a terminal,
kept in JARVIS_HOME/chat_history. Ctrl-C stops the answer being written, not the session;
Ctrl-D (or /exit) leaves.
"""

from __future__ import annotations

import queue
import sys
import threading
from pathlib import Path
from typing import Any

import click

from jarvis.commands._common import TerminalPerson, terminal_approver, terminal_egress_approver
from jarvis.commands.ask import _isatty, _Lines, _show_events, _Status, _Stdout
from jarvis.core.terminal import visible

HISTORY_LINES = 1000
MAX_LINE_CHARS = 100_000
HELP = """commands:
  /tools          the tools of this session
  /clear          start a new conversation (the history so far is not sent any more)
  /save [FILE]    write this conversation to FILE as Markdown
  /exit           leave (or Ctrl-D)
Ctrl-C stops the answer being written; the session goes on."""


class _Session:
    """One chat session: the Jarvis, the options of every turn, the current conversation."""

    def __init__(self, j: Any, record: Any, options: dict[str, Any]) -> None:
        self.j = j
        self.record = record
        self.options = options
        # The one person at this terminal (its "always" answers last the session).
        self.person = TerminalPerson(interrupt_stops=True)

    def turn(self, line: str, stdout: _Stdout, status: _Status) -> None:
        """Ask `line` as the next turn; Ctrl-C stops it (KeyboardInterrupt is handled here)."""
        from jarvis.conversations import ask_in_conversation

        pieces: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        cancel = threading.Event()
        new = None if self.record is not None else {
            "source": "chat", "agent": self.options.get("agent"),
            "tools": _names(self.options.get("tools"))}

        # The person is asked on this (the main) thread, which owns the terminal: a Ctrl-C
        # during a question stops the answer like any other, and no orphaned question is left
        # reading the next line the person types.
        options = dict(self.options)
        for key in ("approver", "egress_approver"):
            if isinstance(options.get(key), TerminalPerson):
                options[key] = _AskOnMainThread(self.person, pieces, cancel)

        def work() -> None:
            try:
                result = ask_in_conversation(
                    self.j, self.record, line, new=new, cancel=cancel,
                    on_token=lambda piece: pieces.put(("piece", piece)), **options)
            except BaseException as exc:  # noqa: BLE001 (shown by the main thread)
                pieces.put(("error", exc))
            else:
                pieces.put(("done", result))

        worker = threading.Thread(target=work, name="jarvis-chat-turn", daemon=True)
        try:
            # Inside the try: a Ctrl-C that comes while the thread starts stops this answer too.
            worker.start()
            while True:
                try:
                    kind, value = pieces.get(timeout=0.1)
                except queue.Empty:
                    continue
                if kind == "piece":
                    stdout(value)
                elif kind == "ask":
                    ask, arguments, answer = value
                    status.clear()
                    stdout.finish()
                    try:
                        answer.put(bool(ask(*arguments)))
                    except BaseException:  # Ctrl-C while asked: no, and the answer stops
                        answer.put(False)
                        raise
                elif kind == "error":
                    status.clear()
                    stdout.finish()
                    self._failed(value)
                    return
                else:
                    status.clear()
                    self._answered(value, stdout)
                    return
        except KeyboardInterrupt:
            cancel.set()
            status.clear()
            stdout.finish()
            click.echo("[stopped]", err=True)
            # The run stops at its next boundary; an engine call under way finishes first, in
            # the background. Its answer is not kept (the conversation ignores a cancelled run).
            worker.join(timeout=1.0)

    def _answered(self, result: dict[str, Any], stdout: _Stdout) -> None:
        from jarvis.commands._common import shown_data

        if stdout.wrote:
            stdout.finish()
        elif result.get("content"):
            click.echo(shown_data(result["content"]))
        meta = result.get("metadata") or {}
        if meta.get("max_turns_exceeded"):
            click.echo("[stopped at max_turns without a final answer]", err=True)
        elif meta.get("loop_detected"):
            click.echo("[stopped: the model kept repeating the same tool call]", err=True)
        if self.record is None or self.record.id != result.get("conversation_id"):
            from jarvis.conversations import open_conversations

            with open_conversations(self.j.config) as store:
                self.record = store.get(result["conversation_id"])
        else:
            self.record.turns += 1

    @staticmethod
    def _failed(exc: BaseException) -> None:
        from jarvis.errors import JarvisError, RunCancelled

        if isinstance(exc, RunCancelled):
            click.echo("[stopped]", err=True)
        elif isinstance(exc, JarvisError):
            click.echo(f"Error: {exc}", err=True)
        elif isinstance(exc, KeyboardInterrupt):
            click.echo("[stopped]", err=True)
        else:
            click.echo(f"Error: {type(exc).__name__}: {exc}", err=True)

    # --- slash commands ----------------------------------------------------------------------
    def command(self, line: str) -> bool:
        """Run a slash command; False when the session should end."""
        name, _, arg = line[1:].strip().partition(" ")
        name = name.lower()
        if name in ("exit", "quit"):
            return False
        if name == "help":
            click.echo(HELP, err=True)
        elif name == "tools":
            self._tools()
        elif name == "clear":
            self.record = None
            click.echo("new conversation: earlier turns will not be sent", err=True)
        elif name == "save":
            self._save(arg.strip())
        else:
            click.echo(f"unknown command /{visible(name, 40, one_line=True)}; /help lists them",
                       err=True)
        return True

    def _tools(self) -> None:
        names = _names(self.options.get("tools"))
        if names is None and self.record is not None and self.record.tools:
            names = list(self.record.tools)
        if names is None:
            names = list(self.j.config.agent.tools)
        if not names:
            click.echo("no tools in this session (start it with --tools a,b)", err=True)
            return
        try:
            tools = self.j.build_tools(names)
        except Exception as exc:  # an unknown name: say so, the session goes on
            click.echo(f"Error: {exc}", err=True)
            return
        for tool in tools:
            first = (tool.spec.description or "").strip().splitlines()[:1]
            click.echo(visible(f"{tool.spec.name}: {first[0] if first else ''}", 200,
                               one_line=True), err=True)

    def _save(self, target: str) -> None:
        from jarvis.conversations import open_conversations

        if self.record is None:
            click.echo("nothing to save yet: this conversation has no turns", err=True)
            return
        path = Path(target or f"jarvis-conversation-{self.record.id}.md").expanduser()
        with open_conversations(self.j.config) as store:
            turns = store.turns(self.record.id)
        lines = [f"# Conversation {self.record.id}", ""]
        for turn in turns:
            lines += [f"## You ({turn.position})", "", turn.query, "", "## jarvis", "",
                      turn.answer, ""]
        try:
            path.write_text("\n".join(lines), encoding="utf-8")
        except OSError as exc:
            click.echo(f"Error: cannot write {path}: {exc.strerror or exc}", err=True)
            return
        click.echo(f"saved {len(turns)} turns to {path}", err=True)


class _AskOnMainThread:
    """A TerminalPerson whose questions a turn's worker thread hands to the main thread (the
    `pieces` queue) and waits for; a stopped turn is answered no."""

    covers_confirmation = True  # as the person's: the question shows the whole call

    def __init__(self, person: TerminalPerson, pieces: queue.SimpleQueue[tuple[str, Any]],
                 cancel: threading.Event) -> None:
        self.person = person
        self.pieces = pieces
        self.cancel = cancel

    def _ask(self, ask: Any, *arguments: Any) -> bool:
        answer: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self.pieces.put(("ask", (ask, arguments, answer)))
        while True:
            try:
                return answer.get(timeout=0.1)
            except queue.Empty:
                if self.cancel.is_set():
                    return False

    def __call__(self, spec: Any, arguments: dict[str, Any]) -> bool:
        return self._ask(self.person, spec, arguments)

    def approve_request(self, request: Any) -> bool:
        return self._ask(self.person.approve_request, request)


def _names(tools: Any) -> list[str] | None:
    if tools is None:
        return None
    if isinstance(tools, str):
        return [t.strip() for t in tools.split(",") if t.strip()]
    return list(tools)


def _readline() -> tuple[Any, Path | None]:
    """readline with this user's chat history loaded, and the history file ((None, None) when
    stdin is not a terminal)."""
    if not _isatty(sys.stdin):
        return None, None
    try:
        import readline
    except ImportError:  # a Python built without it: plain input() still works
        return None, None
    from jarvis.core.paths import jarvis_home

    path = jarvis_home(create=True) / "chat_history"
    readline.set_history_length(HISTORY_LINES)
    try:
        readline.read_history_file(str(path))
    except (OSError, ValueError):
        pass  # none yet, or unreadable: start empty
    return readline, path


def _save_history(readline: Any, path: Path | None) -> None:
    if readline is not None and path is not None:
        try:
            readline.write_history_file(str(path))
        except OSError:
            pass  # a read-only home: the session still worked


@click.command()
@click.option("-a", "--agent", help="simple, react, orchestrator or a workspace agent.")
@click.option("--tools", "tools", help="Comma-separated tool names for every turn.")
@click.option("-m", "--model", help="Model name.")
@click.option("-e", "--engine", help="ollama, vllm, llamacpp, lmstudio, sglang or openai.")
@click.option("--host", help="The engine's address.")
@click.option("-s", "--system", help="System prompt.")
@click.option("-y", "--yes", is_flag=True, help="Approve tools that require confirmation.")
@click.option("--no-context", is_flag=True, help="Do not add relevant memory to the prompt.")
@click.option("-c", "--continue", "continue_last", is_flag=True,
              help="Continue the last conversation.")
@click.option("--conversation", "conversation_id", metavar="ID",
              help="Continue conversation ID.")
@click.pass_context
def chat(ctx: click.Context, agent: str | None, tools: str | None, model: str | None,
         engine: str | None, host: str | None, system: str | None, yes: bool,
         no_context: bool, continue_last: bool, conversation_id: str | None) -> None:
    """Talk with jarvis: each line you type is the next turn of one conversation.

    Answers stream to stdout, tool activity goes to stderr. /help lists the commands (/tools,
    /clear, /save, /exit); Ctrl-C stops an answer, Ctrl-D leaves.

    \b
    Examples:
      jarvis chat
      jarvis chat --tools calculator,think
      jarvis chat -c                 # go on with the last conversation
    """
    from jarvis.commands.conversations import chosen_conversation
    from jarvis.sdk import Jarvis

    config_path = (ctx.obj or {}).get("config_path")
    status = _Status()
    with Jarvis(config_path=config_path, engine=engine, model=model, host=host,
                default_client="http") as j:
        record = chosen_conversation(j.config, continue_last, conversation_id)
        # Tool and trust lines start on a line of their own, after the turn's streamed text.
        lines = _Lines(status, _Stdout(status))
        _show_events(j.bus, status, j, lines)
        options = {"agent": agent, "tools": tools, "system": system,
                   "approver": terminal_approver(yes), "source": "chat",
                   "egress_approver": terminal_egress_approver(),
                   "context": False if no_context else None}
        if record is not None:
            options["agent"] = agent or record.agent
            options["tools"] = tools if tools is not None else record.tools
        session = _Session(j, record, options)
        readline, history_path = _readline()
        interactive = readline is not None or _isatty(sys.stdin)
        where = f"conversation {record.id} ({record.turns} turns)" if record else "new conversation"
        click.echo(f"jarvis chat: {where}. /help for commands, Ctrl-D to leave.", err=True)
        try:
            while True:
                try:
                    line = input("> " if interactive else "")
                except EOFError:
                    if interactive:
                        click.echo("", err=True)
                    break
                except KeyboardInterrupt:
                    click.echo("", err=True)  # a new prompt, as in a shell
                    continue
                line = line.strip()
                if not line:
                    continue
                if len(line) > MAX_LINE_CHARS:
                    click.echo(f"Error: that line is {len(line)} characters; the limit is "
                               f"{MAX_LINE_CHARS}", err=True)
                    continue
                if line.startswith("/"):
                    if not session.command(line):
                        break
                    continue
                try:
                    lines.stdout = _Stdout(status)
                    session.turn(line, lines.stdout, status)
                except KeyboardInterrupt:  # a second Ctrl-C while the first was handled
                    click.echo("[stopped]", err=True)
        finally:
            _save_history(readline, history_path)
