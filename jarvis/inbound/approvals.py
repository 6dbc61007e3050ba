"""Answering a pending approval by replying in the chat: `approve 3f2a` / `deny 3f2a`.

A reply of that form from an allowed, authenticated sender, in its own words (never from
forwarded, quoted or attached content: the listener only looks at a message without any), is
an answer to a pending approval request (jarvis.approvals, docs/approvals.md): it is
recorded as the person's decision, by `inbound NAME: SENDER`, exactly as `jarvis approvals
approve|deny ID` would. The run waiting on it continues where it stopped (a scheduled task's
within a tick of the scheduler; a message's own run in the listener, its answer sent where the
message came from; an SDK run when its caller resumes it). The reply says what
was decided, or why nothing was (an unknown or ambiguous id, answered already, expired).
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
    """Record the person's answer to approval `request_id`; returns the text sent back."""
    from jarvis.approvals import decide
    from jarvis.core.terminal import visible
    from jarvis.errors import JarvisError

    approve = action == "approve"
    try:
        approval = decide(request_id, approve, by=f"inbound {inbound}: {sender}",
                          config=config, created_by="chat")
    except JarvisError as exc:  # unknown or ambiguous id, answered already, expired
        done = "approved" if approve else "denied"
        return f"Nothing was {done}: {visible(str(exc), 400, one_line=True)}"
    what = visible(f"{approval.tool} -> {approval.where}", 300, one_line=True)
    if not approve:
        return f"Denied {approval.id}: {what}. The run is told the call was refused."
    from jarvis.approvals import next_step

    return f"Approved {approval.id}: {what}; {next_step(config, approval)}."

