"""RunTrust: what one run has read, and what it may therefore send out.

A run is *tainted* once it has read untrusted content (a web page, a search result, an MCP
result, an indexed document, memory a model wrote, a tainted task's prompt, a conversation's
earlier answers) and holds *private data* once it has read the person's own data (files,
memory, task lists). Each is recorded with when and by which call (`tainted_by`,
`private_by`: lists of {call_id, tool, reason, at}). Neither ever goes back within a run.

It also keeps what the guard compares calls against (`jarvis.trust.evidence`): the person's
own words (`person_texts`: the prompt, their earlier messages; never a prompt a model wrote)
and the links found in results that carry no private data (`public_links`), plus the rules the
person wrote (`rules`: hosts, channels and MCP servers they allow) and how many calls were
allowed without a person while the run was tainted and private (`unconfirmed`).

Thread safety: several calls of one turn run at once. Every change takes `lock`; the executor
takes it around a guard decision and its count, so two concurrent calls cannot both take the
last unconfirmed slot.
"""

from __future__ import annotations

import fnmatch
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from jarvis.trust.evidence import Evidence, extract_links
from jarvis.trust.labels import PRIVATE, UNTRUSTED, Egress

DEFAULT_MAX_UNCONFIRMED = 8
MAX_TEXT_CHARS = 2_000_000  # person texts and links kept, in all (oldest dropped first)
MAX_MARKS = 100  # tainted_by / private_by entries kept (the first ones: they say when)
MAX_DECISIONS = 200  # egress decisions kept in the run's record


GRANT_KINDS = {"host": "network", "channel": "channel", "server": "mcp"}


def host_matches(entry: str, hostport: str) -> bool:
    """Whether a host rule (`example.com`: any port, `example.com:8443`, `*.example.com`:
    its subdomains, not itself) covers a destination `host[:port]`."""
    host, _, port = hostport.rpartition(":") if hostport.count(":") == 1 else (
        hostport, "", "")
    host = host or hostport
    if entry.startswith("*."):
        return host.endswith(entry[1:]) and host != entry[2:]
    return entry == hostport or entry == host


@dataclass(slots=True, frozen=True)
class GrantRule:
    """A grant the person made (`jarvis grants add`, "always" at a prompt, the approval page):
    `tool` may send to the host / channel / MCP server `value` without asking (docs/
    approvals.md). Only the person's commands make them; the executor only reads them."""

    id: str
    tool: str
    kind: str  # "host" | "channel" | "server"
    value: str

    def covers(self, tool: str, egress: Egress) -> bool:
        if tool != self.tool or GRANT_KINDS.get(self.kind) != egress.kind:
            return False
        if self.kind == "host":
            return host_matches(self.value, egress.destination)
        return egress.destination == self.value

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "tool": self.tool, "kind": self.kind, "value": self.value}


