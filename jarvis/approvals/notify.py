"""Telling the person a run waits for them: `[approvals] notify = "CHANNEL"` sends each request
to that channel (jarvis.channels, with the channel's retries), with the CLI commands that
answer it and, when `jarvis serve` is reachable, a link to its approval page.

What is sent is bounded and inert: where the call goes, how much it sends and its hash, why
a person is needed, and a short preview of the arguments, every terminal escape and control
character shown as text (a request whose arguments hold escapes or a megabyte is shown
safely); the page and `jarvis approvals show ID` have all of it.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from jarvis.approvals.records import Approval

log = logging.getLogger("jarvis.approvals")

PREVIEW_CHARS = 200
PROBE_SECONDS = 1.0


def serve_url(config: Any) -> str:
    """Where the person reaches `jarvis serve`: `[approvals] link_base`, else `[serve]` host and
    port when a jarvis server answers there now (its /health), else "" (no link)."""
    section = getattr(config, "approvals", None)
    base = (getattr(section, "link_base", "") or "").rstrip("/")
    if base:
        return base
    serve = getattr(config, "serve", None)
    if serve is None:
        return ""
    host = serve.host if serve.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{serve.port}"
    import urllib.request

    try:
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url + "/health", timeout=PROBE_SECONDS) as response:
            data = json.loads(response.read(4096))
    except (OSError, ValueError):
        return ""
    return url if isinstance(data, dict) and data.get("status") == "ok" else ""


def link_for(base: str, approval: Approval) -> str:
    """The approval page of one request with a fresh single-use token ("" without a base)."""
    if not base:
        return ""
    from jarvis.approvals.tokens import make_token

    return f"{base}/jarvis/approve/{approval.id}?t={make_token(approval.id, approval.expires_at)}"


def message(approval: Approval, link: str = "") -> tuple[str, str]:
    """(title, body) of the message asking the person about `approval`."""
    from jarvis.core.terminal import visible
    from jarvis.core.types import human_size

    request = approval.request
    tool = visible(approval.tool, 80, one_line=True)
    where = visible(approval.where, 300, one_line=True)
    arguments = json.dumps(request.get("arguments"), ensure_ascii=False, sort_keys=True,
                           default=str)
    preview = visible(arguments, PREVIEW_CHARS, one_line=True)
    if len(arguments) > PREVIEW_CHARS:
        preview += f" ({len(arguments)} characters in all)"
    expires = time.strftime("%Y-%m-%d %H:%M", time.localtime(approval.expires_at))
    lines = [f"{tool} wants to send to: {where}",
             f"it sends {human_size(int(request.get('size') or 0))}, sha256 "
             f"{request.get('digest')}",
             f"why you are asked: {visible(str(request.get('reason') or ''), 400, one_line=True)}",
             f"arguments: {preview}",
             "",
             f"approve: jarvis approvals approve {approval.id}",
             f"deny:    jarvis approvals deny {approval.id}"]
    if link:
        lines.append(f"or open: {link}")
    lines.append(f"(it waits until {expires}; then the run ends as expired)")
    return f"jarvis: approve {tool}? ({approval.id})", "\n".join(lines)


def notify(config: Any, store: Any, approvals: list[Approval]) -> list[dict[str, Any]]:
    """Send each request to `[approvals] notify` and record how it went; never raises (a run
    parked without a message is still listed by `jarvis approvals list`)."""
    channel = getattr(getattr(config, "approvals", None), "notify", "") or ""
    if not channel or not approvals:
        return []
    from jarvis.channels.delivery import deliver

    records = []
    try:
        base = serve_url(config)
    except Exception as exc:  # noqa: BLE001 - a link is a convenience; the message goes anyway
        log.warning("approvals: no link in the message: %s", exc)
        base = ""
    for approval in approvals:
        try:
            title, body = message(approval, link_for(base, approval))
            record = deliver(config, channel, title, body)
        except Exception as exc:  # noqa: BLE001 - a broken channel must not lose the request
            record = {"channel": channel, "status": "failed", "attempts": 0,
                      "error": f"{type(exc).__name__}: {exc}", "at": time.time()}
        record["link"] = bool(base)
        if record.get("status") != "delivered":
            log.warning("approvals: request %s could not be sent to channel %s: %s (it is in "
                        "`jarvis approvals list`)", approval.id, channel, record.get("error"))
        try:
            store.mark_notified(approval.id, record)
        except Exception as exc:  # noqa: BLE001
            log.warning("approvals: could not record the message for %s: %s", approval.id, exc)
        records.append(record)
    return records
