"""The vocabulary of provenance: what a tool's results are, and what a call sends out.

Result labels are a frozenset of strings: `PRIVATE` (the person's own data: files, memory,
task lists, run records), `UNTRUSTED` (written by someone else: web pages, search results,
HTTP responses, MCP results, indexed documents, memory a model wrote, incoming messages), both,
or neither (`NEUTRAL`, the empty set: a calculator's number).

An `Egress` is one way a call sends data out: its `kind` (network, channel, mcp, persist, or
unknown for a tool that said nothing), its `destination` (a host[:port], a channel name, an MCP
server name, "memory" or "schedule"), its `method` (an HTTP method, or what a persist call
does) and its `payload`: every piece of data it carries. `url` is kept apart from the payload
because a URL that appeared verbatim in an earlier result is a link being followed, which the
guard judges differently from data a model composed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PRIVATE = "private"
UNTRUSTED = "untrusted"
NEUTRAL: frozenset[str] = frozenset()
LABELS = frozenset({PRIVATE, UNTRUSTED})
# A tool that said nothing about its results: untrusted (they may be anyone's text). Not also
# private: a person's own in-process tools (the documented `@tool` examples) then chain
# without a person; a tool that returns the person's data declares "private" (docs/trust.md).
# MCP servers and bridges, which front mailboxes and file systems, are both (jarvis.mcp).
UNDECLARED_LABELS = frozenset({UNTRUSTED})

# What a tool may declare in ToolSpec.egress; "unknown" is what an undeclared tool gets.
EGRESS_KINDS = ("none", "network", "channel", "mcp", "persist")
UNKNOWN = "unknown"

MAX_PAYLOAD_PIECES = 10_000  # pieces of one call's payload kept (the rest: one marker piece)


def check_labels(value: Any, where: str = "output") -> frozenset[str] | None:
    """`value` as a label set (None stays None: "not declared"); ValueError naming the bad
    label. Accepts a string ("private", "neutral"), an iterable of strings, or None."""
    if value is None:
        return None
    items = [value] if isinstance(value, str) else list(value)
    labels = frozenset(str(v).strip().lower() for v in items if str(v).strip()) - {"neutral"}
    unknown = sorted(labels - LABELS)
    if unknown:
        raise ValueError(f"{where}: unknown label(s) {', '.join(unknown)}; use "
                         f"{PRIVATE!r}, {UNTRUSTED!r}, both, or 'neutral' (an empty list)")
    return labels


def check_egress(value: Any, where: str = "egress") -> str | None:
    """`value` as a declared egress kind (None stays None); ValueError naming the choices."""
    if value is None:
        return None
    if value is False:
        return "none"
    if not isinstance(value, str) or value not in EGRESS_KINDS:
        raise ValueError(f"{where} must be one of {', '.join(EGRESS_KINDS)}, got {value!r}")
    return value


def flatten(value: Any, out: list[str] | None = None, depth: int = 0) -> list[str]:
    """Every string a JSON value holds (keys too, numbers and booleans as text), in order:
    what a call carries out when it sends `value`."""
    out = [] if out is None else out
    if len(out) >= MAX_PAYLOAD_PIECES:
        return out
    if depth > 64:  # arguments are bounded already; this only stops a pathological nesting
        out.append(repr(value)[:10_000])
        return out
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            out.append(str(key))
            flatten(item, out, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            flatten(item, out, depth + 1)
    elif value is None:
        pass
    else:
        out.append(str(value))
    return out


@dataclass(slots=True, frozen=True)
class Egress:
    """One way a call sends data out (see the module docstring)."""

    kind: str
    destination: str
    method: str = ""
    payload: tuple[str, ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, kind: str, destination: str, *, method: str = "", url: str = "",
           payload: Iterable[Any] = (), headers: Any = None) -> Egress:
        """An Egress whose payload pieces are flattened to strings."""
        pieces: list[str] = []
        for item in payload:
            flatten(item, pieces)
        pairs = tuple((str(k), str(v)) for k, v in (headers or {}).items())
        return cls(kind, str(destination), str(method), tuple(pieces), str(url or ""), pairs)

    def _pieces(self) -> list[str]:
        return [self.url, *(f"{k}: {v}" for k, v in self.headers), *self.payload]

    @property
    def size(self) -> int:
        """Bytes (UTF-8) of what the call sends: its URL, headers and every payload piece."""
        return sum(len(p.encode("utf-8", "surrogatepass")) for p in self._pieces())

    def digest(self, chars: int = 12) -> str:
        """A short sha256 of what is sent (the same call shows the same hash everywhere)."""
        import hashlib  # lazy: the executor imports this module, and most runs never hash

        h = hashlib.sha256()
        for piece in self._pieces():
            data = piece.encode("utf-8", "surrogatepass")
            h.update(len(data).to_bytes(8, "big"))
            h.update(data)
        return h.hexdigest()[:chars]

    def where(self) -> str:
        """The destination as a person reads it: "GET 127.0.0.1:8123", "channel phone"."""
        if self.kind == "network":
            return f"{self.method or 'GET'} {self.destination}".strip()
        if self.kind == "channel":
            return f"channel {self.destination}"
        if self.kind == "mcp":
            return f"MCP server {self.destination}"
        if self.kind == "persist":
            return f"{self.destination} ({self.method})" if self.method else self.destination
        if self.kind == UNKNOWN:
            return f"anywhere (tool {self.destination} does not say where its calls send data)"
        return self.destination

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "destination": self.destination, "method": self.method,
                "url": self.url, "headers": [list(h) for h in self.headers],
                "payload": list(self.payload), "size": self.size, "digest": self.digest()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Egress:
        return cls(str(data.get("kind", UNKNOWN)), str(data.get("destination", "")),
                   str(data.get("method", "")), tuple(str(p) for p in data.get("payload") or ()),
                   str(data.get("url", "")),
                   tuple((str(h[0]), str(h[1])) for h in data.get("headers") or ()))


def total_size(egress: Iterable[Egress]) -> int:
    return sum(e.size for e in egress)


def total_digest(egress: Iterable[Egress], chars: int = 12) -> str:
    import hashlib

    h = hashlib.sha256()
    for e in egress:
        h.update(e.digest(64).encode())
    return h.hexdigest()[:chars]
