"""How a run ended, as the SDK reports it: an answer, or no answer because it stopped on a
limit (max_turns, the loop guard, the budget), which is `status = "incomplete"` in every record."""

from __future__ import annotations

from typing import Any


def stop_of(result: Any) -> tuple[str | None, str | None]:
    """(stop reason, message) of an AgentResult that ended without an answer, else (None, None)."""
    meta = result.metadata
    if meta.get("max_turns_exceeded"):
        return "max_turns", (f"stopped at max_turns ({result.turns} turns) without a final "
                             f"answer; raise max_turns to give the model more turns")
    if meta.get("loop_detected"):
        return "loop_guard", ("stopped because the model kept repeating the same tool call "
                              "without an answer")
    if meta.get("budget_exceeded"):
        return "budget", ("stopped at the budget without a final answer (its spend is in "
                          "`budget`; raise --budget-usd, --budget-seconds or --max-tool-calls)")
    return None, None


def run_stop(result: Any, outcome: Any = None) -> tuple[str | None, str | None]:
    """stop_of, and "schema" for a structured run (`outcome`) whose answers all failed to
    match its output schema (the last validation error is the message)."""
    reason, message = stop_of(result)
    if reason is None and outcome is not None and outcome.status != "ok":
        return "schema", (outcome.errors[-1] if outcome.errors else
                          "no answer matched the output schema")
    return reason, message


def tool_results_of(result: Any) -> list[dict[str, Any]]:
    """An AgentResult's tool results as dicts, each with the arguments of its call (decoded
    from JSON where they are JSON; None for a result with no call on record)."""
    calls_by_id = {c["id"]: c for c in result.metadata.get("tool_calls", [])}
    out = []
    for tr in result.tool_results:
        item = tr.to_dict()
        call = calls_by_id.get(tr.call_id or "")
        item["arguments"] = _decoded(call["arguments"]) if call else None
        out.append(item)
    return out


def _decoded(arguments: Any) -> Any:
    if isinstance(arguments, str):
        import json

        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def answer_of(out: dict[str, Any]) -> str:
    """The answer of an ask_full result; RunIncomplete when the run stopped without one (an
    empty string would pass for an answer)."""
    if out.get("status") == "incomplete":
        from jarvis.errors import RunIncomplete

        raise RunIncomplete(f"the run {out['stop_message']}", out["stop_reason"], out)
    return out["content"]
