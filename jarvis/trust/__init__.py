"""Provenance, taint and the egress guard (docs/trust.md).

A rule layer beside `jarvis.security`: it knows no tool, agent, store or entry point. Tools
declare what their results are and what their calls send out (`labels`); the executor keeps a
`RunTrust` per run, applies each result's labels, and asks `guard.check` before every call
that sends something out; a call the guard will not allow becomes an `ApprovalRequest` for a
person (`request`). Answers of tainted runs go through `markdown.neutralize`.

    labels    PRIVATE, UNTRUSTED, NEUTRAL, Egress
    evidence  the person's words and the links already seen, as the guard compares them
    run       RunTrust (per run state), EgressRules (what the person allows)
    guard     check(trust, tool, egress) -> Decision
    request   ApprovalRequest, Verdict
    markdown  neutralize(text, allowed), MarkdownStream, AnswerGuard
"""

from __future__ import annotations

from jarvis.trust.guard import Decision, check
from jarvis.trust.labels import NEUTRAL, PRIVATE, UNTRUSTED, Egress
from jarvis.trust.markdown import AnswerGuard
from jarvis.trust.request import ApprovalRequest, Verdict
from jarvis.trust.run import EgressRules, RunTrust

__all__ = ["AnswerGuard", "ApprovalRequest", "Decision", "Egress", "EgressRules", "NEUTRAL",
           "PRIVATE", "RunTrust", "UNTRUSTED", "Verdict", "check"]
