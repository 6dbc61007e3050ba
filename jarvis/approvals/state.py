"""A parked run's state as JSON, and back: everything its continuation needs, on whichever
machine continues it.

    messages      the transcript so far (system prompt and memory context included), with the
                  placeholder answers of the calls that wait for the person
    pending       those calls: call id, tool, arguments, where their answer goes in messages
    run           turns and usage so far, tool results and calls, flags
    trust         RunTrust.to_dict(): what the run had read, the person's words, links seen
    ask           query, agent, tools, model, approved tools, limits, source, run metadata
                  (the scheduled task and occurrence it belongs to)

Its size is that of the conversation (messages and results, each text as stored), plus the
run's trust state (bounded by RunTrust at 2 MB).
"""

from __future__ import annotations

from typing import Any

from jarvis.core.types import (
    ErrorType,
    Message,
    ToolCall,
    ToolResult,
    block_from_dict,
)

VERSION = 1


def message_to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments}
                             for c in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        out["name"] = message.name
    if message.parts:
        out["parts"] = [p.to_dict() for p in message.parts]
    return out


def message_from_dict(data: dict[str, Any]) -> Message:
    calls = [ToolCall(id=str(c.get("id") or ""), name=c.get("name"),
                      arguments=c.get("arguments")) for c in data.get("tool_calls") or []]
    parts = [block_from_dict(p) for p in data.get("parts") or []]
    message = Message(role=data["role"], content=data.get("content"), tool_calls=calls,
                      tool_call_id=data.get("tool_call_id"), name=data.get("name"))
    if parts:
        message.parts = parts
    return message


def result_to_dict(result: ToolResult) -> dict[str, Any]:
    return result.to_dict()


def result_from_dict(data: dict[str, Any]) -> ToolResult:
    labels = data.get("labels")
    result = ToolResult(
        tool_name=str(data.get("tool_name") or ""), content=str(data.get("content") or ""),
        success=bool(data.get("success", True)), usage=dict(data.get("usage") or {}),
        cost_usd=float(data.get("cost_usd") or 0.0),
        latency_seconds=float(data.get("latency_seconds") or 0.0),
        metadata=dict(data.get("metadata") or {}),
        blocks=[block_from_dict(b) for b in data.get("blocks") or []],
        finished=bool(data.get("finished", False)), reward=data.get("reward"),
        error_type=ErrorType(data["error_type"]) if data.get("error_type") else None,
        call_id=data.get("call_id"),
        labels=frozenset(labels) if labels is not None else None)
    return result


def run_to_dict(state: Any) -> dict[str, Any]:
    """An agent's run state (jarvis.agents.base._RunState) as JSON."""
    flags = {k: v for k, v in state.flags.items() if k != "parked"}
    return {"turns": state.turns, "usage": dict(state.usage), "model": state.model,
            "flags": flags, "inference_seconds": list(state.inference_seconds),
            "tool_results": [result_to_dict(r) for r in state.tool_results],
            "tool_calls": list(state.tool_calls), "query": state.query}


def snapshot(*, ask: dict[str, Any], result: Any, trust: Any) -> dict[str, Any]:
    """The state of a run that has just parked: `result` is the agent's AgentResult (its
    metadata "parked" lists the calls waiting), `trust` its RunTrust."""
    meta = result.metadata
    flags = {k: v for k, v in meta.items()
             if k not in ("parked", "tool_calls", "inference_seconds", "model", "context")}
    run = {"turns": result.turns, "usage": dict(result.usage), "model": meta.get("model") or "",
           "flags": flags, "inference_seconds": list(meta.get("inference_seconds") or []),
           "tool_results": [result_to_dict(r) for r in result.tool_results],
           "tool_calls": list(meta.get("tool_calls") or []), "query": ask.get("query", "")}
    return {"version": VERSION, "ask": ask, "run": run, "trust": trust.to_dict(),
            "messages": [message_to_dict(m) for m in result.messages],
            "pending": [dict(p) for p in meta.get("parked") or []]}


def restore_messages(state: dict[str, Any]) -> list[Message]:
    return [message_from_dict(m) for m in state.get("messages") or []]
