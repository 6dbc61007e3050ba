"""How a run ended, as the SDK reports it: an answer, or no answer because it stopped on a
limit (max_turns, the loop guard), which is `status = "incomplete"` in every record."""

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
    return None, None


def answer_of(out: dict[str, Any]) -> str:
    """The answer of an ask_full result; RunIncomplete when the run stopped without one (an
    empty string would pass for an answer)."""
    if out.get("status") == "incomplete":
        from jarvis.errors import RunIncomplete

        raise RunIncomplete(f"the run {out['stop_message']}", out["stop_reason"], out)
    return out["content"]