@dataclass(slots=True, frozen=True)
class EgressRules:
    """Destinations the person allows a tainted run holding private data to send to, without
    asking: `[egress] allow_hosts / allow_channels / allow_mcp_servers` in config.toml, a
    per-ask `--allow-egress`, and grants (`GrantRule`: one tool to one destination).

    A host entry is `example.com` (any port), `example.com:8443`, or `*.example.com` (its
    subdomains, not itself).
    """

    hosts: tuple[str, ...] = ()
    channels: tuple[str, ...] = ()
    mcp_servers: tuple[str, ...] = ()
    grants: tuple[GrantRule, ...] = ()

    @classmethod
    def make(cls, hosts: Iterable[str] = (), channels: Iterable[str] = (),
             mcp_servers: Iterable[str] = (), grants: Iterable[GrantRule] = ()) -> EgressRules:
        return cls(tuple(dict.fromkeys(h.strip().lower() for h in hosts if h.strip())),
                   tuple(dict.fromkeys(c.strip() for c in channels if c.strip())),
                   tuple(dict.fromkeys(s.strip() for s in mcp_servers if s.strip())),
                   tuple(dict.fromkeys(grants)))

    @classmethod
    def parse(cls, entries: Iterable[str]) -> EgressRules:
        """Rules from `--allow-egress` values: HOST, channel:NAME or mcp:SERVER."""
        hosts, channels, servers = [], [], []
        for entry in entries:
            entry = str(entry).strip()
            kind, sep, name = entry.partition(":")
            if sep and kind == "channel":
                channels.append(name)
            elif sep and kind == "mcp":
                servers.append(name)
            elif entry:
                hosts.append(entry)
        return cls.make(hosts, channels, servers)

    @classmethod
    def from_config(cls, config: Any, extra: Iterable[str] = ()) -> EgressRules:
        """The person's rules: `[egress]` in config.toml, plus `--allow-egress` values."""
        section = getattr(config, "egress", None)
        rules = cls.make(getattr(section, "allow_hosts", None) or (),
                         getattr(section, "allow_channels", None) or (),
                         getattr(section, "allow_mcp_servers", None) or ())
        return rules.merged(cls.parse(extra)) if extra else rules

    def merged(self, other: EgressRules | None) -> EgressRules:
        if other is None:
            return self
        return EgressRules.make(self.hosts + other.hosts, self.channels + other.channels,
                                self.mcp_servers + other.mcp_servers,
                                self.grants + other.grants)

    def allows_host(self, hostport: str) -> bool:
        return any(host_matches(entry, hostport) for entry in self.hosts)

    def allows(self, egress: Egress, tool: str | None = None) -> bool:
        """Whether a rule lets this egress through: a config rule for any tool, or a grant
        for `tool`."""
        if tool is not None and any(g.covers(tool, egress) for g in self.grants):
            return True
        if egress.kind == "network":
            return self.allows_host(egress.destination)
        if egress.kind == "channel":
            return egress.destination in self.channels
        if egress.kind == "mcp":
            return any(fnmatch.fnmatchcase(egress.destination, s) for s in self.mcp_servers)
        return False

    def granted(self, tool: str, egress: Iterable[Egress]) -> GrantRule | None:
        """The grant that lets a call of `tool` through without asking for its confirmation:
        one exists when every destination of the call is covered by a grant for this tool
        (None for a call that names no destination: grants are per destination)."""
        found = None
        for e in egress:
            if e.kind == "none":
                continue
            grant = next((g for g in self.grants if g.covers(tool, e)), None)
            if grant is None:
                return None
            found = found or grant
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"hosts": list(self.hosts), "channels": list(self.channels),
                "mcp_servers": list(self.mcp_servers),
                "grants": [g.to_dict() for g in self.grants]}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> EgressRules:
        data = data or {}
        grants = [GrantRule(str(g.get("id", "")), str(g.get("tool", "")), str(g.get("kind", "")),
                            str(g.get("value", ""))) for g in data.get("grants") or ()
                  if isinstance(g, dict)]
        return cls.make(data.get("hosts") or (), data.get("channels") or (),
                        data.get("mcp_servers") or (), grants)


def _mark(reason: str, call_id: str | None, tool: str | None) -> dict[str, Any]:
    return {"call_id": call_id, "tool": tool, "reason": reason, "at": time.time()}


@dataclass(slots=True)
class _Texts:
    """Texts kept under one size budget, oldest dropped first."""

    items: list[str] = field(default_factory=list)
    chars: int = 0


