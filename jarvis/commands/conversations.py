"""`jarvis conversations`: list, show and delete conversations (runs that share history), and
the conversation `jarvis ask` and `jarvis chat` continue."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from jarvis.commands._common import echo_json, load_cli_config, one_line
from jarvis.core.terminal import visible


def _store() -> Any:
    from jarvis.conversations import open_conversations

    return open_conversations(load_cli_config())


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def chosen_conversation(config: Any, continue_last: bool, conversation_id: str | None) -> Any:
    """The conversation `-c` / `--conversation ID` names (a ConversationRecord), or None."""
    if continue_last and conversation_id:
        raise click.UsageError("pass -c/--continue or --conversation ID, not both")
    if not (continue_last or conversation_id):
        return None
    from jarvis.conversations import open_conversations
    from jarvis.errors import UserError

    with open_conversations(config) as store:
        if conversation_id:
            return store.get(conversation_id)
        record = store.latest()
        if record is None:
            raise UserError("there is no conversation to continue yet: ask something first "
                            "(`jarvis ask QUESTION` or `jarvis chat` starts one)")
        return record


def asker(j: Any, record: Any, *, source: str, agent: str | None = None,
          tools: str | None = None) -> Callable[..., dict[str, Any]]:
    """What `jarvis ask` calls: the next turn of `record`, or the first turn of a new
    conversation (kept only while the run log is on: `[runs] enabled = false` keeps nothing)."""
    from jarvis.conversations import ask_in_conversation

    if record is not None:
        def next_turn(query: str, **options: Any) -> dict[str, Any]:
            # A continued conversation keeps its agent and tools unless new ones are given.
            if options.get("tools") is None and record.tools is not None:
                options["tools"] = record.tools
            if options.get("agent") is None and record.agent:
                options["agent"] = record.agent
            return ask_in_conversation(j, record, query, **options)

        return next_turn
    if j.runlog is None:
        return j.ask_full
    names = [n.strip() for n in tools.split(",") if n.strip()] if tools else None
    new = {"source": source, "agent": agent, "tools": names}
    return lambda query, **options: ask_in_conversation(j, None, query, new=new, **options)


@click.group()
def conversations() -> None:
    """List, show and delete conversations (`jarvis ask -c` and `jarvis chat` continue them)."""


@conversations.command("list")
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="How many of the most recent conversations to show.")
@click.option("--source", help="Only conversations started here (cli, chat, sdk, telegram:NAME, "
              "email:NAME).")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
def list_conversations(limit: int, source: str | None, as_json: bool) -> None:
    """List conversations, the most recently used first: id, last used, turns, source,
    provenance, title."""
    from jarvis.conversations import Provenance

    with _store() as store:
        records = store.list(limit=limit, source=source)
    if as_json:
        echo_json([r.to_dict() for r in records])
        return
    if not records:
        click.echo("no conversations yet (`jarvis ask` and `jarvis chat` start them)", err=True)
        return
    header = ("ID", "LAST USED", "TURNS", "SOURCE", "TRUST", "TITLE")
    rows = [header] + [
        (r.id, _when(r.updated_at), str(r.turns), r.source or "-",
         "tainted" if Provenance(r.trust).tainted else "clean", one_line(r.title or "", 60))
        for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        cells = [c.rjust(w) if i == 2 else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=False))]
        click.echo(visible("  ".join(cells + [row[-1]]).rstrip()))


@conversations.command("show")
@click.argument("conversation_id")
@click.option("-n", "--last", "last", type=click.IntRange(1, 1_000_000), default=None,
              help="Only the newest N turns.")
@click.option("--json", "as_json", is_flag=True, help="Print the conversation and its turns as "
              "JSON.")
def show_conversation(conversation_id: str, last: int | None, as_json: bool) -> None:
    """Show one conversation (an id prefix is enough): its turns, their runs, its provenance."""
    from jarvis.conversations import Provenance

    with _store() as store:
        record = store.get(conversation_id)
        turns = store.turns(record.id, limit=last)
    if as_json:
        echo_json(dict(record.to_dict(), turn_list=[t.to_dict() for t in turns]))
        return

    def echo(text: str) -> None:
        click.echo(visible(text))  # models, senders and tools wrote most of it

    echo(f"conversation {record.id}  ({record.turns} turns, source {record.source or '-'})")
    echo(f"started: {_when(record.created_at)}   last used: {_when(record.updated_at)}")
    if record.agent or record.tools:
        echo(f"agent:   {record.agent or '-'}   tools: {', '.join(record.tools or []) or '-'}")
    echo(f"trust:   {Provenance(record.trust).summary()}")
    if last is not None and record.turns > len(turns):
        echo(f"[{record.turns - len(turns)} earlier turns not shown]")
    for turn in turns:
        echo(f"\n#{turn.position}  {_when(turn.created_at)}  run {turn.run_id or '-'}")
        echo(f"you:    {turn.query}")
        if turn.person_text is not None and turn.person_text != turn.query:
            echo(f"        (the sender's own words: {one_line(turn.person_text, 200)})")
        echo(f"jarvis: {turn.answer}")


@conversations.command("delete")
@click.argument("conversation_id")
@click.option("--json", "as_json", is_flag=True, help="Print the deleted conversation as JSON.")
def delete_conversation(conversation_id: str, as_json: bool) -> None:
    """Delete a conversation and its turns (an id prefix is enough); its runs stay in the run
    log (`jarvis runs`)."""
    with _store() as store:
        record = store.delete(conversation_id)
    if as_json:
        echo_json(dict(record.to_dict(), deleted=True))
    else:
        click.echo(f"deleted conversation {record.id} ({record.turns} turns)")
