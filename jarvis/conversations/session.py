"""Asking inside a conversation: history in, the new turn out.

    with Jarvis() as j:
        with j.conversation() as c:
            c.ask_full("My name is Ada.")
            print(c.ask("What is my name?"))
        j.ask_full("And now?", conversation=c.id)      # the same conversation, later

`ask_in_conversation` is what `Jarvis.ask_full(conversation=...)`, `jarvis ask -c`, `jarvis
chat` and the inbound listeners share: it builds the history within the budget, starts the run
from the conversation's provenance, and records the turn and the grown provenance once the
run has answered. A run that fails or is cancelled adds no turn.
"""

from __future__ import annotations

from typing import Any

from jarvis.conversations.history import History, assemble
from jarvis.conversations.provenance import Provenance
from jarvis.conversations.store import ConversationRecord, ConversationStore, open_conversations
from jarvis.errors import JarvisError, UserError

DEFAULT_HISTORY_TOKENS = 8_000


def history_budget(config: Any) -> int:
    section = getattr(config, "conversations", None)
    return int(getattr(section, "history_tokens", DEFAULT_HISTORY_TOKENS))


def ask_in_conversation(jarvis: Any, conversation: str | ConversationRecord | None, query: str,
                        *, new: dict[str, Any] | None = None, person_text: str | None = None,
                        taints: list[str] | tuple[str, ...] = (),
                        store: ConversationStore | None = None,
                        **ask_options: Any) -> dict[str, Any]:
    """Answer `query` as the next turn of `conversation` (an id, an id prefix or a record).

    Args:
        conversation: the conversation to continue; None with `new` starts one, recorded only
            when the run answers (a failed first question leaves nothing behind).
        new: for a new conversation: its source, key, agent, tools, metadata.
        person_text: the person's own words in `query` when they are not all of it (an
            inbound message's forwarded or attached parts are not); default: the query.
        taints: why this turn is untrusted before any tool runs (e.g. "a forwarded mail");
            the conversation stays tainted from here on.
        ask_options: the rest of ask_full's arguments (not `history`: the conversation's is
            used).

    The result is ask_full's, with `conversation_id` and `metadata["conversation"]` (its id,
    the turn's position, and what the history kept and left out).
    """
    if ask_options.get("history") is not None:
        raise UserError("pass either history= or conversation=, not both: a conversation "
                        "brings its own history")
    ask_options.pop("history", None)
    if conversation is None and new is None:
        raise UserError("no conversation given")
    own_store = store is None
    store = store if store is not None else open_conversations(jarvis.config)
    try:
        # Read afresh even when given a record: its turns and provenance may have grown since
        # (the previous turn of a chat session, another process).
        if isinstance(conversation, ConversationRecord):
            conversation = conversation.id
        record = store.get(conversation) if conversation is not None else None
        history = History(budget=history_budget(jarvis.config))
        if record is not None and record.turns:
            history = assemble(store.newest_turns(record.id), history_budget(jarvis.config),
                               total_turns=record.turns)
        provenance = Provenance(record.trust if record is not None else None)
        for reason in taints:
            provenance.mark_tainted(reason)
        provenance.add_person_text(person_text if person_text is not None else query)
        options = provenance.run_options(jarvis)
        metadata = dict(ask_options.pop("run_metadata", None) or {})
        info = {"id": record.id if record is not None else None,
                "turn": (record.turns if record is not None else 0) + 1,
                "history": history.to_dict(), "provenance": provenance.summary()}
        metadata["conversation"] = info
        for key, value in options.items():
            if ask_options.get(key) is not None:
                raise UserError(f"pass {key}= or conversation=, not both: a conversation "
                                f"brings its own")
            ask_options[key] = value
        result = jarvis.ask_full(query, history=history.messages or None, run_metadata=metadata,
                                 **ask_options)
        cancel = ask_options.get("cancel")
        if cancel is not None and cancel.is_set():
            # The caller stopped this answer (Ctrl-C in `jarvis chat`) though it came in whole:
            # it is not part of the conversation.
            from jarvis.errors import RunCancelled

            raise RunCancelled("the answer was stopped; it is not kept in the conversation")
        provenance.after(result, options)
        try:
            if record is None:
                assert new is not None
                record = store.create(source=new.get("source"), key=new.get("key"),
                                      agent=new.get("agent"), tools=new.get("tools"),
                                      metadata=new.get("metadata"))
            turn = store.add_turn(record.id, query=query, answer=result.get("content") or "",
                                  run_id=result.get("run_id"), person_text=person_text,
                                  trust=provenance.to_dict(),
                                  metadata={"history": history.to_dict()})
        except JarvisError as exc:
            # The answer is paid for: keep it, and say the turn was not kept.
            import logging

            result.setdefault("metadata", {})["conversation_error"] = str(exc)
            logging.getLogger("jarvis").warning("jarvis: warning: the conversation was not "
                                                "kept: %s", exc)
            return result
        info.update(id=record.id, turn=turn.position, provenance=provenance.summary())
        result.setdefault("metadata", {})["conversation"] = info
        result["conversation_id"] = record.id
        return result
    finally:
        if own_store:
            store.close()


def answer_parked_turn(jarvis: Any, out: dict[str, Any], trust: Any = None) -> str | None:
    """A run that parked in a conversation (its turn was kept without its answer) and was
    continued: its turn gets the continuation's answer, and the conversation the trust the
    run grew (`trust`: its RunTrust state, else what `out` says). Returns the conversation's
    id, or None (not a conversation's run, or it parked again)."""
    run_id = out.get("run_id")
    if (not run_id or out.get("status") == "parked"
            or "conversation" not in (out.get("metadata") or {})):
        return None
    provenance = Provenance(None)
    provenance.after(out, {"trust": trust} if trust is not None else None)
    with open_conversations(jarvis.config) as store:
        found = store.answer_turn(str(run_id), out.get("content") or "", provenance.to_dict())
    if found is not None:
        out["conversation_id"] = found
    return found


class Conversation:
    """A conversation bound to a Jarvis: `ask`/`ask_full` continue it (see ask_full for the
    arguments; `defaults` given here apply to every turn)."""

    def __init__(self, jarvis: Any, conversation_id: str | None = None, **defaults: Any) -> None:
        self._jarvis = jarvis
        self._defaults = defaults
        self._store = open_conversations(jarvis.config)
        if conversation_id is None:
            source = defaults.pop("source", "sdk")
            tools = defaults.get("tools")
            self._record = self._store.create(
                source=source, agent=defaults.get("agent"),
                tools=list(tools) if isinstance(tools, (list, tuple)) else
                ([t.strip() for t in tools.split(",") if t.strip()] if isinstance(tools, str)
                 else None))
        else:
            self._record = self._store.get(conversation_id)
        self._defaults.setdefault("source", self._record.source or "sdk")

    @property
    def id(self) -> str:
        return self._record.id

    def ask_full(self, query: str, **options: Any) -> dict[str, Any]:
        result = ask_in_conversation(self._jarvis, self._record.id, query, store=self._store,
                                     **{**self._defaults, **options})
        self._record = self._store.get(self._record.id)
        return result

    def ask(self, query: str, **options: Any) -> str:
        return self.ask_full(query, **options)["content"]

    @property
    def turns(self) -> list[Any]:
        """The turns so far, oldest first."""
        return self._store.turns(self._record.id)

    @property
    def provenance(self) -> dict[str, Any]:
        """The conversation's trust state (what tainted it, the person's words)."""
        return Provenance(self._store.get(self._record.id).trust).to_dict()

    def close(self) -> None:
        self._store.close()

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
