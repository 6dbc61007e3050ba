"""Grants: the person lets one tool send to one host, channel or MCP server without asking.

Made only by the person: `jarvis grants add TOOL --host H | --channel C | --server S
[--task ID] [--expires 30d]`, "always" at the terminal prompt of `jarvis ask`, or by choice
on the approval page (and `"always": true` on the owner's HTTP API, `decide(..., grant=True)`
for a chat front end). No tool writes them. The executor reads them as person-written rules
of each run (jarvis.approvals.parking.add_grants), so the calls they cover never ask.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

from jarvis.approvals.records import GRANT_KINDS, Grant
from jarvis.errors import UserError

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?(:\d{1,5})?|\[[0-9a-f:.]+\](:\d{1,5})?")
# Which grant kind covers which egress kind (jarvis.trust.labels.Egress.kind).
FOR_EGRESS = {"network": "host", "channel": "channel", "mcp": "server"}
MAX_EXPIRES = 3660 * 86400.0


def make_grant(tool: str, kind: str, value: str, *, task_id: str | None = None,
               expires: str | float | None = None, created_by: str = "cli") -> Grant:
    """A new grant, checked: UserError naming what is wrong."""
    tool = str(tool or "").strip()
    if not _NAME.fullmatch(tool):
        raise UserError(f"{tool[:80]!r} is not a tool name (`jarvis tools list` shows them)")
    if kind not in GRANT_KINDS:
        raise UserError(f"a grant is for a host, a channel or an MCP server, not {kind!r}")
    value = str(value or "").strip()
    if kind == "host":
        value = value.lower()
        if not _HOST.fullmatch(value) or value.startswith("*.") and value.count(".") < 2:
            raise UserError(f"--host {value[:80]!r} is not a host: give example.com, "
                            f"example.com:8443 or *.example.com (its subdomains)")
    elif not _NAME.fullmatch(value):
        raise UserError(f"--{kind} {value[:80]!r} is not a {kind} name")
    if task_id is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", str(task_id)):
        raise UserError(f"--task {str(task_id)[:80]!r} is not a task id")
    until = None
    if expires not in (None, ""):
        from jarvis.core.durations import parse_duration

        try:
            seconds = parse_duration(expires)
        except ValueError as exc:
            raise UserError(f"--expires: {exc}") from None
        if not 60 <= seconds <= MAX_EXPIRES:
            raise UserError("--expires must be between 1 minute and 10 years")
        until = time.time() + seconds
    return Grant(id=secrets.token_hex(4), tool=tool, kind=kind, value=value, task_id=task_id,
                 expires_at=until, created_by=created_by)


def grants_for_request(request: dict[str, Any], *, task_id: str | None = None,
                       created_by: str) -> list[Grant]:
    """One grant per destination of an approval request (ApprovalRequest.to_dict()): what
    "always" means for it. UserError when a destination is nothing a grant can name (an
    undeclared tool's "anywhere", a scheduled task, memory)."""
    tool = str(request.get("tool") or "")
    grants = []
    for destination in request.get("destinations") or []:
        kind = FOR_EGRESS.get(str(destination.get("kind")))
        if kind is None:
            raise UserError(f"{tool} sends to {destination.get('kind')} "
                            f"{destination.get('destination')!r}, which a grant cannot name; "
                            f"approve this call alone")
        grant = make_grant(tool, kind, str(destination.get("destination") or ""),
                           task_id=task_id, created_by=created_by)
        if all((g.kind, g.value) != (grant.kind, grant.value) for g in grants):
            grants.append(grant)
    if not grants:
        raise UserError(f"this call of {tool} names no host, channel or MCP server a grant "
                        f"could cover; approve it alone")
    return grants


def grantable(request: dict[str, Any]) -> bool:
    """Whether "always" can be offered for a request (every destination has a grant kind)."""
    destinations = request.get("destinations") or []
    return bool(destinations) and all(FOR_EGRESS.get(str(d.get("kind"))) for d in destinations)
