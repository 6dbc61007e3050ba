"""Inbound channels: messages in from Telegram and e-mail, each one a run in its sender's
conversation, answered in the same chat or thread, exactly once (see docs/inbound.md).

- `Listener`, `start_listeners` (listener.py): what `jarvis listen` and the scheduler run.
- `InboundLedger` (ledger.py): claims, leases and fencing epochs in the scheduler's ledger.
- `TelegramChannel` (telegram.py), `MailChannel` (mail.py, mailread.py): the channels.
- `InboundMessage` (message.py): the sender's words and what else a message carried.
- `approval_reply`, `answer_approval` (approvals.py): the seam for answering approvals by reply.
"""

from jarvis.inbound.ledger import Fenced, InboundClaim, InboundLedger
from jarvis.inbound.listener import Listener, open_ledger, start_listeners
from jarvis.inbound.message import InboundMessage, Untrusted, build_prompt

__all__ = [
    "Fenced",
    "InboundClaim",
    "InboundLedger",
    "InboundMessage",
    "Listener",
    "Untrusted",
    "build_prompt",
    "open_ledger",
    "start_listeners",
]
