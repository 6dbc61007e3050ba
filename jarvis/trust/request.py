"""ApprovalRequest: what a person is asked to decide about one tool call, and their answer.

A request is made in one place (the executor, before the call runs) for both reasons a
person may be needed: a tool that requires confirmation ("confirmation") and a call the
egress guard will not allow on its own ("egress"). It says, in this order:

1. where the call goes: tool, method, host / channel / MCP server (`destinations`);
2. how much it sends and a short hash of it (`size`, `digest`), so two prompts for the same
   data show the same hash;
3. why a person is needed (`reason`) and how to allow such calls without asking
   (`how_to_allow`);
4. everything, on request (`full_text()`): each destination with its full payload, then the
   arguments as indented JSON with sorted keys (never cut, never in the model's order), every
   character that acts on a terminal shown as an escape.

It is JSON-serializable (`to_dict` / `from_dict`): issue 22 stores requests while a run waits
for its person. `Verdict` is what a person-needed hook returns.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from jarvis.core.types import human_size
from jarvis.trust.labels import Egress, total_digest, total_size

CONFIRMATION = "confirmation"
EGRESS = "egress"


class Verdict(StrEnum):
    """A person-needed hook's answer: run the call, refuse it, or (issue 22) park the run."""

    APPROVE = "approve"
    DENY = "deny"
    PARK = "park"

    @classmethod
    def of(cls, value: Any) -> Verdict:
        """A hook's answer as a Verdict: a Verdict or its value, or a bool (approve / deny)."""
        if isinstance(value, bool):
            return cls.APPROVE if value else cls.DENY
        return cls(value)


@dataclass(slots=True)
class ApprovalRequest:
    """One call that needs a person (see the module docstring)."""

    kind: str
    tool: str
    arguments: dict[str, Any]
    egress: list[Egress] = field(default_factory=list)
    reason: str = ""
    how_to_allow: str = ""
    run_id: str | None = None
    call_id: str | None = None
    id: str = field(default_factory=lambda: os.urandom(8).hex())
    created_at: float = field(default_factory=time.time)
    # The tool's ToolSpec, for approvers of the older (spec, arguments) form; not serialized.
    spec: Any = field(default=None, repr=False, compare=False)

    @property
    def destinations(self) -> list[dict[str, str]]:
        """Where the call goes, first thing shown: [{kind, destination, method}]."""
        return [{"kind": e.kind, "destination": e.destination, "method": e.method}
                for e in self.egress]

    @property
    def size(self) -> int:
        """Bytes the call sends (all destinations), or its arguments' size without egress."""
        if self.egress:
            return total_size(self.egress)
        return len(_arguments_json(self.arguments).encode("utf-8", "surrogatepass"))

    @property
    def digest(self) -> str:
        if self.egress:
            return total_digest(self.egress)
        import hashlib

        data = _arguments_json(self.arguments).encode("utf-8", "surrogatepass")
        return hashlib.sha256(data).hexdigest()[:12]

    def headline(self) -> str:
        """One line: the tool and where it sends, e.g. `http_request: GET evil.example`."""
        from jarvis.core.terminal import visible

        where = "; ".join(e.where() for e in self.egress) or "no data leaves this machine"
        return visible(f"{self.tool}: {where}", 400, one_line=True)

    def summary(self, preview_chars: int = 300) -> str:
        """The lines of a prompt: where the call goes first, then how much it sends and its
        hash, why a person is needed, and a preview of the arguments (sorted keys, so the
        model's order cannot push anything out of view; cut, with the full length named:
        `full_text()` has everything). Every terminal escape is shown, never acted on."""
        from jarvis.core.terminal import visible

        where = "; ".join(e.where() for e in self.egress) or "nothing leaves this machine"
        lines = [f"jarvis: tool {visible(self.tool, 100, one_line=True)} needs your approval "
                 f"({self.kind})",
                 f"  goes to: {visible(where, 400, one_line=True)}",
                 f"  sends {human_size(self.size)}, sha256 {self.digest}"]
        for e in self.egress[:3]:
            if e.url:
                lines.append(f"  url: {visible(e.url, 200, one_line=True)}")
        if self.reason:
            lines.append(f"  why: {visible(self.reason, 600, one_line=True)}")
        if self.how_to_allow:
            lines.append(f"  to allow without asking: "
                         f"{visible(self.how_to_allow, 300, one_line=True)}")
        text = _arguments_json(self.arguments)
        shown = visible(text, preview_chars, one_line=True)
        if len(text) > preview_chars:
            shown += f" (v shows all {len(text)} characters)"
        lines.append(f"  arguments: {shown}")
        return "\n".join(lines)

    def full_text(self) -> str:
        """Everything the call carries, never cut, escapes visible (the prompt's `v`)."""
        from jarvis.core.terminal import visible

        lines = [f"tool: {self.tool}  ({self.kind}, call {self.call_id}, run {self.run_id})"]
        for number, e in enumerate(self.egress, 1):
            lines.append(f"destination {number}: {e.where()} [{e.kind}], "
                         f"{human_size(e.size)}, sha256 {e.digest()}")
            if e.url:
                lines.append(f"  url: {e.url}")
            for index, piece in enumerate(e.payload, 1):
                lines.append(f"  payload {index} ({len(piece)} characters):")
                lines.append("    " + piece.replace("\n", "\n    "))
        lines.append("arguments:")
        lines.append(_arguments_json(self.arguments, indent=2))
        return visible("\n".join(lines))

    def brief(self) -> dict[str, Any]:
        """The request without its payload: where, how much, which hash, why."""
        return {"id": self.id, "kind": self.kind, "tool": self.tool,
                "destinations": self.destinations, "size": self.size, "digest": self.digest,
                "reason": self.reason, "how_to_allow": self.how_to_allow}

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "tool": self.tool,
                "destinations": self.destinations, "size": self.size, "digest": self.digest,
                "reason": self.reason, "how_to_allow": self.how_to_allow,
                "run_id": self.run_id, "call_id": self.call_id, "created_at": self.created_at,
                "arguments": self.arguments, "egress": [e.to_dict() for e in self.egress]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ApprovalRequest:
        return cls(kind=str(data.get("kind", CONFIRMATION)), tool=str(data.get("tool", "")),
                   arguments=dict(data.get("arguments") or {}),
                   egress=[Egress.from_dict(e) for e in data.get("egress") or []],
                   reason=str(data.get("reason", "")),
                   how_to_allow=str(data.get("how_to_allow", "")),
                   run_id=data.get("run_id"), call_id=data.get("call_id"),
                   id=str(data.get("id") or os.urandom(8).hex()),
                   created_at=float(data.get("created_at") or time.time()))


def _arguments_json(arguments: Any, indent: int | None = None) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True, indent=indent, default=str)
