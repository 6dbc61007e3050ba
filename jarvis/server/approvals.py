"""Approvals on `jarvis serve`: the owner's HTTP API, and the page an approval link opens.

The API is behind serve's key (or owner token), like every route:
    GET  /jarvis/approvals                  pending requests (?status=all: every one)
    GET  /jarvis/approvals/ID               one request, with its arguments
    POST /jarvis/approvals/ID/approve       {"always": false, "reason": null} (both optional)
    POST /jarvis/approvals/ID/deny          {"reason": "..."}

The link page answers to the link's signed token instead (jarvis.approvals.tokens), since a
browser on the person's phone has no owner token:
    GET  /jarvis/approve/ID?t=TOKEN   shows the request and a form; changes nothing
    POST /jarvis/approve/ID           the form: t=TOKEN, decision=approve|deny[, always=1]
A cross-site request cannot answer: the token must be in the POST's form body (the URL alone
is not enough), the request must say it comes from this page (an Origin of this server, and
`Sec-Fetch-Site: same-origin` when the browser sends it), and it must carry the SameSite=Strict
cookie the page set, bound to the token. A token that is forged, expired, for another request
or used before is refused, and so is a GET or any other method that would answer. Every
response forbids caching, framing and sending the link on as a Referer.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from jarvis.server.http import ApiError, JSONAnswer, read_json, require_object

LINK_PREFIX = "/jarvis/approve/"
COOKIE = "jarvis_approve"
MAX_FORM_BYTES = 4096
PAGE_PIECE_CHARS = 200_000
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
}


class ApprovalRoutes:
    """The routes above, over the approvals store `config` chooses."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def routes(self) -> list[Route]:
        return [
            Route("/jarvis/approvals", self.list, methods=["GET"]),
            Route("/jarvis/approvals/{approval_id}", self.show, methods=["GET"]),
            Route("/jarvis/approvals/{approval_id}/approve", self.approve, methods=["POST"]),
            Route("/jarvis/approvals/{approval_id}/deny", self.deny, methods=["POST"]),
            Route(LINK_PREFIX + "{approval_id}", self.page, methods=["GET", "POST", "HEAD",
                                                                    "PUT", "DELETE", "PATCH"]),
        ]

    # --- the store, off the event loop -----------------------------------------------------
    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(self._in_store, fn, *args, **kwargs)

    def _in_store(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        from jarvis.approvals.parking import expire_due
        from jarvis.approvals.stores import open_approvals

        store = open_approvals(self.config)
        try:
            expire_due(self.config, store)
            return fn(store, *args, **kwargs)
        finally:
            store.close()

    async def _get(self, approval_id: str) -> Any:
        from jarvis.errors import UserError

        try:
            return await self._call(lambda store: store.get(approval_id))
        except UserError as exc:
            raise ApiError(404, str(exc)) from None

    # --- the owner's API -------------------------------------------------------------------
    async def list(self, request: Request) -> Response:
        status = request.query_params.get("status", "pending")
        if status not in ("pending", "approved", "denied", "expired", "all"):
            raise ApiError(400, "status is pending, approved, denied, expired or all")
        found = await self._call(lambda store: store.list(None if status == "all" else status))
        return JSONAnswer({"approvals": [a.to_dict() for a in found]})

    async def show(self, request: Request) -> Response:
        approval = await self._get(request.path_params["approval_id"])
        return JSONAnswer(approval.to_dict(full=True))

    async def approve(self, request: Request) -> Response:
        return await self._answer(request, True)

    async def deny(self, request: Request) -> Response:
        return await self._answer(request, False)

    async def _answer(self, request: Request, approve: bool) -> Response:
        body: dict[str, Any] = {}
        if request.headers.get("content-length", "0") not in ("", "0"):
            body = require_object(await read_json(request, MAX_FORM_BYTES))
        always, reason = body.get("always", False), body.get("reason")
        if not isinstance(always, bool) or not (reason is None or isinstance(reason, str)):
            raise ApiError(400, "always is true or false, reason a string")
        if always and not approve:
            raise ApiError(400, "always goes with approve (a grant lets calls through)")
        approval = await self._decide(request.path_params["approval_id"], approve,
                                      by="owner (http)", reason=reason, always=always)
        return JSONAnswer(approval.to_dict())

    async def _decide(self, approval_id: str, approve: bool, *, by: str, reason: Any = None,
                      always: bool = False, nonce: str | None = None) -> Any:
        from jarvis.approvals.grants import grants_for_request
        from jarvis.approvals.store import ApprovalError
        from jarvis.errors import UserError

        def decide(store: Any) -> Any:
            found = store.get(approval_id)
            made = grants_for_request(found.request, task_id=found.task_id,
                                      created_by="link" if nonce else "http") if always else []
            return store.decide(found.id, approve, by=by, reason=reason, grants=made,
                                nonce=nonce)[0]

        try:
            return await self._call(decide)
        except ApprovalError as exc:
            raise ApiError(409, str(exc)) from None
        except UserError as exc:
            raise ApiError(404 if "no approval request" in str(exc) else 400, str(exc)) from None

    # --- the link page ---------------------------------------------------------------------
    async def page(self, request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        if request.method == "POST":
            return await self._page_post(request, approval_id)
        if request.method not in ("GET", "HEAD"):
            return _page(405, "Not allowed", "<p>This page is only shown (GET) and answered "
                         "with its own form (POST).</p>")
        if "decision" in request.query_params:
            # An answer in the URL is a GET that would change something: refused.
            return _page(405, "Not answered", "<p>An answer is given with the page's buttons "
                         "(a POST), never by opening a link.</p>")
        token = request.query_params.get("t", "")
        checked = self._check(token, approval_id)
        if isinstance(checked, Response):
            return checked
        try:
            approval = await self._get(approval_id)
        except ApiError:
            return _page(404, "Unknown request", "<p>No such approval request.</p>")
        response = _page(200, "Approval", _request_html(approval, token))
        if approval.status == "pending":
            secure = "; Secure" if request.url.scheme == "https" else ""
            response.headers.append("Set-Cookie", (
                f"{COOKIE}={_binding(checked.nonce)}; Path={LINK_PREFIX}{approval.id}; "
                f"Max-Age=3600; HttpOnly; SameSite=Strict{secure}"))
        return response

    def _check(self, token: str, approval_id: str) -> Any:
        from jarvis.approvals.tokens import BadToken, check_token

        try:
            return check_token(token, approval_id)
        except BadToken as exc:
            return _page(403, "Refused", f"<p>{html.escape(str(exc))}.</p>")

    async def _page_post(self, request: Request, approval_id: str) -> Response:
        problem = _cross_site(request)
        if problem is not None:
            return _page(403, "Refused", f"<p>{html.escape(problem)}</p>")
        raw = await request.body()
        if len(raw) > MAX_FORM_BYTES:
            return _page(413, "Refused", "<p>The form is too large.</p>")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            return _page(415, "Refused", "<p>Answer with the page's own form.</p>")
        form = {k: v[-1] for k, v in parse_qs(raw.decode("utf-8", "replace"),
                                              keep_blank_values=True).items()}
        token = form.get("t", "")
        if not token:
            return _page(403, "Refused", "<p>The answer must carry the link's token in the "
                         "form (a link alone cannot answer).</p>")
        checked = self._check(token, approval_id)
        if isinstance(checked, Response):
            return checked
        cookie = request.cookies.get(COOKIE, "")
        if not hmac.compare_digest(cookie, _binding(checked.nonce)):
            return _page(403, "Refused", "<p>Open the link in this browser first, then answer "
                         "on its page.</p>")
        decision = form.get("decision")
        if decision not in ("approve", "deny"):
            return _page(400, "Refused", "<p>The answer is approve or deny.</p>")
        approve = decision == "approve"
        try:
            approval = await self._decide(approval_id, approve, by="owner (link)",
                                          always=approve and form.get("always") == "1",
                                          nonce=checked.nonce)
        except ApiError as exc:
            return _page(exc.status, "Not answered", f"<p>{html.escape(exc.message)}</p>")
        said = "approved" if approve else "denied"
        granted = (f"<p>Grant {html.escape(approval.grant_id)} made: this tool may send there "
                   f"without asking.</p>" if approval.grant_id else "")
        from jarvis.approvals import next_step

        then = next_step(self.config, approval)
        return _page(200, "Answered", f"<p>You {said} request {html.escape(approval.id)}: "
                     f"{html.escape(then)}.</p>{granted}")


def _binding(nonce: str) -> str:
    """The cookie value bound to a token: only this install can compute it."""
    from jarvis.approvals.tokens import link_key

    key = link_key(create=False) or b""
    return hmac.new(key, f"jarvis-approval-page|{nonce}".encode(), hashlib.sha256).hexdigest()


def _cross_site(request: Request) -> str | None:
    """Why a POST to the page does not come from the page itself (None: it does)."""
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if not origin:
        return "The answer must come from the approval page itself (no Origin was sent)."
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in ("http", "https") or parts.netloc != host.strip().lower():
        return "Answers from another site are refused."
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site.lower() != "same-origin":
        return "Answers from another site are refused."
    return None


def _page(status: int, title: str, body: str) -> Response:
    document = (f"<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' "
                f"content='width=device-width'><meta name='referrer' content='no-referrer'>"
                f"<title>jarvis: {html.escape(title)}</title><style>body{{font-family:sans-serif;"
                f"max-width:46em;margin:1em auto;padding:0 1em}}pre{{white-space:pre-wrap;"
                f"word-break:break-all;background:#f4f4f4;padding:.5em}}button{{font-size:1.1em;"
                f"margin:.3em}}</style></head><body><h1>jarvis: {html.escape(title)}</h1>{body}"
                f"</body></html>")
    return HTMLResponse(document, status_code=status, headers=dict(PAGE_HEADERS))


def _shown(text: Any, limit: int = PAGE_PIECE_CHARS) -> str:
    """Text a model wrote, for the page: escapes and control characters as visible text, HTML
    escaped, cut (with its length said) past `limit`."""
    from jarvis.core.terminal import visible

    text = str(text)
    cut = len(text) > limit
    shown = html.escape(visible(text[:limit]))
    if cut:
        shown += html.escape(f" [... {len(text) - limit} more characters: `jarvis approvals "
                             f"show ID --full` prints all]")
    return shown


def _request_html(approval: Any, token: str) -> str:
    from jarvis.approvals.grants import grantable
    from jarvis.core.types import human_size

    request = approval.request
    rows = [("request", approval.id), ("status", approval.status), ("tool", approval.tool),
            ("goes to", approval.where),
            ("sends", f"{human_size(int(request.get('size') or 0))}, sha256 "
                      f"{request.get('digest')}"),
            ("why", request.get("reason") or "-"), ("run", approval.run_id)]
    if approval.task_id:
        rows.append(("task", approval.task_id))
    parts = ["<table>"] + [f"<tr><th align='left'>{html.escape(k)}</th><td>{_shown(v, 2000)}"
                           f"</td></tr>" for k, v in rows] + ["</table>"]
    for number, egress in enumerate(request.get("egress") or [], 1):
        if egress.get("url"):
            parts.append(f"<p>destination {number} url:</p><pre>{_shown(egress['url'])}</pre>")
        for index, piece in enumerate(egress.get("payload") or [], 1):
            parts.append(f"<p>destination {number}, payload {index} ({len(piece)} "
                         f"characters):</p><pre>{_shown(piece)}</pre>")
    arguments = json.dumps(request.get("arguments"), ensure_ascii=False, sort_keys=True,
                           indent=2, default=str)
    parts.append(f"<p>arguments:</p><pre>{_shown(arguments)}</pre>")
    if approval.status != "pending":
        parts.append(f"<p>This request is {html.escape(approval.status)}; nothing more to "
                     f"answer.</p>")
        return "".join(parts)
    always = ("<p><label><input type='checkbox' name='always' value='1'> also let "
              f"{html.escape(approval.tool)} send there from now on without asking (a grant)"
              "</label></p>") if grantable(request) else ""
    parts.append(f"<form method='post' action='{LINK_PREFIX}{html.escape(approval.id)}'>"
                 f"<input type='hidden' name='t' value='{html.escape(token, quote=True)}'>"
                 f"{always}<button name='decision' value='approve'>Approve this call</button>"
                 f"<button name='decision' value='deny'>Deny</button></form>")
    return "".join(parts)
