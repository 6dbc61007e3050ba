"""The egress guard: may this call send what it sends, given what the run has read?

`check(trust, tool, egress)` is pure (it reads the RunTrust, changes nothing) and is called by
the executor before the tool runs, so before any DNS lookup or connection.

- A run that is not both tainted and holding private data sends freely (the fast path), with
  one exception: a run that read untrusted content may not create or resume a scheduled task
  on its own (the task would run unattended what the content told it to).
- Otherwise each egress of the call must be allowed, either
  a. by a rule the person wrote (`EgressRules`: hosts, channels, MCP servers), or
  b. because it carries no bits that came from private data: its URL was seen verbatim in the
     person's words or in a result without private data (following a link), or every token
     of its URL (on a host the person named), query, headers, body or message is one of the
     person's own words (`jarvis.trust.evidence`). Calls allowed under (b) are counted: past
     `max_unconfirmed` a person is asked anyway, which bounds the one channel (b) leaves:
     which of the offered links (or of the person's words) a call uses.
- Anything else needs a person. The Decision says why and how to allow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from jarvis.trust.evidence import PLAIN_HEADERS, budget, covered_by_person, url_covered
from jarvis.trust.labels import Egress
from jarvis.trust.run import RunTrust

SCHEDULE = "schedule"
SCHEDULE_METHODS = frozenset({"create", "resume"})


@dataclass(slots=True, frozen=True)
class Decision:
    """The guard's answer for one call.

    allowed: the call may run without a person.
    reason: a short code: "no_egress", "not_exposed", "rule", "no_private_bits" (allowed);
        "unscheduled" / "limit" / "private_bits" (a person is needed).
    unconfirmed: allowed under (b): the executor counts it against max_unconfirmed.
    why / how_to_allow: for the person (or the denial message): what the run read, and the
        config line or flag that allows such calls.
    egress: the call's egress (the blocking one first when a person is needed).
    """

    allowed: bool
    reason: str
    unconfirmed: bool = False
    why: str = ""
    how_to_allow: str = ""
    egress: tuple[Egress, ...] = field(default_factory=tuple)

    @property
    def needs_person(self) -> bool:
        return not self.allowed


NO_EGRESS = Decision(True, "no_egress")
NOT_EXPOSED = Decision(True, "not_exposed")


def covered(egress: Egress, trust: RunTrust) -> bool:
    """Whether the egress carries only the person's words and links already seen (rule b)."""
    evidence = trust.evidence
    used = budget()  # each of the person's words as often as they wrote it, in one egress
    if egress.url and url_covered(egress.url, evidence, used) is None:
        return False
    for name, value in egress.headers:
        if value in PLAIN_HEADERS.get(name.lower(), ()):
            continue  # a standard Accept / Content-Type value: a few bits of choice at most
        if not (covered_by_person(name, evidence, used)
                and covered_by_person(value, evidence, used)):
            return False
    return all(covered_by_person(piece, evidence, used) for piece in egress.payload)


def _first(marks: list[dict], what: str) -> str:
    if not marks:
        return what
    mark = marks[0]
    return f"{mark.get('reason') or what} (call {mark.get('call_id') or '-'})"


def how_to_allow(egress: Egress) -> str:
    """The config line or flag that lets such calls through without asking."""
    if egress.kind == "network":
        host = egress.destination
        return (f"add {host!r} to [egress] allow_hosts in config.toml, or pass "
                f"`--allow-egress {host}` to jarvis ask")
    if egress.kind == "channel":
        return (f"add {egress.destination!r} to [egress] allow_channels in config.toml, or pass "
                f"`--allow-egress channel:{egress.destination}` to jarvis ask")
    if egress.kind == "mcp":
        return (f"add {egress.destination!r} to [egress] allow_mcp_servers in config.toml, or "
                f"pass `--allow-egress mcp:{egress.destination}` to jarvis ask")
    if egress.kind == "persist" and egress.destination == SCHEDULE:
        return "schedule the task yourself with `jarvis schedule add`"
    return "run it where a person can approve it (jarvis ask in a terminal)"


def check(trust: RunTrust, tool: str, egress: Sequence[Egress]) -> Decision:
    """Whether a call of `tool` that sends `egress` may run without a person."""
    if not egress:
        return NO_EGRESS
    if not trust.tainted_by:
        return NOT_EXPOSED
    for e in egress:
        if e.kind == "persist" and e.destination == SCHEDULE and e.method in SCHEDULE_METHODS:
            return Decision(False, "unscheduled", why=(
                f"this run read untrusted content ({_first(trust.tainted_by, 'untrusted content')}"
                f"); a task it {e.method}s would run unattended on what that content said"),
                how_to_allow=how_to_allow(e), egress=(e, *[x for x in egress if x is not e]))
    if not trust.private_by:
        return NOT_EXPOSED
    unconfirmed = False
    for e in egress:
        if e.kind == "none" or trust.rules.allows(e, tool):
            continue
        if covered(e, trust):
            unconfirmed = True
            continue
        return Decision(False, "private_bits", why=(
            f"{_exposure(trust)}; {tool} would send {e.size} bytes to {e.where()} that are "
            f"not only your own words or a link already seen"), how_to_allow=how_to_allow(e),
            egress=(e, *[x for x in egress if x is not e]))
    if not unconfirmed:
        return Decision(True, "rule", egress=tuple(egress))
    if trust.unconfirmed >= trust.max_unconfirmed:
        return Decision(False, "limit", why=(
            f"{_exposure(trust)}; it has made {trust.unconfirmed} calls without asking already "
            f"(the limit is {trust.max_unconfirmed}, [egress] max_unconfirmed_per_run)"),
            how_to_allow=how_to_allow(egress[0]), egress=tuple(egress))
    return Decision(True, "no_private_bits", unconfirmed=True, egress=tuple(egress))


def _exposure(trust: RunTrust) -> str:
    return (f"this run read untrusted content ({_first(trust.tainted_by, 'untrusted content')}) "
            f"and holds private data ({_first(trust.private_by, 'private data')})")
