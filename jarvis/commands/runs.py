"""`jarvis runs`: read the run log (every ask from the CLI, the SDK and the scheduler)."""

from __future__ import annotations

import json
import time

import click

from jarvis.commands._common import Group, echo_json, echo_table, load_cli_config, one_line
from jarvis.core.terminal import visible


def _log():
    from jarvis.runlog import RunLog, run_log_path

    return RunLog(run_log_path(load_cli_config()))


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


@click.group(cls=Group)
def runs() -> None:
    """List and show recorded runs (the run log)."""


@runs.command("list")
@click.option("-n", "--limit", type=click.IntRange(1, 10_000), default=20, show_default=True,
              help="How many of the newest runs to show.")
@click.option("--source", help="Only runs from this source (cli, sdk, scheduler, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
def list_runs(limit: int, source: str | None, as_json: bool) -> None:
    """List the newest runs: id, time, status, source, agent, model, tool calls, tokens,
    query (aligned columns under a header)."""
    log = _log()
    try:
        rows = log.list(limit=limit, source=source)
    finally:
        log.close()
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo("no runs recorded yet", err=True)
        return
    header = ["ID", "STARTED", "STATUS", "SOURCE", "AGENT", "MODEL", "TOOL CALLS", "TOKENS",
              "QUERY"]
    table = [[r["id"], _when(r["created_at"]), r["status"] or "-", r["source"] or "-",
              r["agent"] or "-", one_line(r["model"] or "-", 30), str(r["tool_calls"] or 0),
              str(r["total_tokens"] or 0), one_line(r["query"] or "", 200)] for r in rows]
    echo_table(header, table, right=(6, 7))  # counts align right


def _delivery(config, run: dict) -> dict:
    """Whether the run's result was sent to a channel: a scheduled run's delivery record from
    the scheduler's store (its error was redacted when recorded: channel URLs' secret parts
    never reach it), {"status": "not_requested"} when nothing was to be sent, "pending" while
    a notifying run has no delivery record yet, "unknown" when the store cannot tell."""
    scheduled = (run.get("metadata") or {}).get("scheduled_run")
    if not isinstance(scheduled, dict) or scheduled.get("run_id") is None:
        return {"status": "not_requested"}  # asks from the CLI, the SDK, servers: no channel
    import sqlite3

    from jarvis.errors import JarvisError
    from jarvis.scheduler.ledger import open_store

    try:
        store = open_store(config, create=False)
    except (JarvisError, sqlite3.Error) as exc:
        return {"status": "unknown", "error": f"cannot read the scheduler's store: {exc}"}
    try:
        record = store.get_run(int(scheduled["run_id"]))
        task = store.get_task(record.task_id)
    except (JarvisError, sqlite3.Error, ValueError, TypeError) as exc:
        return {"status": "unknown", "error": f"scheduled run #{scheduled['run_id']} is not in "
                                              f"the scheduler's store ({exc})"}
    finally:
        store.close()
    if record.delivery:
        return record.to_dict()["delivery"]
    if not task.notify:
        return {"status": "not_requested"}
    return {"status": "pending", "channel": task.notify}


def _delivery_line(delivery: dict) -> str:
    status = delivery.get("status")
    if status == "not_requested":
        return "not requested"
    if status == "delivered":
        attempts = delivery.get("attempts") or 1
        return (f"delivered to {delivery.get('channel')} ({attempts} attempt"
                f"{'' if attempts == 1 else 's'})")
    if status == "pending":
        return f"pending (to {delivery.get('channel')}: not recorded yet)"
    if status == "unknown":
        return f"unknown: {delivery.get('error')}"
    label = "FAILED" if status == "failed" else "NOT SENT" if status == "not_sent" else status
    return (f"{label} to {delivery.get('channel')} after {delivery.get('attempts') or 0} "
            f"attempt(s): {delivery.get('error')}")


def _trust_lines(trust: dict | None) -> list[str]:
    """When and by which call the run read untrusted content or private data, and what the
    egress guard decided (docs/trust.md)."""
    if not isinstance(trust, dict):
        return []

    def first(marks: list, what: str) -> str:
        if not marks:
            return f"{what}: no"
        mark = marks[0]
        by = f"{mark.get('tool') or '-'}, call {mark.get('call_id') or '-'}"
        return f"{what}: yes, from {_when(mark.get('at'))} ({by}): {mark.get('reason')}"

    lines = ["trust:   " + first(trust.get("tainted_by") or [], "read untrusted content"),
             "         " + first(trust.get("private_by") or [], "holds private data")]
    for decision in trust.get("egress") or []:
        where = ", ".join(decision.get("destinations") or []) or "-"
        lines.append(f"egress:  {decision.get('outcome')}: {decision.get('tool')} -> {where} "
                     f"(call {decision.get('call_id')})")
    return lines


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def show_run(run_id: str, as_json: bool) -> None:
    """Show one run (an id prefix is enough): its transcript, tool calls and usage, and for
    a scheduled run whether its result was delivered to its channel."""
    log = _log()
    try:
        run = log.get(run_id)
    finally:
        log.close()
    config = load_cli_config()
    run["delivery"] = _delivery(config, run)
    from jarvis.commands.approvals import approval_line, approvals_of_runs

    run["approvals"] = approvals_of_runs(config, [run["id"]]).get(run["id"], [])
    if as_json:
        echo_json(run)
        return

    def echo(text: str) -> None:
        click.echo(visible(text))  # a model, a tool, a server or a channel wrote most of it

    usage = run["usage"]
    echo(f"run {run['id']}  ({run['status']}, source {run['source']})")
    echo(f"when:    {_when(run['created_at'])}, {run['duration_seconds'] or 0:.2f} s")
    echo(f"agent:   {run['agent']}   engine: {run['engine']}   model: {run['model']}")
    echo(f"turns:   {run['turns']}   tokens: {usage['prompt_tokens']} prompt + "
               f"{usage['completion_tokens']} completion = {usage['total_tokens']}")
    echo(f"query:   {run['query']}")
    if run.get("error") and run["status"] == "incomplete":
        echo(f"stopped: {run['error'].removeprefix('stopped ')}")
    elif run.get("error"):
        echo(f"error:   {run['error']}")
    echo(f"delivery: {_delivery_line(run['delivery'])}")
    for item in run["approvals"]:  # parked / approved / denied / expired (docs/approvals.md)
        echo(approval_line(item))
    meta = run.get("metadata") or {}
    for line in _trust_lines(meta.get("trust")):
        echo(line)
    if run["status"] != "incomplete" and meta.get("max_turns_exceeded"):  # runs logged before
        echo("stopped: at max_turns, before a final answer")
    elif run["status"] != "incomplete" and meta.get("loop_detected"):
        echo("stopped: the model kept repeating the same tool call")
    elif meta.get("budget_exceeded"):
        echo("stopped: at the budget, before a final answer")
    if isinstance(meta.get("budget"), dict):
        from jarvis.tools.budget import spend_line

        echo(f"budget:  {spend_line(meta['budget'])}")
    for call in run["tool_calls"]:
        state = "ok" if call["success"] else f"FAILED ({call['error_type']})"
        echo(f"tool:    {call['tool_name']} {json.dumps(call['arguments'], ensure_ascii=False)}"
                   f" -> {state}, {(call['latency_seconds'] or 0) * 1000:.1f} ms")
        echo(f"         {call['content']}")
    if run.get("messages"):
        echo("transcript:")
        for m in run["messages"]:
            text = m.get("content") or ""
            if m.get("tool_calls"):
                calls = ", ".join(f"{c['function']['name']}({c['function']['arguments']})"
                                  for c in m["tool_calls"])
                text = (text + " " if text else "") + f"[calls {calls}]"
            echo(f"  {m['role']}: {text}")
    if run["status"] == "ok":
        echo(f"answer:  {run['content']}")