class RunTrust:
    """The per-run provenance state (see the module docstring).

    Args:
        run_id: the run this belongs to (recorded in events and memory provenance).
        person_texts: the person's own words for this run (the prompt, earlier messages).
        rules: destinations the person allows (EgressRules).
        max_unconfirmed: calls allowed without a person once the run is tainted and holds
            private data, because they carry nothing that came from private data (the rest
            ask); `[egress] max_unconfirmed_per_run`.
    """

    def __init__(self, *, run_id: str | None = None, person_texts: Iterable[str] = (),
                 rules: EgressRules | None = None,
                 max_unconfirmed: int = DEFAULT_MAX_UNCONFIRMED) -> None:
        self.lock = threading.RLock()
        self.run_id = run_id
        self.tainted_by: list[dict[str, Any]] = []
        self.private_by: list[dict[str, Any]] = []
        self.rules = rules or EgressRules()
        self.max_unconfirmed = max(0, int(max_unconfirmed))
        self.unconfirmed = 0
        self.decisions: list[dict[str, Any]] = []
        self.evidence = Evidence()
        self._person = _Texts()
        self._links = _Texts()
        self._listeners: list[Callable[[dict[str, Any]], Any]] = []
        for text in person_texts:
            self.add_person_text(text)

    @classmethod
    def for_prompt(cls, prompt: str, *, history: Iterable[Any] = (), run_id: str | None = None,
                   rules: EgressRules | None = None,
                   max_unconfirmed: int = DEFAULT_MAX_UNCONFIRMED) -> RunTrust:
        """The state a person's ask starts in: their prompt and their earlier messages are
        their own words; earlier answers in the conversation may carry what earlier runs
        read (private data, instructions from untrusted content), so they count as both."""
        trust = cls(run_id=run_id, rules=rules, max_unconfirmed=max_unconfirmed)
        answered = False
        for message in history or ():
            role = getattr(message, "role", None)
            text = getattr(message, "content", None)
            if role == "user" and isinstance(text, str):
                trust.add_person_text(text)
            elif role in ("assistant", "tool") and text:
                answered = True
        if answered:
            trust.mark_private("the conversation's earlier answers")
            trust.mark_tainted("the conversation's earlier answers (they may carry what "
                               "earlier runs read)")
        trust.add_person_text(prompt)
        return trust

    @classmethod
    def for_ask(cls, config: Any, prompt: str, *, history: Iterable[Any] | None = None,
                run_id: str | None = None, given: Any = None,
                allow_egress: Iterable[str] | None = None) -> RunTrust:
        """An ask's starting state: `given` (a RunTrust or its to_dict() form: a scheduled
        task's), else the person's prompt and history (`for_prompt`); with the person's rules
        (`[egress]` and `allow_egress`) and limit either way."""
        rules = EgressRules.from_config(config, allow_egress or ())
        section = getattr(config, "egress", None)
        limit = getattr(section, "max_unconfirmed_per_run", DEFAULT_MAX_UNCONFIRMED)
        if given is None:
            return cls.for_prompt(prompt, history=history or (), run_id=run_id, rules=rules,
                                  max_unconfirmed=limit)
        trust = given if isinstance(given, RunTrust) else cls.from_dict(given)
        trust.run_id = run_id
        trust.rules = rules.merged(trust.rules)
        return trust

    def count_memory_context(self, written_by: Iterable[str]) -> None:
        """The memory context is read before the first turn: private, and untrusted unless
        every passage is the person's own note (indexed files and a model's notes are not)."""
        self.mark_private("the memory context (passages of your memory)", tool="memory")
        others = sorted({w for w in written_by if w != "person"})
        if others:
            self.mark_tainted(f"the memory context ({', '.join(others)} passages)",
                              tool="memory")

    # --- state -------------------------------------------------------------------------------
    @property
    def tainted(self) -> bool:
        """The run has read untrusted content."""
        return bool(self.tainted_by)

    @property
    def private(self) -> bool:
        """The run holds private data."""
        return bool(self.private_by)

    @property
    def exposed(self) -> bool:
        """Tainted and private at once: its egress is checked by the guard."""
        return bool(self.tainted_by) and bool(self.private_by)

    @property
    def person_texts(self) -> list[str]:
        return list(self._person.items)

    @property
    def public_links(self) -> list[str]:
        return list(self._links.items)

    def on_change(self, listener: Callable[[dict[str, Any]], Any]) -> None:
        """Call `listener(change)` when the run becomes tainted or private
        (change: {"change": "tainted"|"private", call_id, tool, reason, at})."""
        self._listeners.append(listener)

    # --- what happened -----------------------------------------------------------------------
    def mark_tainted(self, reason: str, *, call_id: str | None = None,
                     tool: str | None = None) -> bool:
        """Record that the run read untrusted content; True when that is new."""
        return self._add_mark(self.tainted_by, "tainted", reason, call_id, tool)

    def mark_private(self, reason: str, *, call_id: str | None = None,
                     tool: str | None = None) -> bool:
        """Record that the run holds private data; True when that is new."""
        return self._add_mark(self.private_by, "private", reason, call_id, tool)

    def _add_mark(self, marks: list[dict[str, Any]], change: str, reason: str,
                  call_id: str | None, tool: str | None) -> bool:
        with self.lock:
            first = not marks
            if len(marks) < MAX_MARKS:
                marks.append(_mark(reason, call_id, tool))
        if first:
            event = {"change": change, **marks[0]}
            for listener in list(self._listeners):
                try:
                    listener(event)
                except Exception:  # noqa: BLE001 - a listener never breaks the run
                    pass
        return first

    def observe(self, labels: frozenset[str], *, content: str = "", call_id: str | None = None,
                tool: str | None = None, base_url: str | None = None,
                clean: bool = True) -> None:
        """Apply one result's labels. Links in an untrusted result that is not private are
        kept for link following, but only when the call that fetched it was `clean`: made
        while the run held no private data, or allowed because it carried none (a result
        that may echo what a call sent is no evidence of anything)."""
        if UNTRUSTED in labels:
            self.mark_tainted(f"{tool or 'a tool'} returned untrusted content", call_id=call_id,
                              tool=tool)
        if PRIVATE in labels:
            self.mark_private(f"{tool or 'a tool'} returned private data", call_id=call_id,
                              tool=tool)
        elif UNTRUSTED in labels and clean and content:
            self.add_public_text(content, base_url)

    def add_person_text(self, text: str) -> None:
        """The person's own words (never a model's, never a tool's)."""
        if not isinstance(text, str) or not text:
            return
        with self.lock:
            self._person.items.append(text)
            self._person.chars += len(text)
            self.evidence.add_person_text(text)
            self._enforce_budget()

    def add_public_text(self, text: str, base_url: str | None = None) -> None:
        """A text that carries no private data: its links may be followed."""
        links = extract_links(text, base_url)
        if not links:
            return
        with self.lock:
            for link in dict.fromkeys(links):
                if link not in self.evidence.links:
                    self._links.items.append(link)
                    self._links.chars += len(link)
                    self.evidence.links.add(link)
            self._enforce_budget()

    def _enforce_budget(self) -> None:
        dropped = False
        while self._person.chars + self._links.chars > MAX_TEXT_CHARS:
            # Links go first, then the oldest person texts: forgetting only makes the guard
            # stricter (less is covered).
            victim = self._links if self._links.items else self._person
            if not victim.items:
                break
            victim.chars -= len(victim.items.pop(0))
            dropped = True
        if dropped:
            evidence = Evidence()
            for text in self._person.items:
                evidence.add_person_text(text)
            evidence.add_links(self._links.items)
            self.evidence = evidence

    def record_decision(self, decision: dict[str, Any]) -> None:
        """Keep an egress decision (asked, approved, denied, allowed by rule) for the record."""
        with self.lock:
            if len(self.decisions) < MAX_DECISIONS:
                self.decisions.append(decision)

    # --- serialization -----------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """What the run log, events and `--json` show: no texts, only what happened."""
        with self.lock:
            return {"tainted": self.tainted, "private": self.private,
                    "tainted_by": [dict(m) for m in self.tainted_by[:10]],
                    "private_by": [dict(m) for m in self.private_by[:10]],
                    "unconfirmed_egress": self.unconfirmed,
                    "egress": [dict(d) for d in self.decisions[:50]]}

    def to_dict(self) -> dict[str, Any]:
        """The whole state, JSON-safe and bounded (texts up to MAX_TEXT_CHARS in all)."""
        with self.lock:
            return {"version": 1, "run_id": self.run_id,
                    "tainted_by": [dict(m) for m in self.tainted_by],
                    "private_by": [dict(m) for m in self.private_by],
                    "person_texts": list(self._person.items),
                    "public_links": list(self._links.items),
                    "rules": self.rules.to_dict(), "max_unconfirmed": self.max_unconfirmed,
                    "unconfirmed": self.unconfirmed, "decisions": list(self.decisions)}

    def fork(self, run_id: str | None) -> RunTrust:
        """A new run's state, starting from this one's (its rules, grants and marks) and from
        then on its own: what either reads later does not reach the other."""
        data = self.to_dict()
        data["run_id"] = run_id
        return RunTrust.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> RunTrust:
        """A RunTrust from `to_dict()` output (missing keys: the empty state)."""
        data = data or {}
        trust = cls(run_id=data.get("run_id"), rules=EgressRules.from_dict(data.get("rules")),
                    max_unconfirmed=int(data.get("max_unconfirmed", DEFAULT_MAX_UNCONFIRMED)))
        trust.tainted_by = [dict(m) for m in data.get("tainted_by") or []][:MAX_MARKS]
        trust.private_by = [dict(m) for m in data.get("private_by") or []][:MAX_MARKS]
        trust.unconfirmed = int(data.get("unconfirmed", 0))
        trust.decisions = [dict(d) for d in data.get("decisions") or []][:MAX_DECISIONS]
        for text in data.get("person_texts") or []:
            trust.add_person_text(str(text))
        with trust.lock:
            for link in data.get("public_links") or []:
                link = str(link)
                if link not in trust.evidence.links:
                    trust._links.items.append(link)
                    trust._links.chars += len(link)
                    trust.evidence.links.add(link)
            trust._enforce_budget()
        return trust

    def __repr__(self) -> str:
        return (f"<RunTrust run={self.run_id} tainted={self.tainted} private={self.private} "
                f"unconfirmed={self.unconfirmed}/{self.max_unconfirmed}>")
