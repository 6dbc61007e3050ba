"""Answering a pending approval by replying in the chat: `approve 3f2a` / `deny 3f2a`.

This is the seam for the approvals work (issue 22: parked runs, approval requests, grants),
which does not exist yet. A reply of that form from an allowed, authenticated sender, in its
own words (never from forwarded or quoted content), is recognised here and handed to
`answer_approval`; until approvals exist, that answers that nothing was approved or denied.
When issue 22 lands, `answer_approval` looks the request up in its store, checks that it
belongs to this inbound's conversations, and resumes or drops the parked run.
"""

from __future__ import annotations

import re
from typing import Any

_REPLY = re.compile(r"^\s*(approve|deny)\s+([0-9a-fA-F]{4,32})\s*[.!]?\s*$", re.IGNORECASE)


def approval_reply(text: str) -> tuple[str, str] | None:
    """("approve" | "deny", request id) when `text` is an approval reply, else None."""
    text = text or ""
    if text.startswith("Subject: "):  # an e-mail: the reply is its body, not its subject
        text = text.partition("\n\n")[2]
    match = _REPLY.match(text)
    return (match.group(1).lower(), match.group(2).lower()) if match else None


def answer_approval(config: Any, inbound: str, sender: str, action: str,
                    request_id: str) -> str:
    """Apply an approval reply; returns the text sent back (see the module docstring)."""
    return (f"There is no pending approval {request_id}: approving or denying by reply is not "
            f"available in this version of jarvis, so nothing was {action}d.")
