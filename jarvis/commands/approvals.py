"""`jarvis approvals`: the requests of runs that wait for you; approve or deny them."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from jarvis.commands._common import echo_json, load_cli_config, one_line
from jarvis.core.terminal import visible

PREVIEW_CHARS = 2_000


def _store(create: bool = False) -> Any:
    from jarvis.approvals.parking import expire_due
    from jarvis.approvals.stores import open_approvals

    config = load_cli_config()
    store = open_approvals(config, create=create)
    if store is not None:
        expire_due(config, store)  # what ran out of time is shown (and recorded) as expired
    return store


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


@click.group()
def approvals() -> None:
    """Requests of runs waiting for you: list, show, approve, deny (docs/approvals.md).

    A run with nobody to ask that reaches a call needing you parks: a scheduled task, an SDK
    call with on_approval="defer", and with `[approvals] notify` set `jarvis ask` without a
    terminal, a message to `jarvis listen` and a chat run of `jarvis serve`. It continues where
    it stopped, once, after you answer; a `jarvis ask` run continues in `approve`/`deny`
    itself (or `continue RUN`).
    """


@approvals.command("list")
@click.option("--all", "show_all", is_flag=True, help="Every request, answered ones too "
              "(default: the pending ones).")
@click.option("-n", "--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="How many requests to show, newest first.")
@click.option("--json", "as_json", is_flag=True, help="Print the requests as JSON.")
def list_approvals(show_all: bool, limit: int, as_json: bool) -> None:
    """List the requests waiting for you: id, tool, where it sends, size, expiry."""
    store = _store()
    try:
        found = [] if store is None else store.list(None if show_all else "pending",
                                                    limit=limit)
    finally:
        if store is not None:
            store.close()
    if as_json:
        echo_json([a.to_dict() for a in found])
        return
    if not found:
        click.echo("no requests" if show_all else "nothing waits for your approval", err=True)
        return
    from jarvis.core.types import human_size

    for a in found:
        size = human_size(int(a.request.get("size") or 0))
        state = a.status if a.status != "pending" else f"pending until {_when(a.expires_at)}"
        if a.decided_by and a.status in ("approved", "denied"):
            state += f" by {one_line(a.decided_by, 40)}"
        task = f"  task {a.task_id}" if a.task_id else ""
        click.echo(visible(f"{a.id}  {a.tool} -> {one_line(a.where, 80)}  {size}  {state}  "
                           f"run {a.run_id}{task}", 400, one_line=True))


@approvals.command("show")
@click.argument("approval_id")
@click.option("--full", is_flag=True, help="Print every argument and payload piece, however "
              f"long (default: the first {PREVIEW_CHARS} characters of each).")
@click.option("--json", "as_json", is_flag=True, help="Print the request as JSON.")
def show_approval(approval_id: str, full: bool, as_json: bool) -> None:
    """Show one request: where the call goes first, how much it sends and its hash, why you
    are asked, then what it carries (terminal escapes shown as text, never acted on)."""
    store = _store()
    if store is None:
        raise click.ClickException("nothing waits for your approval (no requests yet)")
    try:
        approval = store.get(approval_id)
    finally:
        store.close()
    if as_json:
        echo_json(approval.to_dict(full=True))
        return
    from jarvis.core.types import human_size

    request = approval.request
    lines = [f"request: {approval.id} ({approval.status})",
             f"tool:    {approval.tool} ({approval.kind})",
             f"goes to: {approval.where}",
             f"sends:   {human_size(int(request.get('size') or 0))}, sha256 {request.get('digest')}",
             f"why:     {request.get('reason') or '-'}"]
    if request.get("how_to_allow"):
        lines.append(f"to allow without asking: {request['how_to_allow']}")
    lines.append(f"run:     {approval.run_id}" + (f" (task {approval.task_id})"
                                                   if approval.task_id else ""))
    lines.append(f"asked:   {_when(approval.created_at)}; expires {_when(approval.expires_at)}")
    if approval.decided_at:
        lines.append(f"answer:  {approval.status} {_when(approval.decided_at)} by "
                     f"{approval.decided_by}" + (f": {approval.reason}" if approval.reason
                                                 else ""))
    for line in lines:
        click.echo(visible(line, 2000, one_line=True))
    for number, egress in enumerate(request.get("egress") or [], 1):
        if egress.get("url"):
            click.echo(visible(f"destination {number} url: {_cut(egress['url'], full)}"))
        for index, piece in enumerate(egress.get("payload") or [], 1):
            click.echo(visible(f"destination {number} payload {index} ({len(piece)} "
                               f"characters): {_cut(piece, full)}"))
    text = json.dumps(request.get("arguments"), ensure_ascii=False, sort_keys=True, indent=2,
                      default=str)
    click.echo("arguments:")
    click.echo(visible(_cut(text, full)))


def _cut(text: str, full: bool) -> str:
    if full or len(text) <= PREVIEW_CHARS:
        return text
    return (text[:PREVIEW_CHARS] + f" [... {len(text) - PREVIEW_CHARS} more characters: "
            f"--full shows them]")


def _decide(approval_id: str, approve: bool, reason: str | None, always: bool) -> None:
    from jarvis.approvals import decide
    from jarvis.approvals.parking import person

    config = load_cli_config()
    store = _store()
    if store is None:
        raise click.ClickException("nothing waits for your approval (no requests yet)")
    store.close()
    approval = decide(approval_id, approve, by=f"{person()} (cli)", reason=reason,
                      grant=always, config=config, created_by="cli")
    where = one_line(approval.where, 200)
    verb = "approved" if approve else "denied"
    click.echo(visible(f"{verb} {approval.id}: {approval.tool} -> {where}"), err=True)
    if approval.grant_id:
        click.echo(f"grant {approval.grant_id} made: {approval.tool} may send there without "
                   f"asking (`jarvis grants revoke {approval.grant_id}`)", err=True)
    from jarvis.approvals import next_step
    from jarvis.approvals.records import CLI

    run = _run_of(config, approval.run_id)
    if run is not None and run.resumer == CLI and run.status == "ready":
        _continue(config, approval.run_id)  # `jarvis ask`'s run: it goes on here, now
        return
    click.echo(next_step(config, approval), err=True)


def _run_of(config: Any, run_id: str) -> Any:
    from jarvis.approvals.stores import open_approvals

    store = open_approvals(config, create=False)
    if store is None:
        return None
    try:
        return store.get_run(run_id, with_state=False)
    finally:
        store.close()


def _continue(config: Any, run_id: str) -> None:
    """Continue a parked run of `jarvis ask` (no terminal) here, once: in the workspace it was
    asked in; its answer goes to stdout, like the ask's would have (exit codes as ask's)."""
    from jarvis.approvals.stores import open_approvals
    from jarvis.commands._common import system_factory
    from jarvis.commands.ask import STOPPED_EXIT_CODE, parked_exit
    from jarvis.errors import UserError

    store = open_approvals(config, create=False)
    found = store.get_run(run_id) if store is not None else None
    if store is not None:
        store.close()
    if found is None:
        raise UserError(f"no parked run {run_id[:40]!r}; `jarvis approvals list --all` shows "
                        f"the runs and their requests")
    from jarvis.approvals.records import CLI

    if found.resumer != CLI:
        raise UserError(f"run {found.run_id} was not parked by `jarvis ask` (it is continued by "
                        f"its {found.resumer}): `jarvis approvals continue` continues only "
                        f"those")
    ask = found.state.get("ask") or {}
    workspace = ((ask.get("run_metadata") or {}).get("cli") or {}).get("workspace")
    ctx = click.get_current_context()
    click.echo(f"continuing run {found.run_id}", err=True)
    with system_factory(config)(workspace) as system:
        out = system.resume(found.run_id)
    if out.get("status") == "parked":
        parked_exit(ctx, out, False, False)
        return
    if out.get("stop_reason") in ("max_turns", "loop_guard", "budget"):
        click.echo(f"Error: {out.get('stop_message')} (exit code {STOPPED_EXIT_CODE})", err=True)
        ctx.exit(STOPPED_EXIT_CODE)
    from jarvis.commands._common import shown_data

    click.echo(shown_data(out.get("content") or ""))


@approvals.command("approve")
@click.argument("approval_id")
@click.option("--always", is_flag=True, help="Also let this tool send to these destinations "
              "from now on without asking (a grant; `jarvis grants list`).")
def approve(approval_id: str, always: bool) -> None:
    """Approve request APPROVAL_ID: the call runs and its run goes on (once)."""
    _decide(approval_id, True, None, always)


@approvals.command("deny")
@click.argument("approval_id")
@click.option("--reason", default=None, help="Why (recorded with the answer).")
def deny(approval_id: str, reason: str | None) -> None:
    """Deny request APPROVAL_ID: the model reads a `denied` result and the run goes on."""
    _decide(approval_id, False, reason, False)


@approvals.command("continue")
@click.argument("run_id")
def continue_run(run_id: str) -> None:
    """Continue RUN_ID, a run of `jarvis ask` without a terminal that parked, once its
    requests are answered (approve/deny here continue it at once; answered elsewhere, by the
    link, HTTP or a reply, this does). Its answer goes to stdout; a second continue is
    refused."""
    _continue(load_cli_config(), run_id)


def approvals_of_runs(config: Any, run_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The requests of these runs (run log ids), for `jarvis runs show` and `schedule runs`;
    empty when there is no approvals store."""
    from jarvis.approvals.stores import open_approvals
    from jarvis.errors import JarvisError

    ids = [r for r in run_ids if r]
    if not ids:
        return {}
    try:
        store = open_approvals(config, create=False)
    except JarvisError as exc:
        print(f"warning: cannot read the approvals store: {exc}", file=sys.stderr)
        return {}
    if store is None:
        return {}
    try:
        return {run_id: [a.to_dict() for a in store.of_run(run_id)] for run_id in ids}
    finally:
        store.close()


def approval_line(item: dict[str, Any]) -> str:
    """`approval 3f9c2a1b: http_request -> POST host: approved by me (cli)`."""
    state = item["status"]
    if item.get("decided_by") and state in ("approved", "denied"):
        state += f" by {item['decided_by']}"
    if item.get("reason"):
        state += f" ({item['reason']})"
    return visible(f"approval {item['id']}: {item['tool']} -> {one_line(item['where'], 80)}: "
                   f"{state}", 400, one_line=True)
