"""Conversations: runs that share history, kept beside the run log.

- `ConversationStore` (store.py): conversations and their turns in SQLite.
- `assemble` (history.py): the newest turns within a token budget, with a marker for what
  was left out.
- `Provenance` (provenance.py): the trust state a conversation carries from turn to turn.
- `ask_in_conversation`, `Conversation` (session.py): asking as the next turn.
"""

from jarvis.conversations.history import History, assemble, estimate_tokens
from jarvis.conversations.provenance import Provenance
from jarvis.conversations.session import Conversation, ask_in_conversation
from jarvis.conversations.store import (
    ConversationRecord,
    ConversationStore,
    Turn,
    open_conversations,
)

__all__ = [
    "Conversation",
    "ConversationRecord",
    "ConversationStore",
    "History",
    "Provenance",
    "Turn",
    "ask_in_conversation",
    "assemble",
    "estimate_tokens",
    "open_conversations",
]
