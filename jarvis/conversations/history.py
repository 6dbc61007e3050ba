"""The history a conversation's next run gets: its newest turns within a token budget.

Older turns that do not fit are left out, and the model is told so by a marker in front of the
first turn it does see (`[Earlier in this conversation: 412 turns were left out ...]`); a
single turn larger than the budget is cut in the middle with a marker of its own. So a long
conversation never becomes an engine error for an over-long prompt, and the model never takes
a cut history for the whole one.

Tokens are estimated, not counted (jarvis knows no tokenizer of the engine's model): UTF-8 bytes
over three, which is above the real count for English (about four characters a token) and
about right for text of three-byte characters (one token each), plus a few per message.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jarvis.core.types import Message

MESSAGE_OVERHEAD_TOKENS = 4  # role and separators per message
MARKER_RESERVE_TOKENS = 60  # room kept for the marker itself
MIN_TURN_CHARS = 200  # a cut turn keeps at least this much of each side


def estimate_tokens(text: str | None) -> int:
    """A cautious estimate of how many tokens `text` takes."""
    if not text:
        return 0
    return (len(text.encode("utf-8", "replace")) + 2) // 3


def turn_tokens(query: str, answer: str) -> int:
    return estimate_tokens(query) + estimate_tokens(answer) + 2 * MESSAGE_OVERHEAD_TOKENS


@dataclass(slots=True)
class History:
    """The messages for the next run and what was left out to make them fit."""

    messages: list[Message] = field(default_factory=list)
    kept: int = 0  # turns in `messages`
    dropped: int = 0  # older turns left out
    cut: int = 0  # kept turns that were shortened
    tokens: int = 0  # estimated tokens of `messages`
    budget: int = 0
    marker: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kept_turns": self.kept, "dropped_turns": self.dropped, "cut_turns": self.cut,
                "estimated_tokens": self.tokens, "budget_tokens": self.budget,
                "marker": self.marker or None}


def _shorten(text: str, max_tokens: int) -> str:
    """`text` cut in the middle to about `max_tokens`, saying how much was left out."""
    if estimate_tokens(text) <= max_tokens:
        return text
    keep_bytes = max(max_tokens * 3 - 80, 2 * MIN_TURN_CHARS)
    # Characters, not bytes: a byte budget over-keeps for wide characters, so scale by the
    # text's own bytes per character.
    ratio = max(len(text.encode("utf-8", "replace")) / max(len(text), 1), 1.0)
    keep = max(int(keep_bytes / ratio), 2 * MIN_TURN_CHARS)
    head, tail = text[: keep // 2], text[-(keep // 2):]
    left_out = len(text) - len(head) - len(tail)
    return f"{head}\n[... {left_out} characters of this turn left out to fit the context ...]\n{tail}"


def assemble(turns_newest_first: Iterable[Any], budget_tokens: int,
             total_turns: int | None = None) -> History:
    """History messages (oldest first) from turns given newest first, within `budget_tokens`.

    Each turn is a user message (its query) and an assistant message (its answer). The newest
    turn is always kept, shortened if it alone is over the budget; older ones are kept while
    they fit, then everything older is left out and counted in the marker.
    """
    budget = max(int(budget_tokens), 1)
    room = max(budget - MARKER_RESERVE_TOKENS, 1)
    kept: list[tuple[str, str]] = []
    used = 0
    cut = 0
    seen = 0
    oldest_kept_position = None
    for turn in turns_newest_first:
        seen += 1
        query, answer = turn.query or "", turn.answer or ""
        cost = turn_tokens(query, answer)
        if used + cost > room:
            if kept:
                break  # this one and everything older is left out
            # The newest turn alone is over the budget: keep a shortened copy of it.
            half = max((room - 2 * MESSAGE_OVERHEAD_TOKENS) // 2, 1)
            q_share = min(estimate_tokens(query), half)
            query = _shorten(query, q_share)
            answer = _shorten(answer, room - 2 * MESSAGE_OVERHEAD_TOKENS - estimate_tokens(query))
            cost = turn_tokens(query, answer)
            cut += 1
        kept.append((query, answer))
        used += cost
        oldest_kept_position = getattr(turn, "position", None)
    if total_turns is None:
        # The caller did not count: all turns were walked unless the loop stopped early.
        total_turns = seen if len(kept) == seen else (oldest_kept_position or seen) - 1 + len(kept)
    dropped = max(total_turns - len(kept), 0)
    history = History(kept=len(kept), dropped=dropped, cut=cut, budget=budget)
    kept.reverse()
    if dropped:
        noun = "turn was" if dropped == 1 else "turns were"
        history.marker = (f"[Earlier in this conversation: {dropped} {noun} left out to stay "
                          f"within the context budget; only the {len(kept)} most recent "
                          f"follow.]")
    for index, (query, answer) in enumerate(kept):
        if index == 0 and history.marker:
            # In front of the first user message, not a message of its own: some chat
            # templates require user and assistant turns to alternate.
            query = f"{history.marker}\n\n{query}"
        history.messages.append(Message(role="user", content=query))
        history.messages.append(Message(role="assistant", content=answer))
    history.tokens = sum(estimate_tokens(m.content) + MESSAGE_OVERHEAD_TOKENS
                         for m in history.messages)
    return history
